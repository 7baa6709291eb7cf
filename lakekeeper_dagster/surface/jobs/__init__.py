"""The code location's jobs: compaction and its maintenance (`compaction`), observation is in `..observations`, and
the partition-management policies (`archive`, `retention`, `merge`) on their shared schedules (`policy`)."""
