"""Run directories (runs/rundir.py): what a resume of one accepts."""

from __future__ import annotations

import os

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import tunedsl
from tunedsl.errors import ConfigError


def test_resume_refuses_changed_settings_but_allows_a_longer_run(tmp_path):
    """Resuming with another learning rate is refused by name; more steps are fine."""
    pytest.importorskip("torch")
    from examples.arith.tiny_model import build_tiny_model

    model = build_tiny_model(str(tmp_path / "model"))
    base = [f"model.model_path={model}", f"checkpoint_root_dir={tmp_path}",
            "train_dataset.total_steps=2"]
    first = tunedsl.run("tests.fixtures.local.agents:Arith", backend="local", overrides=base,
                        progress=False)
    with pytest.raises(ConfigError) as caught:
        tunedsl.run("tests.fixtures.local.agents:Arith", backend="local", progress=False,
                    overrides=[*base, "algorithm.learning_rate=0.5"], resume=first.run_dir)
    assert ("the run was started with other settings: algorithm.learning_rate (run: 0.001, "
            "now: 0.5)") in str(caught.value)
    longer = tunedsl.run("tests.fixtures.local.agents:Arith", backend="local", progress=False,
                         overrides=[*base[:-1], "train_dataset.total_steps=4"],
                         resume=first.run_dir)
    assert longer.steps == 4 and longer.run_dir == first.run_dir


def _folder(root, files):
    for name, data in files.items():
        (root / name).parent.mkdir(parents=True, exist_ok=True)
        (root / name).write_bytes(data)
    return root


_NAMES = st.sampled_from(["train.jsonl", "a/part-0.parquet", "a/part-1.parquet", "b.csv"])


@settings(max_examples=60, deadline=None)
@given(files=st.dictionaries(_NAMES, st.binary(max_size=64), min_size=1),
       edit=st.data())
def test_a_dataset_digest_follows_its_bytes_and_names_not_its_place(tmp_path_factory, files,
                                                                    edit):
    """A folder's digest is the same wherever it is (a project moved with its data) and
    whatever hidden files it holds; one byte changed, added or a file renamed changes it."""
    from tunedsl.data.digest import bytes_digest

    here = _folder(tmp_path_factory.mktemp("here"), files)
    there = _folder(tmp_path_factory.mktemp("there"), {**files, ".cache/x.lock": b"1"})
    assert bytes_digest(here) == bytes_digest(there)
    name = edit.draw(st.sampled_from(sorted(files)))
    other = edit.draw(st.binary(max_size=64).filter(lambda data: data != files[name]))
    changed = _folder(tmp_path_factory.mktemp("changed"), {**files, name: other})
    assert bytes_digest(changed) != bytes_digest(here)
    moved = _folder(tmp_path_factory.mktemp("renamed"),
                    {("renamed/" + key if key == name else key): data
                     for key, data in files.items()})
    assert bytes_digest(moved) != bytes_digest(here)


def test_a_lock_that_is_a_folder_is_named(tmp_path):
    """It was "cannot write it (Is a directory); make it writable", naming neither."""
    from tunedsl.runs.rundir import locked

    (tmp_path / ".lock").mkdir()
    with pytest.raises(ConfigError) as caught, locked(tmp_path):
        pass
    assert str(caught.value) == (f"run directory {tmp_path}: its lock {tmp_path / '.lock'} is "
                                 f"a folder, where tunedsl keeps a file; remove that folder")


def test_a_judge_scoring_through_an_instance_of_the_user_s_class_is_told_edited(tmp_path):
    """A judge calling ``G.score`` (``G = Grader()`` at module level): an edited method left
    the judge's digest as it was, so a resume mixed two judges' rewards in one run (sweep
    49 B-S1). The instance's class's code is part of it."""
    import importlib.util
    import sys

    from tunedsl.rollout.code import code_digest

    def judge_of(score: str, name: str):
        file = tmp_path / name / "graded.py"  # (one file name, as a new process reads it)
        file.parent.mkdir()
        file.write_text("class Grader:\n    def score(self, response):\n"
                        f"        return {score}\n\n\nG = Grader()\n\n\n"
                        "async def exact(task, response):\n    return G.score(response)\n")
        spec = importlib.util.spec_from_file_location(name, file)
        module = importlib.util.module_from_spec(spec)
        sys.modules[name] = module  # (as an import leaves it: where its classes are found)
        spec.loader.exec_module(module)
        return module.exact

    first, same, edited = (judge_of(score, name) for score, name in (
        ("1.0", "graded_a"), ("1.0", "graded_b"), ("0.5", "graded_c")))
    try:
        assert code_digest(first) == code_digest(same)
        assert code_digest(first) != code_digest(edited)
    finally:
        for name in ("graded_a", "graded_b", "graded_c"):
            sys.modules.pop(name, None)


@pytest.mark.parametrize("folder, suffix", [(False, ".jsonl"), (True, "")])
def test_two_commands_started_together_take_default_outputs_of_their_own(tmp_path, folder,
                                                                         suffix):
    """Two evals started in the same second (two models, by a script) took one default
    results file: the second was refused as if the user had named it, its advice resuming
    the other's file (sweep 49 B-W8). Each default output is claimed as it is named."""
    import datetime

    from tunedsl.runs import run_files

    now = datetime.datetime(2026, 12, 7, 16, 34, 24)
    first, second = (run_files.claimed_default(str(tmp_path / "evals"), "Arith", suffix,
                                               folder=folder, now=now) for _ in range(2))
    assert first == str(tmp_path / "evals" / f"Arith-20261207163424{suffix}")
    assert second == str(tmp_path / "evals" / f"Arith-20261207163424-2{suffix}")
    assert all(os.path.isdir(path) if folder else os.path.isfile(path)
               for path in (first, second))
