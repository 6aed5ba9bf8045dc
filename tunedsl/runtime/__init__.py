"""What every backend runs on: the one rollout, datasets, run directories, the preflight
and the chat models tunedsl provides. Never imports a backend."""
