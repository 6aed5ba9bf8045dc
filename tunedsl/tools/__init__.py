"""Tools around training: eval, rescore, and the test kit with its pytest plugin."""
