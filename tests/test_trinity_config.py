"""The generated YAML, loaded and validated by the real Trinity-RFT 0.6.0 (no mocks)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
import yaml

import tunedsl
from tunedsl.backends.trinity.validate import gpus_needed
from tunedsl.backends.trinity.config import WORKFLOW_CLASS, trinity_config

trinity_config_module = pytest.importorskip("trinity.common.config")

REPO = Path(__file__).resolve().parents[1]
EXAMPLE = "examples.math_agent.experiment:MathAgent"
LARGE = str(REPO / "tests" / "fixtures" / "two_experiments.py") + ":Large"


def validate(graph, folder: Path, name: str = "run1", gpus: int | None = None):
    """Trinity's checked Config for the graph (run name "run1" unless given)."""
    from .trinity_support import validate as checked

    return checked(graph, folder, name, gpus)


@pytest.fixture(scope="module")
def math_checked(tmp_path_factory):
    graph = tunedsl.load_experiment(EXAMPLE, overrides=[
        "model.temperature=0.7", "model.top_p=0.9", "model.enable_thinking=false"])
    folder = tmp_path_factory.mktemp("math")
    return graph, validate(graph, folder), folder


@pytest.fixture(scope="module")
def large_checked(tmp_path_factory):
    graph = tunedsl.load_experiment(LARGE)
    folder = tmp_path_factory.mktemp("large")
    return graph, validate(graph, folder), folder


def test_gpus_needed_counts_every_engine_plus_a_trainer(math_checked, large_checked):
    """One rollout engine + trainer for MathAgent; TP-2 model, critic and trainer for Large."""
    assert gpus_needed(trinity_config(math_checked[0])) == 2
    assert gpus_needed(trinity_config(large_checked[0])) == 4


def test_trinity_derives_train_batch_size(math_checked, large_checked):
    """Trinity's train_batch_size is batch_size * repeat_times."""
    assert math_checked[1].buffer.train_batch_size == 32 * 8
    assert large_checked[1].buffer.train_batch_size == 16 * 8


def test_multi_step_grpo_uses_step_wise_advantage(math_checked, large_checked):
    """multi_step_grpo makes Trinity pick the step_wise_grpo advantage function."""
    for _, config, _ in (math_checked, large_checked):
        assert config.algorithm.algorithm_type == "multi_step_grpo"
        assert config.algorithm.advantage_fn == "step_wise_grpo"
        assert config.algorithm.repeat_times == 8


def test_grpo_uses_grpo_advantage(tmp_path):
    """algorithm_type grpo makes Trinity pick the grpo advantage function."""
    graph = tunedsl.load_experiment(EXAMPLE, overrides=["algorithm.algorithm_type=grpo",
                                                        "algorithm.group_size=4"])
    config = validate(graph, tmp_path)
    assert (config.algorithm.advantage_fn, config.algorithm.repeat_times) == ("grpo", 4)
    assert config.buffer.train_batch_size == 32 * 4


def test_checkpoint_job_dir_is_root_project_group_name(math_checked, large_checked):
    """Trinity places the run at <root>/<project>/<group>/<name> with an empty group."""
    for graph, config, folder in (math_checked, large_checked):
        root = str(folder / "ckpt")
        assert config.group == ""
        assert config.checkpoint_job_dir == os.path.join(root, graph.project, "", "run1")
        assert os.path.isdir(config.checkpoint_job_dir)
    assert math_checked[1].project == "tunedsl-examples"
    assert large_checked[1].project == "tunedsl"


def test_rollout_model_has_openai_api_and_history(math_checked, large_checked):
    """The rollout engine serves the OpenAI API and records history for training."""
    for _, config, _ in (math_checked, large_checked):
        rollout = config.explorer.rollout_model
        assert rollout.enable_openai_api is True
        assert rollout.enable_history is True
    assert large_checked[1].explorer.rollout_model.tensor_parallel_size == 2


def test_name_and_sampling_reach_the_trinity_model(math_checked):
    """The run name, temperature, top_p and enable_thinking arrive in config.model."""
    _, config, _ = math_checked
    assert config.name == "run1"
    assert (config.model.temperature, config.model.top_p) == (0.7, 0.9)
    assert config.model.enable_thinking is False
    assert config.model.max_model_len == 16384
    assert config.model.max_response_tokens == 4096
    assert config.model.model_path == "Qwen/Qwen3-0.6B"


def test_default_run_name_starts_with_experiment_name(large_checked):
    """Without an explicit run name the YAML name is <name>-<timestamp>."""
    graph = large_checked[0]
    name = trinity_config(graph)["name"]
    assert name.startswith("large-run-") and len(name) == len("large-run-") + 14


def test_auxiliary_model_keeps_its_name_and_temperature(large_checked):
    """The critic is one auxiliary model with its own name, path and temperature."""
    _, config, _ = large_checked
    [critic] = config.explorer.auxiliary_models
    assert (critic.name, critic.model_path) == ("critic", "Qwen/Qwen3-32B")
    assert critic.temperature == 0.1
    assert config.model.temperature == 1.0
    assert critic.max_model_len == 8192


def test_eval_taskset_present_with_its_split(math_checked, large_checked):
    """The eval dataset becomes Trinity's one eval taskset with the test split."""
    for graph, config, _ in (math_checked, large_checked):
        [evaluation] = config.buffer.explorer_input.eval_tasksets
        assert (evaluation.name, evaluation.split) == ("eval", "test")
        assert evaluation.path == graph.eval_dataset.path
        assert evaluation.default_workflow_type == WORKFLOW_CLASS
        [train] = config.buffer.explorer_input.tasksets
        assert (train.name, train.split, train.path) == ("train", "train", graph.train_dataset.path)


def test_workflow_args_hold_only_strings_and_config_saves(math_checked, large_checked, tmp_path):
    """workflow_args are import strings (and the rollout bound, and the params as plain
    data), so Trinity's Config.save works."""
    for index, (graph, config, _) in enumerate((math_checked, large_checked)):
        [train] = config.buffer.explorer_input.tasksets
        args = dict(train.workflow_args)
        assert args.pop("rollout_timeout") == graph.rollout_timeout
        assert args.pop("params", {}) == dict(graph.params)
        assert all(isinstance(value, str) for value in args.values())
        assert args["workflow"] == graph.workflow.ref
        assert args["experiment"] == graph.source
        out = tmp_path / f"saved{index}.yaml"
        config.save(str(out))
        saved = yaml.safe_load(out.read_text())
        saved_args = saved["buffer"]["explorer_input"]["tasksets"][0]["workflow_args"]
        assert (saved_args["workflow"], saved_args.get("params", {})) == (graph.workflow.ref,
                                                                        dict(graph.params))
    assert math_checked[1].buffer.explorer_input.tasksets[0].workflow_args["judge"] == \
        "examples.math_agent.experiment:exact_answer"
    assert math_checked[0].params  # the math agent's system prompt: params are carried


def test_workflow_class_imports_without_vllm():
    """TunedslWorkflow imports in a fresh interpreter without pulling in vllm."""
    code = ("import sys\n"
            "from tunedsl.backends.trinity.workflow import TunedslWorkflow\n"
            "from trinity.common.workflows.workflow import Workflow\n"
            "assert issubclass(TunedslWorkflow, Workflow)\n"
            "assert 'vllm' not in sys.modules, 'vllm imported'\n"
            "print('imported', TunedslWorkflow.__module__)\n")
    done = subprocess.run([sys.executable, "-c", code], cwd=REPO, capture_output=True,
                          text=True, timeout=300)
    assert done.returncode == 0, done.stderr
    assert "imported tunedsl.backends.trinity.workflow" in done.stdout


def test_trinity_registry_resolves_the_workflow_class():
    """Trinity's WORKFLOWS registry imports the dotted default_workflow_type to the class."""
    from trinity.common.workflows import WORKFLOWS

    from tunedsl.backends.trinity.workflow import TunedslWorkflow

    assert WORKFLOW_CLASS == "tunedsl.backends.trinity.workflow.TunedslWorkflow"
    assert WORKFLOWS.get(WORKFLOW_CLASS) is TunedslWorkflow


# ------------------------------------------------------------------------------- base YAML

BASE = """\
project: base-project
trainer:
  save_interval: 90
explorer:
  max_timeout: 600
  auxiliary_models:
  - name: judge
    model_path: Qwen/Qwen3-1.7B
    engine_num: 2
"""

EXPERIMENT = '''\
from tunedsl import Algorithm, Dataset, Model, WorkflowOutput, experiment, workflow


@workflow
async def solve(task, model, auxiliary_models):
    return WorkflowOutput(response=task["question"], reward=1.0)


@experiment
class Exp:
    workflow = solve
    train_dataset = Dataset("data")
    model = Model("Qwen/Qwen3-0.6B", max_model_len=4096)
    auxiliary_models = {"judge": Model("Qwen/Qwen3-4B", temperature=0.3)}
    algorithm = Algorithm("grpo", eval_interval_steps=7)
    trinity_config = "base.yaml"
'''


@pytest.fixture()
def base_graph(tmp_path):
    (tmp_path / "pyproject.toml").write_text('[project]\nname = "x"\n')
    (tmp_path / "data").mkdir()
    (tmp_path / "data" / "train.jsonl").write_text('{"question": "q"}\n')
    (tmp_path / "base.yaml").write_text(BASE)
    (tmp_path / "exp.py").write_text(EXPERIMENT)
    return tunedsl.load_experiment(f"{tmp_path / 'exp.py'}:Exp")


def test_graph_shows_the_base_yaml_values(base_graph):
    """The base YAML is a settings layer: the graph (and the GPU count) show its values."""
    assert base_graph.project == "base-project"
    assert base_graph.algorithm.save_interval_steps == 90
    assert base_graph.auxiliary_models["judge"].inference_engine_num == 2
    assert base_graph.auxiliary_models["judge"].temperature == 0.3
    assert gpus_needed(trinity_config(base_graph)) == 1 + 2 + 1
    assert not {"project", "algorithm.save_interval_steps"} & base_graph.explicit


def test_base_yaml_fills_fields_no_layer_set(base_graph):
    """Unset fields keep the base's values; explicit ones override it."""
    config = trinity_config(base_graph)
    assert config["trainer"]["save_interval"] == 90
    assert config["explorer"]["max_timeout"] == 600
    assert config["project"] == "base-project"
    assert config["explorer"]["eval_interval"] == 7
    assert config["algorithm"]["algorithm_type"] == "grpo"
    assert config["explorer"]["runner_per_model"] == 16


def test_base_yaml_auxiliary_models_merge_by_name(base_graph):
    """The base's judge and the experiment's judge become one entry, merged field by field."""
    models = trinity_config(base_graph)["explorer"]["auxiliary_models"]
    assert [m["name"] for m in models] == ["judge"]
    [judge] = models
    assert judge["engine_num"] == 2
    assert judge["model_path"] == "Qwen/Qwen3-4B"
    assert judge["temperature"] == 0.3


def test_explicit_set_beats_base_yaml(tmp_path, base_graph):
    """--set of a field the base YAML also sets wins over the base."""
    graph = tunedsl.load_experiment(f"{tmp_path / 'exp.py'}:Exp", overrides=[
        "algorithm.save_interval_steps=10", "auxiliary_models.judge.inference_engine_num=3"])
    config = trinity_config(graph)
    assert config["trainer"]["save_interval"] == 10
    [judge] = config["explorer"]["auxiliary_models"]
    assert judge["engine_num"] == 3


def test_merged_base_config_passes_trinity_validation(tmp_path, base_graph):
    """Trinity accepts the merged config, with the base's values and one judge."""
    folder = tmp_path / "validate"
    folder.mkdir()
    config = validate(base_graph, folder)
    assert config.trainer.save_interval == 90
    assert config.explorer.max_timeout == 600
    [judge] = config.explorer.auxiliary_models
    assert (judge.name, judge.engine_num, judge.temperature) == ("judge", 2, 0.3)
    assert config.checkpoint_job_dir == os.path.join(str(folder / "ckpt"), "base-project", "",
                                                     "run1")


def test_base_yaml_auxiliary_entry_without_name_is_refused(tmp_path, base_graph):
    """A base auxiliary model without a name cannot be merged and is reported."""
    (tmp_path / "base.yaml").write_text(textwrap.dedent("""\
        explorer:
          auxiliary_models:
          - model_path: Qwen/Qwen3-1.7B
        """))
    with pytest.raises(tunedsl.errors.ConfigError) as info:
        trinity_config(base_graph)
    assert info.value.problems == (
        f"{tmp_path / 'base.yaml'}: explorer.auxiliary_models[0] needs a name, so tunedsl can "
        "merge it with the experiment's own entries",)


def test_trinity_entries_given_as_tables_are_named_by_their_key(tmp_path, base_graph):
    """[trinity.buffer.explorer_input.eval_tasksets.hard] (or --set ...eval_tasksets.hard.
    path=...) is the taskset named hard, and [trinity.explorer.auxiliary_models.judge]
    merges into the judge; the key was dropped, and Trinity got a nameless entry."""
    graph = tunedsl.load_experiment(f"{tmp_path / 'exp.py'}:Exp", overrides=[
        "trinity.buffer.explorer_input.eval_tasksets.hard.path=hard-data",
        "trinity.buffer.explorer_input.eval_tasksets.hard.split=test",
        "trinity.explorer.auxiliary_models.judge.engine_num=3"])
    config = trinity_config(graph)
    [hard] = [entry for entry in config["buffer"]["explorer_input"]["eval_tasksets"]
              if entry.get("path") == "hard-data"]
    assert (hard["name"], hard["split"]) == ("hard", "test")
    [judge] = config["explorer"]["auxiliary_models"]
    assert (judge["name"], judge["engine_num"], judge["model_path"]) == (
        "judge", 3, "Qwen/Qwen3-4B")
    folder = tmp_path / "validate"
    folder.mkdir()
    assert "hard" in [taskset.name for taskset in
                      validate(graph, folder).buffer.explorer_input.eval_tasksets]


@pytest.mark.parametrize("override, problem", [
    ("trinity.buffer.explorer_input.eval_tasksets.0.path=x",
     "buffer.explorer_input.eval_tasksets.0: entries are named, not numbered; write "
     "buffer.explorer_input.eval_tasksets.NAME.FIELD, NAME being the entry's name"),
    ("trinity.explorer.auxiliary_models.judge.name=other",
     "explorer.auxiliary_models.judge has name = 'other'; an entry given as a table is "
     "named by its key: drop name"),
    ("trinity.explorer.auxiliary_models.judge=4",
     "explorer.auxiliary_models.judge must be a table of the entry's fields (got 4)"),
])
def test_trinity_entries_given_as_tables_that_cannot_be_named_are_refused(
        tmp_path, base_graph, override, problem):
    graph = tunedsl.load_experiment(f"{tmp_path / 'exp.py'}:Exp", overrides=[override])
    with pytest.raises(tunedsl.errors.ConfigError) as info:
        trinity_config(graph)
    assert info.value.problems == (f"[trinity]: {problem}",)


def test_optimizer_schedule_reaches_trinitys_optimizer(tmp_path):
    """lr_warmup_steps, lr_scheduler and min_lr_ratio become Trinity's optimizer settings,
    which its own validation accepts."""
    graph = tunedsl.load_experiment(EXAMPLE, overrides=[
        "algorithm.lr_warmup_steps=5", "algorithm.lr_scheduler=cosine",
        "algorithm.min_lr_ratio=0.2"])
    optimizer = validate(graph, tmp_path).algorithm.optimizer
    assert (optimizer.lr_warmup_steps, optimizer.lr_scheduler_type, optimizer.min_lr_ratio) == \
        (5, "cosine", 0.2)


def test_lora_becomes_lora_configs_that_trinity_loads_and_validates(tmp_path):
    """Model(lora=...) is Trinity's model.lora_configs: its validator turns LoRA on for the
    rollout model only (one adapter, served by vLLM; not the critic), saves a dummy adapter
    with those settings, and syncs weights through checkpoints. A list of module names is
    written as the regular expression with which peft picks the same modules."""
    pytest.importorskip("peft")
    from peft import LoraConfig, get_peft_model
    from transformers import AutoModelForCausalLM

    from examples.arith.tiny_model import build_tiny_model

    model = build_tiny_model(str(tmp_path / "model"))
    graph = tunedsl.load_experiment(LARGE, overrides=[
        f"model.model_path={model}", "model.lora.rank=8", "model.lora.alpha=16",
        'model.lora.target_modules=["q_proj", "v_proj"]'])
    entry = {"name": "large-run", "lora_rank": 8, "lora_alpha": 16,
             "target_modules": r"(.*\.)?(q_proj|v_proj)"}
    assert trinity_config(graph)["model"]["lora_configs"] == [entry]
    config = validate(graph, tmp_path)
    [lora] = config.model.lora_configs
    assert (lora.name, lora.lora_rank, lora.lora_alpha, lora.is_dummy) == (
        "large-run", 8, 16, True)
    rollout = config.explorer.rollout_model
    assert rollout.enable_lora is True
    assert rollout.lora_modules == [{"lora_int_id": 1, "lora_name": "large-run",
                                     "lora_path": lora.path, "base_model_name": None}]
    assert rollout.lora_kwargs["max_lora_rank"] == 8
    [critic] = config.explorer.auxiliary_models
    assert (critic.enable_lora, critic.lora_modules) == (False, None)
    assert config.synchronizer.sync_method.value == "checkpoint"
    saved = json.loads((Path(lora.path) / "adapter_config.json").read_text())
    assert (saved["r"], saved["lora_alpha"]) == (8, 16)

    def targeted(targets):
        base = AutoModelForCausalLM.from_pretrained(model, local_files_only=True)
        return sorted(get_peft_model(base, LoraConfig(target_modules=targets))
                      .targeted_module_names)

    assert targeted(entry["target_modules"]) == targeted(["q_proj", "v_proj"]) == [
        f"model.layers.{i}.self_attn.{p}_proj" for i in (0, 1) for p in ("q", "v")]


def test_text_holding_dollar_braces_reaches_trinitys_workflow_as_written(tmp_path, monkeypatch):
    """Trinity reads its YAML with OmegaConf, which resolved a prompt's ``${HOME}`` (or
    refused the config) and split an environment default at its comma; written escaped
    and quoted, Trinity's own loader gives back what the settings say. ``$${env:...}`` is
    tunedsl's way to write ``${env:...}`` as text."""
    monkeypatch.delenv("TUNEDSL_T_UNSET_ROOT", raising=False)
    prompt = ("Answer in bash, e.g. echo ${HOME} (not ${oc.env:HOME}, \\${x} or \\\\${y}); "
              "say $${env:KEY}")
    root = tmp_path / "runs ${USER}"
    graph = tunedsl.load_experiment(EXAMPLE, overrides=[
        f"params.system_prompt={json.dumps(prompt)}",
        "params.other=" + json.dumps("ends in a backslash \\"),
        'trinity.monitor.monitor_args.note="${env:TUNEDSL_T_UNSET_ROOT,runs,old}"',
        'trinity.monitor.monitor_args.rate="${env:TUNEDSL_T_UNSET_ROOT,1e-3}"',
        'trinity.monitor.monitor_args.mine="${oc.env:TUNEDSL_T_UNSET_ROOT,meant for Trinity}"'])
    meant = ("Answer in bash, e.g. echo ${HOME} (not ${oc.env:HOME}, \\${x} or \\\\${y}); "
             "say ${env:KEY}")
    assert graph.params["system_prompt"] == meant
    config = validate(graph, tmp_path)
    args = config.buffer.explorer_input.tasksets[0].workflow_args
    assert args["params"] == {"system_prompt": meant, "other": "ends in a backslash \\"}
    assert dict(config.monitor.monitor_args) == {"note": "runs,old", "rate": "1e-3",
                                                 "mine": "meant for Trinity"}
    # A setting (not a param's text) holding ${...} meant a variable: it was kept as text
    # and the run went into a folder named "${USER}" (sweep 24); it is refused, ${env:NAME}
    # the way to read one.
    with pytest.raises(tunedsl.errors.ConfigError, match=r"holds a \$\{\.\.\.\} reference tunedsl does not "
                                          r"read"):
        tunedsl.load_experiment(EXAMPLE,
                                overrides=[f"checkpoint_root_dir={json.dumps(str(root))}"])


def test_a_trinity_table_s_run_name_is_tunedsl_s_name_timed():
    """``[trinity] name`` was merged over the timed run name as given: two runs shared one
    folder, and a path in it left checkpoint_root_dir (sweep 28 A-S1). It is the
    experiment's name, and the run's folder gets the time, as every run's does."""
    graph = tunedsl.load_experiment(EXAMPLE, overrides=['trinity.name="myrun"'])
    assert graph.name == "myrun"
    name = trinity_config(graph)["name"]
    assert name.startswith("myrun-") and len(name) == len("myrun-") + 14


def test_a_home_folder_in_a_trinity_table_s_checkpoint_root_dir_is_expanded(tmp_path,
                                                                            monkeypatch):
    """``[trinity] checkpoint_root_dir = "~/runs"`` was written with its "~", which Trinity
    makes "./~/runs" of, while tunedsl's own reads used the home folder (sweep 29 A-S2)."""
    monkeypatch.setenv("HOME", str(tmp_path))
    graph = tunedsl.load_experiment(EXAMPLE, overrides=['trinity.checkpoint_root_dir="~/runs"'])
    assert trinity_config(graph)["checkpoint_root_dir"] == str(tmp_path / "runs")


@settings(max_examples=150, deadline=None)
@given(text=st.one_of(st.sampled_from(["4e81236", "1e3", "1_000", ".inf", "-.5e-3", "1:30.5",
                                       "true", "null", "~", "0x1F", "0o17", "2024-06-01"]),
                      st.from_regex(r"[-+]?[0-9_.eE:]{1,12}", fullmatch=True),
                      st.text().filter(lambda t: "$" not in t)))  # (${...}: escaped apart)
def test_text_is_read_back_as_the_same_text_by_trinity_s_loader(text):
    """Text OmegaConf's loader (Trinity's) reads as a number was written unquoted: a params
    value "4e81236" (a git sha) reached Trinity as inf, a project "1e3" as "1000.0" (sweep
    32 A-S1). Any text a setting holds is read back as that text."""
    from omegaconf import OmegaConf

    from tunedsl.backends.trinity.config import to_yaml

    written = to_yaml({"project": text, "params": {"revision": text}})
    read = OmegaConf.to_container(OmegaConf.create(written))
    assert read == {"project": text, "params": {"revision": text}}


@settings(max_examples=150, deadline=None)
@given(key=st.one_of(st.sampled_from(["${x}", "\\${x}", "${oc.env:HOME}", "1e3", "true"]),
                     st.text(min_size=1)))
def test_a_key_is_read_back_as_the_same_key_by_trinity_s_loader(key):
    """A params key holding ``${`` reached Trinity's workflow as ``\\${...}``: keys were
    escaped as values are, and OmegaConf reads a key as written (sweep 34 A-S6)."""
    from omegaconf import OmegaConf

    from tunedsl.backends.trinity.config import to_yaml

    written = to_yaml({"params": {key: "v"}})
    assert OmegaConf.to_container(OmegaConf.create(written), resolve=True) == {
        "params": {key: "v"}}


def test_the_table_walk_follows_trinity_s_lists_and_named_tables_of_tables():
    """The walk goes into entries of a list of tables (``stages[0]``) and of a table keyed
    by name (``auxiliary_models.g``), at any depth, by Trinity's own classes; an entry that
    is no table is left to tunedsl's named lists and Trinity's reader, which name it."""
    from tunedsl.backends.trinity.tables import _not_tables

    settings = {"explorer": {"auxiliary_models": {"g": {"external_model_config": 5}, "h": 3},
                             "env_vars": 4, "rollout_model": {"engine_num": 1}},
                "stages": [{"explorer": "x"}, 7],
                "buffer": {"explorer_input": "${other}"}, "monitor": None}
    assert list(_not_tables(settings, trinity_config_module.Config)) == [
        ("explorer.auxiliary_models.g.external_model_config", 5,
         "a table of settings (ExternalModelConfig)", "give a table"),
        ("stages[0].explorer", "x", "a table of settings (ExplorerConfig)", "give a table")]
