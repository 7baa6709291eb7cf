"""The project's dg defs folder (`[tool.dg.project] defs_module`): `definitions.defs` loads it with
`dg.load_from_defs_folder`, and `dg check defs` / `dg list defs` / `dg utils refresh-defs-state` find it."""
