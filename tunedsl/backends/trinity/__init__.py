"""Trinity-RFT on Ray: the config writer (no Trinity import) and the Workflow class."""
