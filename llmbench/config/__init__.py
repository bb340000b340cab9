"""The run configuration: its sections (schema.py), how YAML data becomes them (build.py, yaml_file.py) and
how a config file with its overrides is read (load.py)."""
