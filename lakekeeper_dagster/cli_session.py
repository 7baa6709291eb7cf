"""The command line's Spark session: logged in as the Dagster resource logs in, one path for both."""

from __future__ import annotations

import atexit
import logging
import os

from lakekeeper_dagster.config import LakekeeperConfig
from spark_resources.errors import MetastoreError
from spark_resources.hive_session import kerberized_conf, metastore_reachable, open_hive_session
from spark_resources.kerberos import login_for

# Set in the ApplicationMaster's environment by a `deploy_mode: cluster` submission (cli_submit): this process is the
# submitted driver. It never submits again, and spark-submit's --principal/--keytab did its Kerberos login.
SUBMITTED_ENV = "LAKEKEEPER_SUBMITTED"


def in_application_master() -> bool:
    """Whether this process is the driver a `deploy_mode: cluster` submission started (the re-submission guard)."""
    return os.environ.get(SUBMITTED_ENV) == "1"


def session_conf(config: LakekeeperConfig) -> dict[str, str]:
    """The session's Spark conf. In the ApplicationMaster without the keytab and principal: they name a file of the
    edge node; spark-submit shipped the keytab and logged the ApplicationMaster in with it."""
    if not in_application_master():
        return config.spark_conf()
    settings = config.spark_submit.model_copy(update={"principal": None, "keytab": None})
    return config.model_copy(update={"spark_submit": settings}).spark_conf()


def open_spark(config: LakekeeperConfig):
    """Spark session for the CLI, logged in as the Dagster resource logs in (`hive_session.open_hive_session`), once
    the metastore answers (a clear error, no retries). The private credential cache goes when the command exits."""
    submit = config.spark_submit
    login = None if in_application_master() else login_for(submit.principal, submit.keytab, submit.krb5_conf)

    def reachable() -> None:
        if not metastore_reachable(config.metastore.uri):
            raise MetastoreError(
                f"the Hive Metastore at {config.metastore.uri} is not reachable. Start the local one with "
                "`lakekeeper-dagster metastore start`, or point metastore.uri / LAKEKEEPER_METASTORE_URI at yours."
            )

    conf = kerberized_conf(session_conf(config), login)
    spark, _ = open_hive_session(conf, config.metastore.uri, login, reachable, logging.getLogger(__name__).info)
    if login is not None:
        atexit.register(login.close)
    return spark
