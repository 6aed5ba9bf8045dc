"""Reading and writing data: task and conversation datasets, JSON and JSON Lines files read
and written one way, a digest of a dataset's bytes, and one pass over its rows' quality."""
