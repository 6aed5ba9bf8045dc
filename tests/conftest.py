"""Session-wide test settings."""

import os

# Local data only: never let `datasets` or the hub client reach the network, in this
# process or in the CLI subprocesses the tests start (they inherit the environment).
os.environ["HF_HUB_OFFLINE"] = "1"
os.environ["HF_DATASETS_OFFLINE"] = "1"

import pytest  # noqa: E402


@pytest.fixture(scope="session")
def tiny_model(tmp_path_factory):
    """The arith example's tiny random model, built once per session into a temp folder."""
    pytest.importorskip("torch")
    from examples.arith.tiny_model import build_tiny_model

    return build_tiny_model(str(tmp_path_factory.mktemp("tiny") / "model"), seed=0)
