"""The operations: analyze, compaction (and its batches), rollback, cleanup and the audit against a backup."""
