"""The engine: catalog, storage, planning and compaction of Hive tables. No Dagster imports here."""
