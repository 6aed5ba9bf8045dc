"""``tunedsl view``: a local, read-only web page over runs and eval results."""
