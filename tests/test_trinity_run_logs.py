"""A run whose explorer or trainer loop swallowed an error is a failed run, though
Trinity's launcher reports success: the error is read from the actor's log file, as
Trinity's own logger writes it."""

from __future__ import annotations

import pytest

pytest.importorskip("trinity.utils.log")

from tunedsl.backends.trinity.run_logs import actor_logs, log_ends, swallowed_error  # noqa: E402

from .trinity_support import log_as_trinity as trinity_log  # noqa: E402

ACTORS = ("explorer", "trainer")



def log_as_trinity(log_dir, actor: str, error: str = "") -> None:
    """A step's line, the error the loop swallowed (if any), then its last line."""
    trinity_log(log_dir, actor, ["step 3 done"], error, ["finished"])


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
