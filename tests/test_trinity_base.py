"""Trinity configs read back as settings (config/trinity_base.py): a `[trinity]` value that a
tunedsl setting owns is checked as that setting and named by its Trinity key."""

from __future__ import annotations

from .cli_support import cli


def test_max_timeout_must_be_a_number_on_the_local_backend(tmp_path):
    """A non-numeric Trinity step bound in [trinity] is refused before training, on the
    local backend too (its run directory keeps the Trinity YAML)."""
    done = cli("run", "tests.fixtures.local.agents:Arith", "--backend", "local", "--set",
               "trinity.explorer.max_timeout=ten", "--set", f"checkpoint_root_dir={tmp_path}",
               "--set", "model.model_path=/nowhere")
    assert done.returncode == 2
    assert done.stderr.strip().splitlines()[-1] == (
        "Error: --set: trinity.explorer.max_timeout must be a positive number of seconds (got "
        "'ten')")
