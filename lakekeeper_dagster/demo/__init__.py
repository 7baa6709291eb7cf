"""The demo: its tables (`tables`), its config file (`config`), and the main job run through Dagster (`run`, the only
module here that loads Dagster)."""
