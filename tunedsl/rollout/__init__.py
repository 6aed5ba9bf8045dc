"""The one rollout every backend, eval and the test kit run: workflow -> judge -> a scored
result (`run`), under deadlines that hold even for code that blocks its loop (`watchdog`)."""
