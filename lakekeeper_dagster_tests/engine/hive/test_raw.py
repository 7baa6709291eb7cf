"""A batch's partitions read raw from the metastore in one call, as Spark's catalog names them or the metastore does."""

from __future__ import annotations

from lakekeeper_dagster.engine.hive import raw
from lakekeeper_dagster_tests.tables import make_table


def test_partitions_are_found_by_spec_whatever_the_case_of_its_columns_and_null_where_there_is_none(
    spark, database, data_dir
):
    """The metastore keeps partition column names in lower case; a spec spelled as Spark restores a column's case
    finds the same partition, a spec of no partition gives None, in the order asked."""
    make_table(spark, database, "cased", data_dir, partitions=[{"date": "2024-01-01"}, {"date": "2024-01-02"}])
    client = raw.hive_client(spark)
    specs = [{"date": "2024-01-02"}, {"DATE": "2024-01-01"}, {"date": "2030-01-01"}]
    _, found = raw.partitions(spark, client, database, "cased", specs)
    assert [parameters is not None for parameters in found] == [True, True, False]
