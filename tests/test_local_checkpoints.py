"""The local backend's checkpoints (checkpoints.py): what global_step_N holds, and a damaged
one named when resuming."""

from __future__ import annotations

import json
import os
import re

import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("transformers")

from .cli_support import cli  # noqa: E402
from .local_support import AGENTS, graph_for, load_weights, run_local  # noqa: E402


def test_checkpoint_reloads_with_the_trained_weights(tiny_model, tmp_path):
    """global_step_N holds a Hugging Face model equal to the one trained, plus optimizer state."""
    graph = graph_for("Arith", tiny_model, tmp_path, "algorithm.save_interval_steps=2")
    summary = run_local(graph, progress=False)
    names = sorted(p.name for p in summary.run_dir.glob("global_step_*"))
    assert names == ["global_step_2", "global_step_4"]
    final = summary.checkpoint
    assert json.loads((final / "trainer_state.json").read_text())["step"] == 4
    assert "state" in torch.load(final / "optimizer.pt")
    before = load_weights(tiny_model)
    after = load_weights(final)
    assert any(not torch.equal(before[k], after[k]) for k in before)  # it did learn something


def test_a_damaged_newest_checkpoint_is_named_and_the_good_one_used_on_request(tiny_model,
                                                                              tmp_path):
    """A checkpoint cut short (a crash or a full disk mid-save): --resume names the file
    that is wrong; --from-good-checkpoint continues from the newest good one. (The first
    run is made in this process, with the same settings as the command lines below: the
    command line's resume is what is tested.)"""
    settings = [f"model.model_path={tiny_model}", f"checkpoint_root_dir={tmp_path}",
                "algorithm.save_interval_steps=2"]
    graph_args = [arg for setting in settings for arg in ("--set", setting)]
    run_local(graph_for("Arith", tiny_model, tmp_path, settings[-1]), progress=False)
    [run_dir] = (tmp_path / "tunedsl").iterdir()
    weights = run_dir / "global_step_4" / "model.safetensors"
    data = weights.read_bytes()
    header = 8 + int.from_bytes(data[:8], "little")  # safetensors: 8-byte length, then JSON
    weights.write_bytes(data[:header + 10])  # the header whole, the tensors cut short
    resume = ["run", f"{AGENTS}:Arith", "--backend", "local", "--no-progress", *graph_args,
              "--resume", str(run_dir)]
    refused = cli(*resume)
    assert refused.returncode == 2
    assert refused.stderr.strip().splitlines()[-1] == (
        f"Error: --resume {run_dir}: the newest checkpoint global_step_4 is damaged "
        "(model.safetensors: Error while deserializing header: incomplete metadata, file not "
        "fully covered); add --from-good-checkpoint to resume from global_step_2, the newest "
        "good one")
    resumed = cli(*resume, "--from-good-checkpoint")
    assert resumed.returncode == 0, resumed.stderr
    assert "resume: skipping global_step_4 (model.safetensors:" in resumed.stderr
    steps = [json.loads(line)["step"] for line in (run_dir / "metrics.jsonl").read_text()
             .splitlines() if "loss" in line]
    assert steps == [1, 2, 3, 4]  # steps 3 and 4 ran again, once each in the file
    assert load_weights(run_dir / "global_step_4")  # whole again


@pytest.mark.parametrize("damage, problem", [
    (lambda data: b"garbage, not an archive" * 10,
     "optimizer.pt: not a saved optimizer state (File is not a zip file)"),
    (lambda data: data[:len(data) // 2],
     "optimizer.pt: not a saved optimizer state (File is not a zip file)"),
    (lambda data: data[:200] + bytes(b ^ 0xFF for b in data[200:400]) + data[400:],
     "optimizer.pt: optimizer/data.pkl fails its checksum (the file is damaged)"),
])
def test_a_damaged_optimizer_state_is_named_and_an_older_checkpoint_used(damage, problem,
                                                                         tiny_model, tmp_path):
    """Garbage, a cut file or overwritten bytes in optimizer.pt: --resume names the file in
    one line (no unpickling traceback), and --from-good-checkpoint goes past it."""
    from tunedsl.errors import ConfigError

    graph = graph_for("Arith", tiny_model, tmp_path, "algorithm.save_interval_steps=2")
    run_dir = run_local(graph, progress=False).run_dir
    optimizer = run_dir / "global_step_4" / "optimizer.pt"
    optimizer.write_bytes(damage(optimizer.read_bytes()))
    with pytest.raises(ConfigError) as caught:
        run_local(graph, resume=run_dir, progress=False)
    message = str(caught.value)
    assert message == (f"resume='{run_dir}': the newest checkpoint global_step_4 is damaged "
                       f"({problem}); add from_good_checkpoint=True to resume from "
                       f"global_step_2, the newest good one")
    summary = run_local(graph, resume=run_dir, progress=False, from_good_checkpoint=True)
    assert summary.steps == 4 and "state" in torch.load(run_dir / "global_step_4" /
                                                         "optimizer.pt")


@pytest.mark.parametrize("closed, kept", [
    ("global_step_4", "{ckpt} cannot be searched; make {ckpt} searchable (chmod u+rx {ckpt})"),
    ("global_step_4/optimizer.pt", "{ckpt}/optimizer.pt cannot be read (Permission denied); "
                                   "make it readable (chmod u+r {ckpt}/optimizer.pt)"),
])
def test_an_unreadable_newest_checkpoint_is_not_called_damaged(closed, kept, tiny_model,
                                                               tmp_path):
    """A newest checkpoint its permissions keep from reading (a copy made by another user)
    was "damaged (trainer_state.json: Permission denied); add --from-good-checkpoint", and
    that advice ran its step again, the whole checkpoint moved aside (sweep 50 B-W6). It is
    refused with its chmod, with --from-good-checkpoint too, and kept. Root ignores file
    permissions: the commands run without the capabilities that let it (setpriv)."""
    from .cli_support import cli_while_closed

    graph = graph_for("Arith", tiny_model, tmp_path, "algorithm.save_interval_steps=2")
    run_dir = run_local(graph, progress=False).run_dir
    metrics = (run_dir / "metrics.jsonl").read_bytes()
    path = run_dir / closed
    mode = path.stat().st_mode & 0o777
    resume = ["run", f"{AGENTS}:Arith", "--backend", "local", "--no-progress",
              "--set", f"model.model_path={tiny_model}", "--set", f"checkpoint_root_dir={tmp_path}",
              "--set", "algorithm.save_interval_steps=2", "--resume", run_dir]
    for more in ([], ["--from-good-checkpoint"]):
        refused = cli_while_closed(path, 0, *resume, *more, restore=mode)
        assert (refused.returncode, refused.stderr.strip().splitlines()[-1]) == (2, (
            f"Error: --resume {run_dir}: the newest checkpoint global_step_4 is unreadable "
            f"(permissions, not damage): {kept.format(ckpt=run_dir / 'global_step_4')}; then "
            f"resume")), refused.stderr
    assert sorted(entry.name for entry in run_dir.iterdir() if "global_step" in entry.name) \
        == ["global_step_2", "global_step_4"]  # none moved aside, none written
    assert (run_dir / "metrics.jsonl").read_bytes() == metrics


def test_eval_of_a_run_directory_names_its_newest_good_checkpoint(tiny_model, tmp_path):
    """``eval --checkpoint RUN_DIR`` named its newest checkpoint even when it held no
    weights (a copy cut short) or could not be read, where run --resume of it names the
    newest good one (sweep 50 B-W2); the one skipped is said, with why (and its chmod)."""
    import shutil

    from .cli_support import cli_while_closed

    run = tmp_path / "run"
    for step in (1, 2):
        shutil.copytree(tiny_model, run / f"global_step_{step}")
    (run / "global_step_2" / "model.safetensors").unlink()
    args = ("eval", f"{AGENTS}:Arith", "--checkpoint", str(run), "-n", "1",
            "-o", str(tmp_path / "r.jsonl"), "--no-progress",
            "--set", f"model.model_path={tiny_model}")
    done = cli(*args)
    assert (done.returncode, done.stderr.strip().splitlines()[-1]) == (2, (
        f"Error: --checkpoint {run}: not a saved model folder (no config.json); give "
        f"{run / 'global_step_1'}, its newest good checkpoint (global_step_2, newer, is "
        f"damaged: no model weights (*.safetensors))"))
    shutil.copy(os.path.join(tiny_model, "model.safetensors"), run / "global_step_2")
    newest = run / "global_step_2"
    done = cli_while_closed(newest, 0, *args)
    assert (done.returncode, done.stderr.strip().splitlines()[-1]) == (2, (
        f"Error: --checkpoint {run}: not a saved model folder (no config.json); give "
        f"{run / 'global_step_1'}, its newest good checkpoint (global_step_2, newer, is "
        f"unreadable (permissions, not damage): {newest} cannot be searched; make {newest} "
        f"searchable (chmod u+rx {newest}))")), done.stderr


def test_a_run_directory_whose_only_whole_checkpoint_is_unreadable_names_its_chmod(
        tiny_model, tmp_path):
    """The newest checkpoint damaged, an older one whole but kept from reading: "none of
    its checkpoints holds a whole model" left out the one that does (sweep 51 A-W6)."""
    import shutil

    from .cli_support import cli_while_closed

    run = tmp_path / "run"
    for step in (1, 2):
        shutil.copytree(tiny_model, run / f"global_step_{step}")
    (run / "global_step_2" / "model.safetensors").unlink()
    older = run / "global_step_1"
    done = cli_while_closed(older / "model.safetensors", 0, "eval", f"{AGENTS}:Arith",
                            "--checkpoint", str(run), "-n", "1", "-o",
                            str(tmp_path / "r.jsonl"), "--no-progress", "--set",
                            f"model.model_path={tiny_model}", restore=0o644)
    weights = older / "model.safetensors"
    assert (done.returncode, done.stderr.strip().splitlines()[-1]) == (2, (
        f"Error: --checkpoint {run}: not a saved model folder (no config.json); none of its "
        f"checkpoints holds a whole model it can read (global_step_2, the newest, is "
        f"damaged: no model weights (*.safetensors)); global_step_1, older, is unreadable "
        f"(permissions, not damage): {weights} cannot be read (Permission denied); make it "
        f"readable (chmod u+r {weights}); then give {older}")), done.stderr


def test_eval_of_a_checkpoint_with_a_cut_header_is_one_line(tiny_model, tmp_path):
    import shutil

    folder = tmp_path / "global_step_9"
    shutil.copytree(tiny_model, folder)
    weights = folder / "model.safetensors"
    weights.write_bytes(weights.read_bytes()[:20])  # the header itself cut
    done = cli("eval", f"{AGENTS}:Arith", "--checkpoint", str(folder), "-n", "1",
               "-o", str(tmp_path / "r.jsonl"), "--no-progress",
               "--set", f"model.model_path={tiny_model}")
    assert done.returncode == 2 and "Traceback" not in done.stderr
    assert done.stderr.strip().splitlines()[-1].startswith(
        f"Error: --checkpoint {folder}: the saved model is damaged (model.safetensors: ")
    assert done.stderr.strip().endswith("); evaluate another checkpoint")


def test_eval_resumes_a_checkpoint_named_another_way(tiny_model, tmp_path):
    """``--checkpoint ckpt/`` or its absolute path resumed results made with ``ckpt``: they
    were compared as text and refused as other settings."""
    import shutil

    folder = tmp_path / "global_step_9"
    shutil.copytree(tiny_model, folder)
    args = ("eval", f"{AGENTS}:Arith", "-n", "1", "-o", str(tmp_path / "r.jsonl"),
            "--no-progress", "--set", f"model.model_path={tiny_model}")
    assert cli(*args, "--checkpoint", str(folder)).returncode == 0
    done = cli(*args, "--checkpoint", f"{folder}{os.sep}", "--resume")
    assert done.returncode == 0, done.stderr


@pytest.fixture
def full_disk(small_disk):
    """A folder on a file system of 1 MB: a checkpoint of the tiny model does not fit."""
    return small_disk("1m")


def test_a_full_disk_while_saving_is_one_line_and_leaves_no_partial_checkpoint(
        tiny_model, full_disk):
    """The disk fills while step 1's checkpoint is written: exit 1, one line saying why and
    how to go on, and no ``.global_step_1.partial`` for a resume to trip on."""
    done = cli("run", "examples.arith.experiment:Arith", "--backend", "local", "--no-progress",
               "--set", f"checkpoint_root_dir={full_disk}", "--set",
               f"model.model_path={tiny_model}", "--set", "train_dataset.total_steps=2",
               "--set", "algorithm.save_interval_steps=1")
    [run_dir] = (full_disk / "tunedsl-examples").iterdir()
    last = done.stderr.strip().splitlines()[-1]
    assert done.returncode == 1, done.stderr[-3000:]
    assert last.startswith(f"Error: cannot write the checkpoint of step 1 in {run_dir} (")
    assert re.search(r"; \d+\.\d MB free on its device\); it has no checkpoint yet; make room "
                     r"\(or fix the folder\) and continue with --resume ", last), last
    assert last.endswith(f"--resume {run_dir}")
    assert sorted(p.name for p in run_dir.iterdir() if "global_step" in p.name) == []


def file_size_limit(size: int):
    """A preexec function: this many bytes at most per file written (``ulimit -f``); past
    it a write fails with EFBIG (Python ignores the SIGXFSZ that comes with it)."""
    import resource

    return lambda: resource.setrlimit(resource.RLIMIT_FSIZE, (size, size))


def test_a_file_size_limit_while_saving_is_one_line_and_the_run_resumes(tiny_model, tmp_path):
    """safetensors reports the failed write as its SafetensorError, which was an internal
    error (sweep 14 T2): it is the full disk's one line, and the run goes on with --resume
    once the limit is lifted."""
    from .cli_support import cli_process

    args = ("run", "examples.arith.experiment:Arith", "--backend", "local", "--no-progress",
            "--set", f"checkpoint_root_dir={tmp_path}", "--set", f"model.model_path={tiny_model}",
            "--set", "train_dataset.total_steps=2", "--set", "algorithm.save_interval_steps=1",
            "--set", "algorithm.eval_interval_steps=5")
    done = cli_process(*args, preexec_fn=file_size_limit(200_000))
    [run_dir] = (tmp_path / "tunedsl-examples").iterdir()
    last = done.stderr.strip().splitlines()[-1]
    assert done.returncode == 1, done.stderr[-3000:]
    assert last == (f"Error: cannot write the checkpoint of step 1 in {run_dir} (Error while "
                    f"serializing: I/O error: "
                    f"File too large (os error 27)); it has no checkpoint yet; make room (or "
                    f"fix the folder) and continue with --resume {run_dir}")
    resumed = cli_process(*args, "--resume", run_dir)
    assert resumed.returncode == 0, resumed.stderr[-3000:]
    assert sorted(p.name for p in run_dir.iterdir() if "global_step" in p.name) == [
        "global_step_1", "global_step_2"]


def test_a_file_size_limit_while_checking_the_trinity_config_is_one_line(tmp_path):
    """check and config write the Trinity YAML to a temporary folder for Trinity's
    validators; a failed write there was a traceback (sweep 14 T2)."""
    from .cli_support import cli_process

    import os

    # (no bytecode written: Python's own import would trip on the limit first)
    done = cli_process("config", "examples.arith.experiment:Arith", "-o", tmp_path / "c.yaml",
                       preexec_fn=file_size_limit(1024),
                       env={**os.environ, "PYTHONDONTWRITEBYTECODE": "1"})
    assert done.returncode == 1
    [line] = done.stderr.strip().splitlines()
    assert re.fullmatch(r"Error: trinity: cannot write the config for Trinity-RFT to check in "
                        r"\S+/tunedsl-fit-\w+ \(File too large\); make room in the temporary "
                        r"folder or point TMPDIR elsewhere", line), line
    assert not (tmp_path / "c.yaml").exists()


def test_a_disk_too_full_for_the_run_directorys_lock_is_one_line(tiny_model, small_disk):
    """A disk with room for the run directory's folders but not its lock file: the lock's
    write was an internal error (OSError: No space left on device)."""
    full = small_disk("16k")  # room for the run files (a page each), none for the lock
    done = cli("run", "examples.arith.experiment:Arith", "--backend", "local", "--no-progress",
               "--set", f"checkpoint_root_dir={full}", "--set", f"model.model_path={tiny_model}")
    last = done.stderr.strip().splitlines()[-1]
    assert done.returncode == 1 and last.startswith(f"Error: run directory {full}/")
    assert last.endswith("cannot write its lock (No space left on device; 0.0 MB free on its "
                         "device); make room (or fix the folder) and run the command again")
