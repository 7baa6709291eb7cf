"""The engine: Hive tables kept free of small files, safely. No Dagster import anywhere below.

Layers, each importing only those before it: `errors`, `statuses`, `faults` -> `fs` (files over the Hadoop
FileSystem API) -> `hive` (tables, units, catalog, backup tables) -> `plan` (pure Python decisions) -> `protocol`
(journal, lease, swap guards, swap, commit, recovery: the substrate every operation stands on) -> `rewrite`
(reading with the table's schema, codecs, fingerprints) -> `ops` (analyze, compaction, rollback, cleanup, audit,
retention) -> `settings` (the engine's configuration: builds the plan's thresholds and batching and a run's options).

Glossary (one name per concept):
- managed table: an external table the `tables` setting selects that passes `hive.eligibility.refusal`; internal
  table: Hive's MANAGED_TABLE kind (Hive owns its files), which is never managed.
- unit: what an operation works on, one partition or a whole unpartitioned table (`hive.model.Unit`); its plan is a
  `UnitPlan`, its journal entry a `UnitRecord`, its outcome a `UnitResult`.
- partition: a unit's Hive partition name, `date=2024-01-01/ref=FR` (escaped as the metastore prints it); spec: its
  raw values by column.
- live / incoming / retired: a unit's directory readers see, the new content waiting beside it, and the directory the
  swap moves the old content to (hidden `.lk-<role>-<run>-<name>` siblings).
- fingerprint: the row count and an order-insensitive checksum of a set of rows (`rewrite.fingerprint.Fingerprint`),
  taken of what a rewrite or a merge reads and of what it wrote, and compared; nothing else.
- merge: only the partition merge (old fine partitions copied into coarse ones of a companion table behind a union
  view: `plan.merge`, `protocol.merge`, `ops.merge`); concatenation: compaction's byte-level path, files' row groups
  or stripes (`rewrite.concat`), text files or Avro blocks copied into one output file, no value decoded.
- snapshot: the data files a run saw in `live` when it planned; every one must be intact right before the swap.
- run: one journaled operation on one table (`RunKind`), under the table's lease; batch: units of a compaction run
  written, verified, backed up and committed together.
- backup: a zero-copy external table over the retired originals, found by its `lakekeeper.backup.*` properties.
- swap guard: what must hold right before a unit's swap (`protocol.guards.guard_swap`: no writer at work, no
  subdirectory, a renamable directory, the snapshot intact); distinct from verification (a unit's staged output
  against its input fingerprint) and from Dagster's asset checks, which live in the surface.
- commit: the only steps readers see (swap, metastore pointers, cache refresh).
- recovery: finishing (from SWAPPING on) or undoing (before it) a run a crash interrupted, from its journal.
"""
