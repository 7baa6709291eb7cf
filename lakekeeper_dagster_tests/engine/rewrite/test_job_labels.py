"""Every Spark job the engine starts is labelled in the Spark UI: `lakekeeper <operation> <db.table>[ partition
<p>]: <step>`, so an operator can tell which table (and partition) a running or failed job belongs to."""

from __future__ import annotations

import re

from lakekeeper_dagster.engine.ops.analyze import analyze_tables
from lakekeeper_dagster.engine.ops.audit import verify_against_backup
from lakekeeper_dagster.engine.ops.compaction import compact_table
from lakekeeper_dagster_tests.tables import DATES, OPTIONS, make_table
from spark_resources.py4j import scala_seq


def _jobs(spark) -> dict[int, str | None]:
    """Every job the driver's status store still holds: id -> description (None when unlabelled)."""
    context = spark._jsc.sc()
    context.listenerBus().waitUntilEmpty()  # the store is fed by the listener bus, asynchronously
    jobs = {}
    for job in scala_seq(context.statusStore().jobsList(None)):
        description = job.description()
        jobs[int(job.jobId())] = str(description.get()) if description.isDefined() else None
    return jobs


def test_every_engine_job_is_labelled_with_its_table_and_partition(spark, database, data_dir):
    table = make_table(spark, database, "ev", data_dir, partitions=DATES, files=4)
    before = max(_jobs(spark), default=-1)

    results = compact_table(spark, database, "ev", OPTIONS)
    audit = verify_against_backup(spark, database, "ev")
    plans = analyze_tables(spark, [(database, "ev")], OPTIONS.thresholds, 3)

    assert [r.status for r in results] == ["compacted", "compacted"]
    assert [c.matches for c in audit] == [True, True]
    assert [p.table for p in plans] == ["ev"]
    started = {job: text for job, text in _jobs(spark).items() if job > before}
    assert started, "the engine started no Spark job: the test would prove nothing"
    label = re.compile(rf"lakekeeper (compact|audit|analyze) {re.escape(table)}( partition (?P<partition>[^:]+))?: .+")
    unlabelled = {job: text for job, text in started.items() if not (text and label.fullmatch(text))}
    assert unlabelled == {}, f"Spark jobs without the engine's label: {unlabelled}"
    texts = sorted(started.values())
    writes = {t for t in texts if ": write " in t}  # one job for the batch (per_unit: test_one_job.py)
    assert writes == {f"lakekeeper compact {table}: write {len(DATES)} partitions, {len(DATES)} file(s), in one job"}
    operations = {label.fullmatch(t)[1] for t in texts}
    assert operations == {"compact", "audit", "analyze"}, texts
