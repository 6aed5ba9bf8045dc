"""Real Trinity configs used as a base survive a trip through tunedsl with every value intact;
an argument Trinity would silently ignore is refused, naming the one meant."""

from __future__ import annotations

from pathlib import Path

import pytest

pytest.importorskip("trinity.common.config")

from omegaconf import OmegaConf  # noqa: E402
from trinity.common.config import load_config  # noqa: E402

import tunedsl  # noqa: E402
from tunedsl.backends.trinity.config import WORKFLOW_CLASS, to_yaml, trinity_config  # noqa: E402

BASES = Path(__file__).parent / "fixtures" / "trinity_base"
#: Keys tunedsl owns by design: the timestamped run name and its own workflow class.
OWNED = ("name", "buffer.explorer_input.default_workflow_type")

MODULE = '''
from tunedsl import WorkflowOutput, experiment, workflow

@workflow
async def agent(task, model):
    return WorkflowOutput(response="", reward=0.0)

@experiment
class FromBase:
    workflow = agent
    trinity_config = {base!r}
'''


#: The AgentScope werewolf sample sets ``advantage_fn_args.step_norm``, which Trinity's
#: step-wise GRPO advantage takes into its ``**kwargs`` and ignores: its argument is
#: ``enable_step_norm``. tunedsl refuses it; the round trip runs on the corrected file.
STEP_NORM = ("algorithm.advantage_args.step_norm: multi_step_grpo's advantage "
             "(step_wise_grpo) has no such argument (did you mean 'enable_step_norm'?); it "
             "takes epsilon, enable_step_norm, std_threshold, std_cal_level")


def base_file(name: str, tmp_path: Path) -> Path:
    """The base YAML ``name``, with the werewolf sample's ignored argument corrected."""
    text = (BASES / name).read_text()
    if "step_norm: true" not in text:
        return BASES / name
    corrected = tmp_path / name
    corrected.write_text(text.replace("    step_norm: true", "    enable_step_norm: true"))
    return corrected


def test_an_argument_trinity_would_ignore_is_refused(tmp_path):
    module = tmp_path / "exp.py"
    module.write_text(MODULE.format(base=str(BASES / "werewolf_goodguy.yaml")))
    with pytest.raises(tunedsl.errors.ConfigError) as caught:
        tunedsl.load_experiment(f"{module}:FromBase")
    assert str(caught.value).splitlines() == [f"FromBase ({module}:8): {STEP_NORM}"]


def leaves(data, prefix=""):
    """Flatten nested dicts and lists into {dotted.key: value}."""
    if isinstance(data, dict):
        items = data.items()
    elif isinstance(data, list):
        items = enumerate(data)
    else:
        return {prefix: data}
    out = {}
    for key, value in items:
        out.update(leaves(value, f"{prefix}.{key}" if prefix else str(key)))
    return out


def resolved(text: str) -> dict:
    return OmegaConf.to_container(OmegaConf.create(text), resolve=True)


@pytest.mark.parametrize("base", sorted(p.name for p in BASES.glob("*.yaml")))
def test_every_base_value_survives(base, tmp_path, monkeypatch):
    """Each leaf of the base YAML has the same value in tunedsl's YAML (Trinity-resolved)."""
    monkeypatch.setenv("TRINITY_MODEL_PATH", "/models/policy")
    module = tmp_path / "exp.py"
    path = base_file(base, tmp_path)
    module.write_text(MODULE.format(base=str(path)))
    graph = tunedsl.load_experiment(f"{module}:FromBase")
    written = to_yaml(trinity_config(graph))
    before = leaves(resolved(path.read_text()))
    after = leaves(resolved(written))
    lost = {key: (value, after.get(key, "<missing>")) for key, value in before.items()
            if after.get(key, "<missing>") != value and not key.endswith(OWNED)
            and not key.endswith("default_workflow_type")}
    assert lost == {}
    assert after["buffer.explorer_input.taskset.default_workflow_type"] == WORKFLOW_CLASS
    assert after["name"].startswith(before["name"] + "-")
    config_path = tmp_path / "config.yaml"
    config_path.write_text(written)
    assert load_config(str(config_path)).project == before["project"]


def test_base_auxiliary_model_is_merged_not_appended(tmp_path, monkeypatch):
    """An auxiliary model named in the base and on the class appears once, with both's values."""
    module = tmp_path / "exp.py"
    module.write_text(MODULE.format(base=str(base_file("werewolf_goodguy.yaml", tmp_path))) + (
        "    auxiliary_models = {'participant': __import__('tunedsl').Model("
        "'/models/opponent', temperature=0.1, trinity={'gpu_memory_utilization': 0.8})}\n"))
    config = trinity_config(tunedsl.load_experiment(f"{module}:FromBase"))
    (entry,) = config["explorer"]["auxiliary_models"]
    assert (entry["name"], entry["model_path"], entry["temperature"]) == (
        "participant", "/models/opponent", 0.1)
    assert (entry["engine_num"], entry["gpu_memory_utilization"], entry["dtype"]) == (
        8, 0.8, "bfloat16")
