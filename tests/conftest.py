"""Session-wide test settings."""

import os

# Local data only: never let `datasets` or the hub client reach the network, in this
# process or in the CLI subprocesses the tests start (they inherit the environment).
os.environ["HF_HUB_OFFLINE"] = "1"
os.environ["HF_DATASETS_OFFLINE"] = "1"
