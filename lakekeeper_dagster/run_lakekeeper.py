"""The entry script a `deploy_mode: cluster` submission runs in the YARN ApplicationMaster (spark_submit.script_path
defaults to this file): the `lakekeeper-dagster` command, in-process, with the arguments it was given."""

import sys

from lakekeeper_dagster.cli import main

if __name__ == "__main__":
    sys.exit(main())
