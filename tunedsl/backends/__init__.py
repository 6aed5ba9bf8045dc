"""Backends that run an experiment graph. Each imports its heavy dependencies itself."""
