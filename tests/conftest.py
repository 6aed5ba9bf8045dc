"""Session-wide test settings."""

import os

# Local data only: never let `datasets` or the hub client reach the network, in this
# process or in the CLI subprocesses the tests start (they inherit the environment).
os.environ["HF_HUB_OFFLINE"] = "1"
os.environ["HF_DATASETS_OFFLINE"] = "1"

# One torch (OpenMP/MKL) thread per process, in this process and in the CLI subprocesses
# the tests start. The tests run in parallel, one pytest-xdist worker per core: with
# torch's default of a thread per core in every worker the threads fight over the cores,
# and a training test measured six times slower (370 s instead of 56 s, two workers on 2
# cores). Alone, that test takes 29 s on one thread against 26 s on two; and every run
# gets the same numbers however many workers there are. A value already set wins.
for _variable in ("OMP_NUM_THREADS", "MKL_NUM_THREADS"):
    os.environ.setdefault(_variable, "1")

import sys  # noqa: E402

import pytest  # noqa: E402

if "torch" in sys.modules:  # imported by another plugin, before the variable was set
    sys.modules["torch"].set_num_threads(int(os.environ["OMP_NUM_THREADS"]))


@pytest.fixture(scope="session")
def tiny_model(tmp_path_factory):
    """The arith example's tiny random model, built once per session into a temp folder."""
    pytest.importorskip("torch")
    from examples.arith.tiny_model import build_tiny_model

    return build_tiny_model(str(tmp_path_factory.mktemp("tiny") / "model"), seed=0)
