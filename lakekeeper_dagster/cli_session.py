"""The command line's Spark session: logged in as the Dagster resource logs in, one path for both."""

from __future__ import annotations

import atexit
import logging

from lakekeeper_dagster.config import LakekeeperConfig
from spark_resources.errors import MetastoreError
from spark_resources.hive_session import kerberized_conf, metastore_reachable, open_hive_session
from spark_resources.kerberos import login_for


def open_spark(config: LakekeeperConfig):
    """Spark session for the CLI, logged in as the Dagster resource logs in (`hive_session.open_hive_session`), once
    the metastore answers (a clear error, no retries). The private credential cache goes when the command exits."""
    login = login_for(config.spark_submit.principal, config.spark_submit.keytab, config.spark_submit.krb5_conf)

    def reachable() -> None:
        if not metastore_reachable(config.metastore.uri):
            raise MetastoreError(
                f"the Hive Metastore at {config.metastore.uri} is not reachable. Start the local one with "
                "`lakekeeper-dagster metastore start`, or point metastore.uri / LAKEKEEPER_METASTORE_URI at yours."
            )

    conf = kerberized_conf(config.spark_conf(), login)
    spark, _ = open_hive_session(conf, config.metastore.uri, login, reachable, logging.getLogger(__name__).info)
    if login is not None:
        atexit.register(login.close)
    return spark
