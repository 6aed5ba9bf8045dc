"""Each backend's checks over the graph: listed, every problem at once, before any model.

`LOCAL_CHECKS` and `TRINITY_CHECKS` are lists of small functions over the experiment graph
(as `GRAPH_CHECKS` are); ``tunedsl check --backend B``, ``tunedsl run`` and the backends
themselves run them before a model is loaded or Ray is asked for anything.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

import tunedsl
from tunedsl.api import backend_checks, check
from tunedsl.backends.local.checks import LOCAL_CHECKS, LOCAL_REPORT_CHECKS
from tunedsl.backends.trinity.checks import (
    FLASH_ATTN_ON_TRINITY,
    LORA_ON_TRINITY,
    TRINITY_CHECKS,
    TRINITY_REPORT_CHECKS,
)
from tunedsl.errors import ConfigError

REPO = Path(__file__).resolve().parents[1]
ARITH = "examples.arith.experiment:Arith"
PARSER = ("model.reasoning_parser = 'nope': the local backend reads deepseek_r1 and qwen3 "
          "(as vLLM's parsers of those names do); use one of them, or backend='trinity'")
ALGORITHM = ("algorithm.algorithm_type = 'ppo': the local backend runs grpo, multi_step_grpo, "
             "dapo, gspo, cispo, sapo, rloo, reinforceplusplus, opmd, topr, gigpo, on_policy_distill, sft; "
             "use backend='trinity' for the others")
#: A model folder that does not exist: a command that tried to load it would fail there.
NO_MODEL = ("--set", "model.model_path=/nonexistent/tunedsl-model",
            "--set", "model.reasoning_parser=nope", "--set", "algorithm.algorithm_type=ppo")


def tunedsl_cli(*args: str, cwd: Path = REPO) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "tunedsl", *args], cwd=cwd,
                          capture_output=True, text=True, timeout=300)


@pytest.mark.parametrize("command", [("run", ARITH, "--backend", "local", "--no-progress"),
                                     ("check", ARITH, "--backend", "local")])
def test_run_and_check_report_both_local_problems_before_any_model(command, tmp_path):
    """A bad reasoning parser, an algorithm the local backend lacks and a model folder
    that does not exist are all reported, exit 2, with no model loaded and no run
    directory made: ``check`` says what ``run`` would."""
    done = tunedsl_cli(*command, *NO_MODEL, "--set", f"checkpoint_root_dir={tmp_path}")
    errors = [line for line in done.stderr.splitlines() if line.startswith("Error: ")]
    on_the_command_line = [problem.replace("backend='trinity'", "--backend trinity")
                           for problem in (ALGORITHM, PARSER)]
    assert (done.returncode, errors) == (2, [
        *(f"Error: {problem}" for problem in on_the_command_line),
        "Error: model.model_path: /nonexistent/tunedsl-model is not a folder; the local "
        "backend loads a local Hugging Face model folder and never downloads: download it and "
        "give its folder (for a run on GPUs, check with --backend trinity)"])
    assert "Traceback" not in done.stderr
    assert not any(tmp_path.iterdir())


def test_check_defaults_to_the_backend_auto_picks(tiny_model):
    """Without --backend, check runs the checks of the backend run would choose (local on
    this machine) and says which."""
    graph = tunedsl.load_experiment(ARITH, overrides=["model.reasoning_parser=nope",
                                                      f"model.model_path={tiny_model}"])
    with pytest.raises(ConfigError) as caught:
        check(graph)
    assert caught.value.problems == (PARSER,)
    assert backend_checks("local") == (LOCAL_CHECKS, LOCAL_REPORT_CHECKS)
    assert backend_checks("trinity") == (TRINITY_CHECKS, TRINITY_REPORT_CHECKS)


def test_parts_the_local_backend_does_not_compute_are_refused_before_any_model(tiny_model):
    """An algorithm composed of a part only Trinity has (the sppo loss, the asymre advantage,
    the mix entropy loss and sample strategy) is refused by the local checks in one line
    each, naming the parts it computes; Trinity's checks take it."""
    graph = tunedsl.load_experiment(ARITH, overrides=[
        "algorithm.algorithm_type=multi_step_grpo", "algorithm.policy_loss_fn=sppo",
        "algorithm.advantage_fn=asymre", "algorithm.sample_strategy=mix",
        "algorithm.entropy_loss_fn=mix", f"model.model_path={tiny_model}"])
    with pytest.raises(ConfigError) as caught:
        check(graph, backend="local")
    assert caught.value.problems == (
        "algorithm.policy_loss_fn = 'sppo': the local backend computes cispo, gspo, opmd, ppo, "
        "rec, sapo, sft, topr; use backend='trinity', or one of those",
        "algorithm.advantage_fn = 'asymre': the local backend computes gigpo, grpo, "
        "on_policy_distill, opmd, reinforce, reinforceplusplus, rloo, step_wise_grpo; use "
        "backend='trinity', or one of those",
        "algorithm.entropy_loss_fn = 'mix': the local backend computes default, none; use "
        "backend='trinity', or one of those",
        "algorithm.sample_strategy = 'mix': the local backend computes default, "
        "staleness_control, warmup; use backend='trinity', or one of those")
    from tunedsl.backends.local.advantages import ADVANTAGE_FNS
    from tunedsl.backends.local.checks import LOCAL_PARTS
    from tunedsl.backends.local.losses import LOSS_METRICS

    assert LOCAL_PARTS["policy_loss_fn"] == tuple(sorted(LOSS_METRICS))
    assert LOCAL_PARTS["advantage_fn"] == tuple(sorted({*ADVANTAGE_FNS, "on_policy_distill"}))


def test_check_for_trinity_runs_trinitys_checks_not_the_local_ones(tiny_model):
    """LoRA is fine locally but refused for Trinity 0.6.0; 'ppo' is fine for Trinity."""
    graph = tunedsl.load_experiment(ARITH, overrides=["model.lora.rank=4",
                                                      "algorithm.algorithm_type=ppo",
                                                      f"model.model_path={tiny_model}"])
    with pytest.raises(ConfigError) as caught:
        check(graph, backend="trinity")
    assert caught.value.problems == (LORA_ON_TRINITY.format(local="backend='local'"),)
    assert caught.value.problems[0].endswith(
        "train LoRA with backend='local', or remove model.lora for Trinity")
    with pytest.raises(ConfigError) as caught:
        check(graph, backend="local")
    assert caught.value.problems == (ALGORITHM,)


def test_local_checks_list_every_problem_of_every_model():
    """Every check contributes its lines, auxiliary models' parsers included, in the
    list's order."""
    graph = tunedsl.load_experiment(ARITH, overrides=[
        # a model folder that is not there (the example's own, tiny-model, is there once
        # README's main job has built it)
        "algorithm.algorithm_type=rec", "model.reasoning_parser=r1", "model.model_path=nowhere",
        "auxiliary_models.judge.model_path=m", "auxiliary_models.judge.reasoning_parser=x",
        "tinker.rank=8"])
    lines = [line for check_fn in LOCAL_CHECKS for line in check_fn(graph)]
    assert [line.split(":")[0] for line in lines] == [
        "tinker", "algorithm.algorithm_type = 'rec'", "model.reasoning_parser = 'r1'",
        "auxiliary_models.judge.reasoning_parser = 'x'", "model.model_path",
        "auxiliary_models.judge.model_path"]


def refused_on_trinity(target, *overrides):
    """The problems ``check --backend trinity`` refuses ``target`` with."""
    with pytest.raises(ConfigError) as caught:
        check(tunedsl.load_experiment(target, overrides=list(overrides)), backend="trinity")
    return caught.value.problems


def test_trinity_refuses_what_its_trainer_would_get_wrong_all_at_once():
    """Trinity 0.6.0 keeps the newest checkpoints only, and verl recomputes log-probs at
    model.temperature with no top-p or top-k: vLLM's processed log-probs would not match."""
    assert refused_on_trinity(ARITH, "algorithm.keep_best_checkpoint=true", "model.top_p=0.9") \
        == ("algorithm.keep_best_checkpoint: Trinity-RFT 0.6.0 keeps only the newest "
            "trainer.max_checkpoints_to_keep checkpoints and has no notion of the best; remove "
            "it for backend='trinity' (algorithm.keep_checkpoints still applies)",
            "model: sampling with top_p=0.9, which Trinity's trainer never applies, so the PPO "
            "ratio of every trained token would be biased; train on Trinity with model.top_p = "
            "1.0 and neither top_k nor a repetition_penalty")
    assert refused_on_trinity(ARITH, "trinity.explorer.rollout_model.top_k=20")[0].startswith(
        "model: sampling with top_k=20, which Trinity's trainer never applies")


@pytest.fixture
def gpu_install(tmp_path, monkeypatch):
    """This environment as a GPU install sees it: vLLM's distribution installed (metadata
    only: nothing imports it), and ``flash_attn(source)`` puts a flash_attn package on the
    path whose ``__init__`` is ``source``."""
    import importlib

    site = tmp_path / "site"
    (site / "vllm-0.23.0.dist-info").mkdir(parents=True)
    (site / "vllm-0.23.0.dist-info" / "METADATA").write_text(
        "Metadata-Version: 2.1\nName: vllm\nVersion: 0.23.0\n")
    monkeypatch.syspath_prepend(str(site))
    for name in ("flash_attn", "flash_attn.bert_padding"):
        monkeypatch.delitem(sys.modules, name, raising=False)

    def flash_attn(source: str) -> None:
        (site / "flash_attn").mkdir()
        (site / "flash_attn" / "__init__.py").write_text(source)
        (site / "flash_attn" / "bert_padding.py").write_text("")
        importlib.invalidate_caches()

    importlib.invalidate_caches()
    return flash_attn


def test_a_gpu_install_without_flash_attn_is_refused_naming_the_fix(gpu_install):
    """Trinity's verl trainer imports flash_attn every step whatever the attention
    (tests/test_trinity_verl_config.py shows it), so a GPU install that cannot import it
    is refused before anything starts; so is one built for another torch."""
    assert refused_on_trinity(ARITH) == (FLASH_ATTN_ON_TRINITY.format(
        why="ModuleNotFoundError: No module named 'flash_attn'", local="backend='local'"),)
    assert FLASH_ATTN_ON_TRINITY.format(why="X", local="--backend local") == (
        "trinity: Trinity-RFT 0.6.0's verl trainer imports flash_attn on every training step, "
        "whatever the attention (its padding helper calls verl's unpad_input), and flash-attn "
        "does not import here (X); install flash-attn built for this torch and CUDA (pip "
        "install flash-attn --no-build-isolation, see docs/getting-started/install.md, \"GPU install\"), or train "
        "with tinker or --backend local")
    gpu_install("raise ImportError('flash_attn_2_cuda.so: undefined symbol: _ZN3c10')")
    assert refused_on_trinity(ARITH) == (FLASH_ATTN_ON_TRINITY.format(
        why="ImportError: flash_attn_2_cuda.so: undefined symbol: _ZN3c10",
        local="backend='local'"),)


def test_a_gpu_install_with_flash_attn_passes(gpu_install):
    gpu_install("")
    assert check(tunedsl.load_experiment(ARITH), backend="trinity")


def test_trinity_refuses_a_first_rollout_that_samples_otherwise_than_the_trainer(tiny_model):
    """The preflight's scripted rollout shows the workflow's own sampling arguments."""
    target = "tests.fixtures.trinity_rollouts:Cooler"
    assert refused_on_trinity(target) == (
        "@workflow cooler (tests/fixtures/trinity_rollouts.py:46): its call 1 of the trained "
        "model on the first task sets temperature=0.3, while Trinity's trainer recomputes "
        "log-probs at model.temperature = 1; the PPO ratio of its tokens would be biased, so "
        "set the sampling on Model(...) and drop it from the call",)
    # the local one scores it
    assert check(tunedsl.load_experiment(target, overrides=[f"model.model_path={tiny_model}",
                                                            "model.max_model_len=64",
                                                            "model.max_tokens=8"]),
                 backend="local")


def test_trinity_refuses_a_first_rollout_without_a_model_call_as_local_does():
    assert refused_on_trinity("tests.fixtures.trinity_rollouts:NoCall") == (
        "@workflow from_the_task (tests/fixtures/trinity_rollouts.py:10) never called the model "
        "on the first task, so there is nothing to train; call await model.chat(...)",)


def test_a_cosine_schedule_over_unknown_trainer_steps_is_refused():
    """Two calls a rollout make an unknown number of Trinity trainer steps per explorer step."""
    assert refused_on_trinity("tests.fixtures.multi_turn:MultiTurn",
                              "algorithm.lr_scheduler=cosine") == (
        "algorithm.lr_scheduler = 'cosine': on Trinity a trainer step takes "
        "buffer.train_batch_size model calls, and this workflow's rollout made 2 on the first "
        "task, so the trainer's step count (over which verl decays the learning rate) is not "
        "known before the run; use 'constant', or set trinity.trainer.total_steps to the steps "
        "you expect",)


def test_check_for_trinity_names_what_runs_differently_there():
    """Notes, not refusals: trainer steps per explorer step for a multi-call workflow, and
    no eval after the last step (the example's 4 steps, every 25)."""
    from tunedsl.checks.preflight import Note

    notes = [line for line in check(tunedsl.load_experiment(
        "tests.fixtures.multi_turn:MultiTurn"), backend="trinity") if isinstance(line, Note)]
    assert notes == [
        "trinity: the first task's rollout made 2 calls of the trained model; on Trinity each "
        "call is one experience, an explorer step makes about 8 (4 rollouts) and a trainer "
        "step takes 4 of them (buffer.train_batch_size), so each explorer step trains about 2 "
        "trainer steps, and algorithm.save_interval_steps counts trainer steps (the local "
        "backend trains once per step on every call)"]
    # from the real train batch: an explicit one changes the count (it said 2 regardless)
    notes = [line for line in check(tunedsl.load_experiment(
        "tests.fixtures.multi_turn:MultiTurn", overrides=["trinity.buffer.train_batch_size=16"]),
        backend="trinity") if isinstance(line, Note)]
    assert notes == [
        "trinity: the first task's rollout made 2 calls of the trained model; on Trinity each "
        "call is one experience, an explorer step makes about 8 (4 rollouts) and a trainer "
        "step takes 16 of them (buffer.train_batch_size), so each explorer step trains about "
        "0.5 trainer steps, and algorithm.save_interval_steps counts trainer steps (the local "
        "backend trains once per step on every call)"]
    notes = [line for line in check(tunedsl.load_experiment(
        "examples.math_agent.experiment:MathAgent"), backend="trinity") if isinstance(line, Note)]
    assert notes == [
        "trinity: Trinity evaluates at step 0 and every 25 steps but not after the last one, "
        "so step 4 is not evaluated (the local backend evaluates after its last step too); "
        "evaluate the last checkpoint with tunedsl eval"]


@pytest.mark.parametrize("entry, sets", [
    ("buffer:\n  explorer_input:\n    taskset:\n      rollout_args:\n        top_k: 5\n",
     "buffer.explorer_input.taskset.rollout_args.top_k = 5 samples the trained model with "
     "top_k=5"),
    ("explorer:\n  rollout_model:\n    repetition_penalty: 1.1\n",
     "explorer.rollout_model.repetition_penalty = 1.1 samples the trained model with "
     "repetition_penalty=1.1")])
def test_trinity_refuses_biased_sampling_a_base_yaml_sets(entry, sets, tmp_path):
    """The workflow sends a base YAML's top_k (in extra_body, where vLLM reads it) and then
    refuses the call, as it refuses any that samples otherwise than the trainer scores: every
    training rollout of the run would fail. check refuses it first, naming the file."""
    from trinity.common.config import GenerationConfig, InferenceModelConfig

    from tunedsl.backends.trinity.checks import ratio_bias
    from tunedsl.backends.trinity.workflow import sampling_settings

    base = tmp_path / "base.yaml"
    base.write_text(entry)
    assert refused_on_trinity(ARITH, f"trinity_config={base}") == (
        f"trinity_config {base}: {sets}, which Trinity's trainer never applies, so the PPO "
        f"ratio of every trained token would be biased; remove it (train on Trinity with "
        f"model.top_p = 1.0 and neither top_k nor a repetition_penalty)",)
    # What the run did with the top_k: sent it where vLLM reads it, then refused the call.
    sent = sampling_settings(GenerationConfig(top_k=5),
                             InferenceModelConfig(max_response_tokens=64))
    assert sent == {"extra_body": {"top_k": 5}}
    assert ratio_bias(sent, 1.0) == "top_k=5, which Trinity's trainer never applies"


WITHOUT_TORCH = """\
import runpy, sys
sys.modules.update(torch=None, transformers=None)  # Python's own "not installed here"
sys.argv = ["tunedsl", *sys.argv[1:]]
runpy.run_module("tunedsl", run_name="__main__")
"""


@pytest.mark.parametrize("command", [
    ("check", "exp.py:E"),
    ("run", "exp.py:E", "--no-progress"),
    ("run", "exp.py:E", "--backend", "local", "--no-progress"),
    ("eval", "exp.py:E", "--checkpoint", "some/folder", "-n", "1"),
])
def test_without_the_local_extra_the_local_backend_says_how_to_install_it(tmp_path, command):
    """Installed without its ``local`` extra (no torch), ``check``, ``run`` and ``eval
    --checkpoint`` ended in an internal error (ModuleNotFoundError); now one line with the
    install command, exit 2, and no run directory."""
    (tmp_path / "exp.py").write_text(
        "from tunedsl import *\n"
        "from examples.arith.experiment import add, exact\n"
        "@experiment\nclass E:\n    workflow = add\n    judge = exact\n"
        "    train_dataset = Dataset('data', split='train')\n"
        "    model = Model('served-model', max_model_len=4096)\n"
        "    algorithm = Algorithm('grpo', group_size=2, batch_size=2)\n"
        "    checkpoint_root_dir = 'runs'\n")
    (tmp_path / "data").mkdir()
    (tmp_path / "data" / "train.jsonl").write_text('{"question": "1+1", "answer": "2"}\n')
    done = subprocess.run([sys.executable, "-c", WITHOUT_TORCH, *command], cwd=tmp_path,
                          capture_output=True, text=True, timeout=300,
                          env={**__import__("os").environ, "PYTHONPATH": str(REPO)})
    errors = [line for line in done.stderr.splitlines() if line.startswith("Error")]
    assert (done.returncode, errors) == (2, [
        'Error: the local backend needs torch and transformers, which are not installed; '
        'install them with: pip install "tunedsl[local]"']), done.stderr[-3000:]
    assert not (tmp_path / "runs").exists()


def test_a_home_folder_read_from_the_environment_is_refused_for_trinity(tmp_path, monkeypatch):
    """``train_dataset.path = ${env:DP}`` with ``DP='~/data'`` (or a ``~`` default):
    tunedsl read the home folder, and the YAML kept ``${oc.env:DP}``, which Trinity reads
    as ``~/data``: a hub id for its reader, ``./~/ck`` for a checkpoint folder (sweep 29
    A-S2, the part left)."""
    from tunedsl.backends.trinity.checks import check_paths_from_the_environment

    home = tmp_path / "home"
    (home / "data").mkdir(parents=True)
    (home / "data" / "train.jsonl").write_text('{"question": "1+1=", "answer": "2"}\n')
    monkeypatch.setenv("HOME", str(home))
    monkeypatch.setenv("TUNEDSL_T_DP", "~/data")
    monkeypatch.delenv("TUNEDSL_T_CK", raising=False)
    graph = tunedsl.load_experiment("examples.math_agent.experiment:MathAgent", overrides=[
        "train_dataset.path=${env:TUNEDSL_T_DP}", "checkpoint_root_dir=${env:TUNEDSL_T_CK,~/ck}"])
    assert graph.train_dataset.path == str(home / "data")  # as tunedsl reads it
    said = ("the Trinity config keeps {template} for Trinity to read, {read!r}, which it takes "
            "as a path under a folder named '~', not the home folder (tunedsl read {here!r}); "
            "give the variable (or its default) an absolute path")
    assert sorted(check_paths_from_the_environment(graph)) == [
        "checkpoint_root_dir: " + said.format(template="${oc.env:TUNEDSL_T_CK,'~/ck'}",
                                              read="~/ck", here=str(home / "ck")),
        "train_dataset.path: " + said.format(template="${oc.env:TUNEDSL_T_DP}", read="~/data",
                                             here=str(home / "data"))]
    monkeypatch.setenv("TUNEDSL_T_DP", str(home / "data"))  # absolute: as both read it
    monkeypatch.setenv("TUNEDSL_T_CK", str(tmp_path / "ck"))
    assert check_paths_from_the_environment(tunedsl.load_experiment(
        "examples.math_agent.experiment:MathAgent", overrides=[
            "train_dataset.path=${env:TUNEDSL_T_DP}",
            "checkpoint_root_dir=${env:TUNEDSL_T_CK,~/ck}"])) == []


def test_a_relative_path_read_from_the_environment_in_another_folder_is_refused(
        tmp_path, monkeypatch):
    """``path = "${env:DP}"`` in sub/tunedsl.toml with DP=data, run from the folder above:
    tunedsl read sub/data, and Trinity reads ``data`` from the folder it runs in, another
    dataset; check passed (sweep 31 A-S2). The same variable given with --set is read from
    the current folder by both, and passes."""
    import shutil

    from tunedsl.backends.trinity.checks import check_paths_from_the_environment

    sub = tmp_path / "sub"
    shutil.copytree(Path(__file__).parents[1] / "examples" / "arith" / "data", sub / "data")
    shutil.copytree(sub / "data", tmp_path / "data")
    (sub / "exp.py").write_text(  # its train_dataset from its tunedsl.toml
        "from examples.arith.experiment import add, exact\n"
        "from tunedsl import Model, experiment\n\n\n"
        "@experiment\nclass Arith:\n    workflow = add\n    judge = exact\n"
        "    model = Model('m', max_model_len=64)\n")
    (sub / "tunedsl.toml").write_text('[train_dataset]\npath = "${env:TUNEDSL_T_DP}"\n')
    monkeypatch.chdir(tmp_path)
    monkeypatch.syspath_prepend(str(Path(__file__).parents[1]))
    monkeypatch.setenv("TUNEDSL_T_DP", "data")
    graph = tunedsl.load_experiment(f"{sub / 'exp.py'}:Arith")
    assert check_paths_from_the_environment(graph) == [
        f"train_dataset.path: the Trinity config keeps ${{oc.env:TUNEDSL_T_DP}} for Trinity to "
        f"read, 'data', a relative path it reads from the folder it runs in, where tunedsl read "
        f"it beside the file that names it ({str(sub / 'data')!r}); give the variable (or its "
        f"default) an absolute path"]
    (sub / "tunedsl.toml").unlink()
    here = tunedsl.load_experiment(f"{sub / 'exp.py'}:Arith",
                                   overrides=["train_dataset.path=${env:TUNEDSL_T_DP}"])
    assert check_paths_from_the_environment(here) == []
