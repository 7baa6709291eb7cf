"""Spark session, Kerberos and local Hive Metastore: the resource layer of lakekeeper-dagster."""
