"""`spark_submit.deploy_mode: cluster`: a command that opens Spark runs its driver in a YARN ApplicationMaster.

The command line on the edge node does not open Spark: it runs `spark-submit --master yarn --deploy-mode cluster`
(`render_submit_command`) on the package's entry script (`cli/__main__.py`, unless `script_path` names another)
with the same arguments, the effective config (the file's, with LAKEKEEPER_METASTORE_URI and the flags applied)
shipped with `--files` and named by `--config-file`, LAKEKEEPER_SUBMITTED=1 in the ApplicationMaster's environment,
one attempt only, and without the edge node's PYTHONPATH. There the command runs in-process
(`common.in_application_master`: it never submits again, and does not kinit: spark-submit's --principal/--keytab
logged the ApplicationMaster in). The edge node waits for the application, says its id and where the driver's output
is, and exits 1 when it did not succeed.

Commands that do not open Spark (metastore, cluster, hadoop, generate-config) and `demo run` (Dagster runs it) stay
local. `demo create` is refused: it writes the config file beside the user, which a driver on a node cannot.
"""

from __future__ import annotations

import argparse
import os
import re
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

import yaml

from lakekeeper_dagster.cli.common import SUBMITTED_ENV, in_application_master
from lakekeeper_dagster.config import LakekeeperConfig
from lakekeeper_dagster.engine.errors import ConfigError
from spark_resources.session import require_hadoop_conf
from spark_resources.settings import render_submit_command

ENTRY_SCRIPT = Path(__file__).with_name("__main__.py")
SUBMITTED_CONFIG = "lakekeeper-submitted.yaml"  # the shipped config's name in the ApplicationMaster's directory
LOCAL_COMMANDS = {"metastore", "cluster", "hadoop", "generate-config"}
DEFAULT_SUBMIT_COMMAND = "spark-submit"
# spark-submit says the application's id only in its log (YARN's Client); the id's own form is what is read.
APPLICATION_ID = re.compile(r"\bapplication_\d+_\d+\b")
# What a submission needs whatever extra_conf says: one attempt (YARN must not run a failed command again on its own;
# the user decides, e.g. `recover`), spark-submit waiting for the application (its exit is the command's).
FORCED_CONF = {"spark.yarn.maxAppAttempts": "1", "spark.yarn.submit.waitAppCompletion": "true"}


def wants_submission(args: argparse.Namespace, config: LakekeeperConfig) -> bool:
    """Whether this command runs through spark-submit in cluster deploy mode (refused when it cannot)."""
    settings = config.spark_submit
    if not (settings.enabled and settings.deploy_mode == "cluster") or in_application_master():
        return False
    if not settings.effective_master().startswith("yarn"):
        raise ConfigError(
            f"spark_submit.deploy_mode is cluster with master {settings.effective_master()}: the command line submits "
            "its driver to YARN only (master: yarn). Use deploy_mode: client there. Nothing was done"
        )
    if args.command in LOCAL_COMMANDS or (args.command == "demo" and args.action == "run"):
        return False
    if args.command == "demo":
        raise ConfigError(
            "demo create writes the demo's config file beside you, which a driver in a YARN container cannot: run it "
            "with spark_submit.deploy_mode: client. Nothing was done"
        )
    if args.command == "cleanup" and not (args.yes or args.dry_run):
        raise ConfigError(
            "cleanup with spark_submit.deploy_mode: cluster cannot ask for confirmation (its driver runs in a YARN "
            "container): list the backups with --dry-run, then pass --yes. Nothing was done"
        )
    return True


def submitted_argv(argv: list[str], args: argparse.Namespace) -> list[str]:
    """The driver's arguments: the shipped config, this run's log level, then the subcommand and its arguments as
    given (the options before the subcommand, which all take a value, are dropped)."""
    start = 0
    while start < len(argv) and argv[start].startswith("-"):
        start += 1 if "=" in argv[start] else 2
    log_level = ["--log-level", args.log_level] if args.log_level else []
    return ["--config-file", SUBMITTED_CONFIG, *log_level, *argv[start:]]


def submit_executable(command: str) -> str:
    """`submit_command`; the default `spark-submit`, when none is on PATH, is pyspark's own (bin/spark-submit)."""
    if command != DEFAULT_SUBMIT_COMMAND or shutil.which(command):
        return command
    import pyspark

    return str(Path(pyspark.__file__).parent / "bin" / DEFAULT_SUBMIT_COMMAND)


def submit_environment() -> dict[str, str]:
    """spark-submit's environment: this one without PYTHONPATH, which YARN's Client would put in front of the
    driver's (it names the edge node's paths; the driver imports from the packed environment and py_files)."""
    return {key: value for key, value in os.environ.items() if key != "PYTHONPATH"}


def submission_command(args: argparse.Namespace, argv: list[str], config: LakekeeperConfig, shipped: Path) -> list:
    """The spark-submit command line of this run, `shipped` being the effective config written for the driver."""
    settings = config.spark_submit
    for key, value in settings.extra_conf.items():
        if key in FORCED_CONF and str(value) != FORCED_CONF[key]:
            raise ConfigError(
                f"spark_submit.extra_conf sets {key} to {value!r}; in cluster mode lakekeeper-dagster needs "
                f"{FORCED_CONF[key]!r} there (one attempt: YARN must not run a failed command again by itself; the "
                "command waits for its application). Remove it. Nothing was done"
            )
    settings = settings.model_copy(
        update={
            "submit_command": submit_executable(settings.submit_command),
            "master": settings.effective_master(),
            "extra_files": [*settings.extra_files, f"{shipped}#{SUBMITTED_CONFIG}"],
            "extra_conf": {
                "spark.app.name": f"lakekeeper-dagster {args.command}",
                **settings.extra_conf,
                **FORCED_CONF,
            },
        }
    )
    return render_submit_command(settings, submitted_argv(argv, args), default_script=str(ENTRY_SCRIPT))


def run_submitted(args: argparse.Namespace, argv: list[str], config: LakekeeperConfig) -> int:
    """Submit the command, pass spark-submit's output through (stderr), wait for the application; 0 when it
    succeeded, else 1 with its id and where the driver's output is."""
    require_hadoop_conf(config.spark_submit.effective_master())
    with tempfile.TemporaryDirectory(prefix="lakekeeper-submit-") as scratch:
        shipped = Path(scratch) / "lakekeeper.yaml"
        shipped.write_text(yaml.safe_dump(config.model_dump(mode="json")), encoding="utf-8")
        shipped.chmod(0o600)
        command = submission_command(args, argv, config, shipped)
        try:
            process = subprocess.Popen(
                command, stdin=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True, env=submit_environment()
            )
        except OSError as error:
            raise ConfigError(
                f"spark_submit.submit_command {command[0]} cannot be run ({error.strerror}); set it to the "
                "spark-submit of your Spark installation. Nothing was done"
            ) from None
        app_id = None
        for line in process.stderr:
            sys.stderr.write(line)
            found = APPLICATION_ID.search(line) if app_id is None else None
            if found:
                app_id = found.group()
                print(f"submitted {args.command} as YARN application {app_id} (driver: {SUBMITTED_ENV}=1)", flush=True)
        code = process.wait()
    if app_id is None:  # spark-submit stopped before YARN accepted it, or its log level hid the id
        if code != 0:
            print(f"error: spark-submit exited {code} (its output is above); no YARN application", file=sys.stderr)
            return 1
        print("spark-submit succeeded (its log did not show the application's id)", flush=True)
        return 0
    logs = f"the driver's output: yarn logs -applicationId {app_id}"
    if code != 0:
        print(
            f"error: YARN application {app_id} did not succeed or was lost from view (spark-submit exited {code}; "
            f"`yarn application -status {app_id}` says which); {logs}. If it was changing a table, run "
            "`lakekeeper-dagster recover` for it (once the run's lease has expired, up to 2 minutes).",
            file=sys.stderr,
        )
        return 1
    print(f"YARN application {app_id} succeeded; {logs}", flush=True)
    return 0
