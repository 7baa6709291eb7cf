"""Hive tables as the metastore describes them: tables and units, the catalog, the selection of managed tables,
zero-copy backup tables."""
