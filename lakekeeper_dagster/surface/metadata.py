"""Every metadata key, run tag, key-value key and run-status group the Dagster surface reads or writes, named once.

The string values are persisted in Dagster instances (event log, run tags, key-value store): changing one orphans
what was recorded under it. Dagster's own keys and statuses are documented but not exported by dagster 1.13;
test_dagster checks the tags against real runs and the status groups against Dagster's.
"""

import dagster as dg

# Observations (observe_partitions_job, hive_partitions_sensor): a unit's figures and a table's summary.
FILE_COUNT = "file_count"  # a unit's data files: the sensor compares it with min_files
NEEDS_COMPACTION = "needs_compaction"  # the plan's decision on a unit: the sensor requests the units where it holds
KIND = "lakekeeper/kind"  # what an observation is, when it is not a unit's figures
SUMMARY_KIND = "summary"  # KIND of a table's summary observation (its units, files, backlog, bytes)
BACKLOG = "backlog"  # a summary's count of units needing compaction
OLDEST_BACKLOG = "oldest_backlog_hours"  # a summary's hours since the longest-waiting unit began to need compaction
SUSPENDED = "suspended"  # a summary's count of suspended units (`engine/protocol/suspension.py`), not in the backlog
SUSPENDED_UNITS = "suspended_units"  # a summary's suspended units, each with why and how to resume it

# The observation job's key-value store (`run_storage` cursor values); each + the asset key's user string.
OBSERVED_SNAPSHOT_KEY = "lakekeeper/observed/"  # a table's observed snapshot: unit -> its last recorded figures
BACKLOG_KEY = "lakekeeper/backlog/"  # how many units of the table's last kept observed snapshot need compaction
COMPACTED_KEY = "lakekeeper/compacted/"  # files compaction runs left in units, over the snapshot (`table_files.py`)
FULL_READ_KEY = "lakekeeper/full_read/"  # when (epoch seconds) the table was last read in full (`surface/changes.py`)

# A compaction's materialization (and archive's), `figures.py`.
STATE = "lakekeeper/state"  # what Dagster's record of a partition stands for: existing (registered), or a run's outcome
RUN_SUMMARY = "summary"  # the run's Markdown summary: figures before/after, backup, the units not compacted
PER_PARTITION = "per_partition"  # the table of a run over several partitions
HISTORY_TABLE = "lakekeeper/history_table"  # where every run's records are (`lakekeeper-dagster history`)
HISTORY_RUNS = "lakekeeper/run_ids"  # the run ids of this materialization's records in it
DIFF = "diff"  # the run's diff per partition, a Markdown table (`lakekeeper-dagster diff`)
OPERATION = "lakekeeper/operation"  # which operation wrote the metadata, when not a compaction ("archive")
TABLE_FILES_BEFORE = "table_files_before"  # the files a full scan of the whole table opened before the run
TABLE_FILES_AFTER = "table_files_after"  # ... and opens after it (the UI plots both over the runs)
TABLE_FILES_FEWER = "table_files_fewer"  # table_files_before / table_files_after, when the run made them fewer

# Dagster's documented metadata keys (TableMetadataSet, UriMetadataSet: not exported by dagster 1.13).
ROW_COUNT_METADATA = "dagster/row_count"  # a partition's rows after its compaction
COLUMN_SCHEMA = "dagster/column_schema"  # a table asset's columns
TABLE_NAME = "dagster/table_name"  # a table asset's DB.TABLE
STORAGE_KIND = "dagster/storage_kind"  # a table asset's storage ("hive")
URI = "dagster/uri"  # a table asset's location

# A job's definition metadata.
NOTICE_KEY = "lakekeeper/location"  # why the code location shows the tables it shows (metastore down, state stale)

# Run tags set by lakekeeper.
TABLE_TAG = "lakekeeper/table"  # DB.TABLE of a run the sensor or a policy schedule requested
RETRY_TAG = "lakekeeper/retry"  # on a run the sensor requested again: how many times in a row its units were
FORCE_TAG = "lakekeeper/force"  # "true": compact even the units the plan would skip

# Dagster's system tags of a partitioned run: the sensor reads a run's units from them.
PARTITION_TAG = "dagster/partition"  # a one-partition run's partition
RANGE_START_TAG = "dagster/asset_partition_range_start"  # a range run's first partition
RANGE_END_TAG = "dagster/asset_partition_range_end"  # a range run's last partition

# Run-status groups (MANAGED, a run of an external system, is in none).
FINISHED = [dg.DagsterRunStatus.SUCCESS, dg.DagsterRunStatus.FAILURE, dg.DagsterRunStatus.CANCELED]  # Dagster's
NOT_FINISHED = [  # Dagster's: every run that may still change data (the sensor skips their units)
    dg.DagsterRunStatus.STARTING,
    dg.DagsterRunStatus.STARTED,
    dg.DagsterRunStatus.SUSPENDED,
    dg.DagsterRunStatus.CANCELING,
    dg.DagsterRunStatus.QUEUED,
    dg.DagsterRunStatus.NOT_STARTED,
]
# A run a worker is executing (or stopping): what may overlap an observation run.
EXECUTING = [dg.DagsterRunStatus.STARTING, dg.DagsterRunStatus.STARTED, dg.DagsterRunStatus.CANCELING]
# NOT_FINISHED but SUSPENDED: a run executing or waiting to start. The observation schedule waits only for these
# (a suspended run has no worker and may stay so; if it resumes, the overlap check keeps the figures right).
QUEUED_OR_EXECUTING = [*EXECUTING, dg.DagsterRunStatus.QUEUED, dg.DagsterRunStatus.NOT_STARTED]
