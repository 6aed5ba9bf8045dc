"""From declarations to one experiment graph: import strings, paths, settings layers
(TOML, the class, ``--set``, a base Trinity YAML) and the graph itself."""
