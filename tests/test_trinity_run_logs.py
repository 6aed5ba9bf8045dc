"""A run whose explorer or trainer loop swallowed an error is a failed run, though
Trinity's launcher reports success: the error is read from the actor's log file, as
Trinity's own logger writes it."""

from __future__ import annotations

import subprocess
import sys
import textwrap

import pytest

pytest.importorskip("trinity.utils.log")

from tunedsl.backends.trinity.run_logs import actor_logs, log_ends, swallowed_error  # noqa: E402

ACTORS = ("explorer", "trainer")

#: What Trinity 0.6.0's explorer and trainer loops log when a step raises
#: (explorer/explorer.py and trainer/trainer.py), through its actor logger.
LOG_AS_TRINITY = textwrap.dedent('''\
    import os, sys, traceback
    from trinity.utils.log import get_logger

    actor, error = sys.argv[1], sys.argv[2]
    logger = get_logger(actor, in_ray_actor=True)
    logger.info("step 3 done")
    if error:
        try:
            raise ValueError(error)
        except Exception:
            if actor == "explorer":
                logger.error(f"Error in Explorer: {traceback.format_exc()}")
            else:
                logger.error(f"Error in Trainer:\\n{traceback.format_exc()}")
    logger.info("finished")
''')


def log_as_trinity(log_dir, actor: str, error: str = "") -> None:
    subprocess.run([sys.executable, "-c", LOG_AS_TRINITY, actor, error], check=True,
                   env={"TRINITY_LOG_DIR": str(log_dir), "PATH": "/usr/bin:/bin"},
                   capture_output=True, timeout=120)


@pytest.mark.parametrize("actor", ACTORS)
def test_an_error_the_loop_swallowed_is_found_with_its_exception(tmp_path, actor):
    """The error's last line (the exception) is named with the log file it is in."""
    ends = log_ends(actor_logs(tmp_path, ACTORS))
    log_as_trinity(tmp_path, actor, "the reward is not a number")
    assert swallowed_error(ends, tmp_path, ACTORS) == (
        f"{tmp_path / f'{actor}.log'}: ValueError: the reward is not a number")


def test_a_clean_run_and_an_earlier_runs_error_are_not_failures(tmp_path):
    """Only what this run appended counts: a resumed run's log keeps the last run's
    error above where this run began."""
    log_as_trinity(tmp_path, "trainer", "from the run before the resume")
    ends = log_ends(actor_logs(tmp_path, ACTORS))
    log_as_trinity(tmp_path, "trainer")
    log_as_trinity(tmp_path, "explorer")
    assert (tmp_path / "trainer.log").read_text().count("Error in Trainer") == 1
    assert swallowed_error(ends, tmp_path, ACTORS) is None
