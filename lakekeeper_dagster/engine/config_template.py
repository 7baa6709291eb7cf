"""The fully commented template written by `lakekeeper-dagster generate-config`."""

CONFIG_TEMPLATE = """\
# lakekeeper-dagster configuration. Every key is optional; the values shown are the defaults.
# Path: --config-file, else $LAKEKEEPER_CONFIG, else ./lakekeeper.yaml.

# --- Lakekeeper's keys (same meaning) ---------------------------------------------------------
# Target file size (the HDFS block size) in MB: target files = ceil(partition bytes / block size).
block_size_mb: 128
# Compact a partition when its typical file is smaller than block_size_mb / this ratio.
compaction_ratio_threshold: 10.0
# Which "typical" file size: average (Lakekeeper's rule) or median (robust against skew).
size_statistic: average
# Prefix of backup table names (backups are found by their table properties, never by this prefix).
backup_prefix: __bkp
# Analyze only, never write. A value here is honoured unless --dry-run/--no-dry-run is given.
dry_run: false
log_level: INFO
# Refresh metastore statistics of each compacted partition after the swap.
analyze_after_compaction: false
# Sort before writing, per table (partition columns in the list are ignored with a note).
sort_columns: {}
#   mydb.events: [event_type, id]

# --- How a compaction run batches partitions -------------------------------------------------------
# A batch's partitions are written by concurrent Spark jobs in one session, verified in one Spark job and registered
# and committed with one metastore call each; its staged copies need free space together (max_mb bounds that).
batching:
  concurrent_jobs: 4             # Spark write jobs at once (1: one partition after another)
  max_partitions: 100
  max_mb: 8192

# --- Which tables are managed (assets in Dagster, default scope of the CLI) ----------------------
tables:
  databases: []          # every table of these databases ...
  tables: []             # ... and these DB.TABLE names
  include: ["*"]         # glob patterns on DB.TABLE
  exclude: []

# --- Hive Metastore --------------------------------------------------------------------------------
metastore:
  uri: thrift://127.0.0.1:9083   # also $LAKEKEEPER_METASTORE_URI
  home: .lakekeeper              # local server's Derby database, warehouse, pid and log files
  warehouse_dir: null            # default: <home>/warehouse

# --- Sensors ---------------------------------------------------------------------------------------
sensor:
  min_files: 2                   # request compaction only above this many files
  minimum_interval_seconds: 300
  max_runs_per_tick: 10
  max_partitions_per_run: 200
  failure_backoff_seconds: 3600  # do not re-request a partition whose compaction failed this recently
  max_observations_per_tick: 20000  # observations read per tick; the cursor pages through the rest
table_overrides: {}
#   mydb.events: {min_files: 50}

# --- Observation job (file counts per partition, recorded as asset observations) -----------------
observation:
  cron_schedule: "0 * * * *"     # when observe_partitions_schedule runs (it is off until turned on)

# --- Dagster asset metadata ------------------------------------------------------------------------
asset_owners: []                 # e.g. ["team:data-platform", "someone@example.com"]
asset_tags: {}

# --- Spark (Lakekeeper's spark_submit block) ------------------------------------------------------
# enabled: false runs Spark in local mode in the calling process.
spark_submit:
  enabled: false
  submit_command: spark-submit
  master: null                   # default: yarn when enabled, else local[*]
  deploy_mode: null              # client | cluster
  principal: null                # Kerberos principal, e.g. user@REALM.COM
  keytab: null                   # path to its keytab
  krb5_conf: null                # krb5.conf to use instead of the system one
  queue: null
  archives: null                 # e.g. hdfs:///envs/lakekeeper_env.tar.gz#lakekeeper_env
  python_env: null               # e.g. ./lakekeeper_env/bin/python
  executor_memory: null
  num_executors: null
  executor_cores: null
  driver_memory: null
  script_path: run_lakekeeper.py
  extra_conf: {}
  extra_files: []
  py_files: []
"""
