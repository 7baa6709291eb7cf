"""`python -m lakekeeper_dagster.cli`, and the entry script a `deploy_mode: cluster` submission runs in the YARN
ApplicationMaster (spark_submit.script_path defaults to this file): the command line, in-process, with the arguments
it was given."""

import sys

from lakekeeper_dagster.cli.app import main

if __name__ == "__main__":
    sys.exit(main())
