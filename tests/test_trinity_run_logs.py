"""A run whose explorer or trainer loop swallowed an error is a failed run, though
Trinity's launcher reports success: the error is read from the actor's log file, as
Trinity's own logger writes it."""

from __future__ import annotations

import pytest

pytest.importorskip("trinity.utils.log")

from tunedsl.backends.trinity.run_logs import (  # noqa: E402
    actor_logs,
    log_ends,
    stale_sync,
    swallowed_error,
    trainer_cut_off,
)

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


#: Trinity 0.6.0's own messages, as its trainer and explorer log them (trainer/trainer.py
#: ``sync_weight``, explorer/explorer.py, trainer/trainer.py ``train``).
TRAINER_STALE = ("NCCL weight sync failed (Explorer may have exited); continuing with stale "
                 "weights:\nTraceback (most recent call last):")
TRAINER_SKIPPED = "NCCL weight sync skipped: Explorer has stopped or is unreachable."
EXPLORER_SKIPPED = "Trainer is not ready to sync weight. Skipping sync weight."
FINISHED = "--------------------\n> Trainer finished.\n--------------------"


@pytest.mark.parametrize("actor, line", [("trainer", TRAINER_STALE),
                                         ("trainer", TRAINER_SKIPPED),
                                         ("explorer", EXPLORER_SKIPPED)])
def test_a_weight_sync_that_went_stale_is_found_with_its_log(tmp_path, actor, line):
    """Past synchronizer.sync_timeout Trinity goes on with stale weights, logging only a
    warning; tunedsl names it with the file (the run then says so)."""
    log_as_trinity(tmp_path, actor)  # a run before this one: not counted
    ends = log_ends(actor_logs(tmp_path, ACTORS))
    assert stale_sync(ends, tmp_path, ACTORS) is None
    trinity_log(tmp_path, actor, ["Trainer sync_weights at step 3 started.", line], "", [])
    assert stale_sync(ends, tmp_path, ACTORS) == (
        f"{tmp_path / f'{actor}.log'}: {line.splitlines()[0]}")


def test_a_trainer_cut_off_before_its_final_checkpoint_is_found(tmp_path):
    """Trinity's trainer logs '> Trainer finished.' after its final save; a trainer the
    launcher shut down (it waits sync_timeout once the explorer has finished) never does."""
    ends = log_ends(actor_logs(tmp_path, ACTORS))
    assert trainer_cut_off(ends, tmp_path, "trainer") is None  # no trainer ran here
    trinity_log(tmp_path, "trainer", ["Training at step 4 finished."], "", [])
    assert trainer_cut_off(ends, tmp_path, "trainer") == tmp_path / "trainer.log"
    trinity_log(tmp_path, "trainer", [FINISHED], "", [])
    assert trainer_cut_off(ends, tmp_path, "trainer") is None
    ends = log_ends(actor_logs(tmp_path, ACTORS))  # a resume: only what it appends counts
    trinity_log(tmp_path, "trainer", ["Training at step 5 finished."], "", [])
    assert trainer_cut_off(ends, tmp_path, "trainer") == tmp_path / "trainer.log"
