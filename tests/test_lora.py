"""LoRA: Model(lora=LoRA(...)) in the settings layers, on the local backend (training,
checkpoints, resume, eval of the merged model) and in `check` (Trinity's model build)."""

from __future__ import annotations

import json
import math
import time
from pathlib import Path

import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("peft")

import tunedsl  # noqa: E402
from examples.arith.tiny_model import build_tiny_model  # noqa: E402
from tests.cli_support import cli  # noqa: E402
from tests.local_support import (  # noqa: E402
    AGENTS,
    graph_for,
    interrupted_and_resumed,
    load_weights,
    run_local,
)
from tests.test_settings import class_line, load, make_project, problems_of  # noqa: E402
from tunedsl import LoRA  # noqa: E402
from tunedsl.config.graph import ExperimentGraph, make_converter  # noqa: E402
from tunedsl.errors import ConfigError  # noqa: E402

#: How the test modules (whose header imports no LoRA) name the record.
LORA = "__import__('tunedsl').LoRA"


@pytest.fixture(scope="module")
def wide_model(tmp_path_factory):
    """The tiny model with weights ten times as spread (0.2): its tied output head's logits
    can span enough for adapters to make a reply likely (see build_tiny_model)."""
    return build_tiny_model(str(tmp_path_factory.mktemp("wide") / "model"), seed=0,
                            initializer_range=0.2)


def metric_rows(run_dir):
    return [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines()
            if '"actor/pg_loss"' in line]


def merged_from_adapter(base, adapter):
    """The model peft itself makes of the original base folder and a saved adapter."""
    from peft import PeftModel
    from transformers import AutoModelForCausalLM

    model = AutoModelForCausalLM.from_pretrained(base, local_files_only=True)
    merged = PeftModel.from_pretrained(model, str(adapter)).merge_and_unload()
    return {key: value.detach() for key, value in merged.state_dict().items()}


# ------------------------------------------------------------------------------- settings


def test_lora_settings_merge_field_by_field_and_round_trip(tmp_path):
    """[model.lora] in TOML, LoRA(...) on the class and --set model.lora.* merge field by
    field; the graph round-trips through cattrs with the record inside Model."""
    body = ('    train_dataset = Dataset("data")\n'
            f'    model = Model("m", max_model_len=64, lora={LORA}(alpha=16))\n')
    toml = '[model.lora]\nrank = 4\ntarget_modules = ["q_proj", "v_proj"]\n'
    module = make_project(tmp_path / "p", body, toml)
    graph = load(module, overrides=["model.lora.rank=8"])
    assert graph.model.lora == LoRA(rank=8, alpha=16, target_modules=("q_proj", "v_proj"))
    converter = make_converter()
    assert converter.structure(converter.unstructure(graph), ExperimentGraph) == graph
    assert load(make_project(tmp_path / "q")).model.lora is None  # off unless asked
    assert load(make_project(tmp_path / "r"), overrides=["model.lora={}"]).model.lora == LoRA()


def test_lora_setting_errors_name_the_source_and_key(tmp_path):
    """Each layer's LoRA problems are one line naming the file or flag and the key path."""
    module = make_project(tmp_path / "p", toml="[model]\nlora = 5\n")
    toml = tmp_path / "p" / "tunedsl.toml"
    assert problems_of(module, overrides=["model.lora.rank=0", "model.lora.rnk=3",
                                          'model.lora.target_modules="(q"']) == (
        f"{toml}: invalid value @ model.lora: must be a table of LoRA fields (got 5)",
        "overrides: invalid value @ model.lora.rank: must be >= 1 (got 0)",
        "overrides: extra fields found (rnk) @ model.lora (did you mean 'rank'?)",
        "overrides: invalid value @ model.lora.target_modules: '(q' is not a valid regular "
        "expression (missing ), unterminated subpattern at position 0); give \"all-linear\" or "
        "a list of module names",
    )


def test_lora_on_an_auxiliary_model_or_with_tinker_is_refused(tmp_path):
    """Auxiliary models are frozen, and Tinker trains adapters of its own: both refused."""
    body = ('    train_dataset = Dataset("data")\n'
            f'    model = Model("m", max_model_len=64, lora={LORA}())\n'
            f'    auxiliary_models = {{"judge": Model("j", lora={LORA}(rank=4))}}\n'
            "    tinker = __import__('tunedsl').Tinker()\n")
    module = make_project(tmp_path / "p", body)
    where = f"Exp ({module}:{class_line(module)})"
    assert problems_of(module) == (
        f"{where}: auxiliary_models.judge.lora: auxiliary models are frozen, so there are no "
        "adapters to train (Trinity's lora_configs apply to the rollout model only); remove it",
        f"{where}: model.lora: the experiment trains through Tinker, which trains LoRA adapters "
        "of its own (tinker.rank, train_mlp, train_attn, train_unembed); remove model.lora or "
        "tinker",
    )


def test_a_base_yaml_and_the_trinity_table_turn_lora_on_too(tmp_path):
    """model.lora_configs in a base Trinity YAML or in [trinity] reaches the graph, so the
    local backend trains the adapters the Trinity run would; bad values are named by their
    Trinity key."""
    base = tmp_path / "base.yaml"
    base.write_text("model:\n  lora_configs:\n  - lora_rank: 16\n    target_modules: "
                    "'.*proj'\n")
    module = make_project(tmp_path / "p", f"    trinity_config = {str(base)!r}\n" + (
        '    train_dataset = Dataset("data")\n    model = Model("m", max_model_len=64)\n'))
    assert load(module).model.lora == LoRA(rank=16, target_modules=".*proj")
    graph = load(make_project(tmp_path / "q"),
                 overrides=["trinity.model.lora_configs=[{lora_alpha = 8}]"])
    assert graph.model.lora == LoRA(alpha=8)
    assert problems_of(make_project(tmp_path / "r"), overrides=[
        "trinity.model.lora_configs=[{lora_rank = 0}]"]) == (
        "overrides: trinity.model.lora_configs[0].lora_rank must be >= 1 (got 0)",)


# ---------------------------------------------------------------------------------- check


def big_model_folder(folder: Path, tokenizer: Path, **overrides) -> str:
    """A folder holding the config.json of a 6.7B-parameter Llama, its weights as a sparse
    file (a header naming every tensor, whose 13 GB of bytes take no room on disk: check
    reads the weights' headers, never the weights), and the tokenizer of the model folder
    ``tokenizer``."""
    import json
    import shutil
    import struct

    import torch
    from transformers import AutoModelForCausalLM, LlamaConfig

    config = LlamaConfig(vocab_size=32000, hidden_size=4096, intermediate_size=11008,
                         num_hidden_layers=32, num_attention_heads=32, **overrides)
    config.save_pretrained(folder)
    with torch.device("meta"):
        shapes = {name: list(tensor.shape) for name, tensor in
                  AutoModelForCausalLM.from_config(config).state_dict().items()}
    header, end = {"__metadata__": {"format": "pt"}}, 0
    for name, shape in shapes.items():
        size = 2 * math.prod(shape)
        header[name] = {"dtype": "BF16", "shape": shape, "data_offsets": [end, end + size]}
        end += size
    text = json.dumps(header).encode()
    with open(Path(folder, "model.safetensors"), "wb") as weights:
        weights.write(struct.pack("<Q", len(text)) + text)
        weights.truncate(8 + len(text) + end)  # (sparse: the tensors' bytes are never read)
    for name in ("tokenizer.json", "tokenizer_config.json", "chat_template.jinja"):
        shutil.copy(Path(tokenizer, name), Path(folder, name))
    return str(folder)


def test_check_skips_building_a_large_lora_model_and_says_so(tmp_path, tiny_model):
    """Trinity's validator would build a 6.7B model on the CPU (25 GiB) for a dummy adapter:
    check validates everything else, tries the target modules on an empty model, and says
    what it skipped, in seconds; a small model is built as Trinity does, with no such line."""
    pytest.importorskip("trinity.common.config")
    from tunedsl.api import check

    big = big_model_folder(tmp_path / "big", tiny_model)
    graph = tunedsl.load_experiment(f"{AGENTS}:Arith", overrides=[
        f"model.model_path={big}", "model.lora.rank=8"])
    started = time.perf_counter()
    lines = check(graph)
    assert time.perf_counter() - started < 30  # measured: under 1 s
    assert lines[-3].startswith("trinity: Trinity-RFT accepts the config (algorithm grpo")
    assert lines[-2].startswith("trinity: on 1 node x 2 GPUs, 1 rollout engine")
    assert lines[-1] == (
        "trinity: skipped building the 6.74B-parameter model on the CPU (25.1 GiB in float32) "
        "that Trinity's validator builds for model.lora_configs to save a dummy adapter; peft "
        "accepted the LoRA target modules on an empty (meta-device) copy instead, and every "
        "other check ran")
    wrong = tunedsl.load_experiment(f"{AGENTS}:Arith", overrides=[
        f"model.model_path={big}", 'model.lora.target_modules=["qq_proj"]'])
    with pytest.raises(ConfigError) as info:
        check(wrong)
    assert str(info.value) == (  # the local backend's check, on the same empty copy, first
        f"model.lora.target_modules = ['qq_proj']: 'qq_proj' matches no layer of {big}; its "
        f"linear layers are named down_proj, gate_proj, k_proj, lm_head, o_proj, q_proj, up_proj, "
        f"v_proj")
    small = build_tiny_model(str(tmp_path / "small"))
    lines = check(tunedsl.load_experiment(f"{AGENTS}:Arith", overrides=[
        f"model.model_path={small}", "model.lora.rank=8"]))
    assert lines[-2].startswith("trinity: Trinity-RFT accepts the config")
    assert not lines[-1].startswith("trinity: skipped")


# ---------------------------------------------------------------------------- local backend


def test_lora_trains_only_the_adapters_and_saves_adapter_and_merged_model(wide_model,
                                                                          tmp_path):
    """The optimizer holds the adapters' weights only; global_step_N holds the merged model
    (what peft makes of the untouched base and the saved adapter) and adapter/."""
    import warnings

    graph = graph_for("Arith", wide_model, tmp_path, "model.lora.rank=4",
                      "model.lora.target_modules=[\"q_proj\", \"v_proj\"]")
    with warnings.catch_warnings(record=True) as shown:
        warnings.simplefilter("always")
        summary = run_local(graph, progress=False)
    # peft reading transformers' deprecated attribute is no warning for the user to act on
    assert not [w for w in shown if "is_gradient_checkpointing" in str(w.message)]
    final = summary.checkpoint
    assert {"adapter/adapter_config.json", "adapter/adapter_model.safetensors", "config.json",
            "model.safetensors", "optimizer.pt", "trainer_state.json"} <= {
        str(p.relative_to(final)) for p in final.rglob("*")}
    assert json.loads((final / "adapter" / "adapter_config.json").read_text())["r"] == 4
    # q_proj and v_proj of 2 layers, an A and a B each: the optimizer's only parameters.
    assert len(torch.load(final / "optimizer.pt")["param_groups"][0]["params"]) == 8
    before, after = load_weights(wide_model), load_weights(final)
    expected = merged_from_adapter(wide_model, final / "adapter")
    assert expected.keys() == after.keys()
    assert all(torch.equal(after[key], value) for key, value in expected.items())
    changed = sorted(k for k in before if not torch.equal(before[k], after[k]))
    assert changed == [f"model.layers.{i}.self_attn.{p}_proj.weight" for i in (0, 1)
                       for p in ("q", "v")]


def test_lora_learns_and_eval_checkpoint_reads_the_merged_model(wide_model, tmp_path):
    """The reward rises with adapters alone, and `eval --checkpoint global_step_N` on the
    training sums scores the merged model as the trained one (far above the base model)."""
    graph = tunedsl.load_experiment("examples.arith.experiment:Arith", overrides=[
        f"model.model_path={wide_model}", f"checkpoint_root_dir={tmp_path}",
        "model.lora.rank=8", "train_dataset.total_steps=40", "algorithm.eval_interval_steps=100"])
    summary = run_local(graph, progress=False)
    first, last = sum(summary.rewards[:5]) / 5, sum(summary.rewards[-5:]) / 5
    assert last > first + 0.2, (first, last)  # measured: 0.07 -> 0.44

    def eval_reward(folder):
        out = tmp_path / f"{Path(folder).name}.jsonl"
        done = cli("eval", "examples.arith.experiment:Arith", "--checkpoint", folder,
                   "--split", "train", "--repeat", "2", "-o", out, "--no-progress")
        assert done.returncode == 0, done.stderr
        records = [json.loads(line) for line in out.read_text().splitlines()]
        assert len(records) == 90 and all(r["error"] is None for r in records)
        return sum(r["reward"] for r in records) / len(records)

    trained, base = eval_reward(summary.checkpoint), eval_reward(wide_model)
    assert trained > base + 0.2, (base, trained)  # measured: 0.08 -> 0.46


def test_interrupted_and_resumed_lora_run_ends_with_the_same_adapter(wide_model, tmp_path):
    """Ctrl-C after step 2 saves adapter and optimizer; the resume reaches the uninterrupted
    run's adapter and merged model."""
    straight, resumed, _ = interrupted_and_resumed(wide_model, tmp_path, "model.lora.rank=4")
    assert resumed.steps == 4
    from safetensors.torch import load_file

    for name in ("adapter/adapter_model.safetensors", "model.safetensors"):
        expected = load_file(straight.checkpoint / name)
        got = load_file(resumed.checkpoint / name)
        assert expected.keys() == got.keys()
        assert all(torch.allclose(expected[k], got[k], atol=1e-6) for k in expected), name


def test_a_damaged_adapter_is_named_when_resuming(wide_model, tmp_path):
    """An adapter file cut short makes the checkpoint damaged, named like any other file."""
    graph = graph_for("Arith", wide_model, tmp_path, "model.lora.rank=4",
                      "algorithm.save_interval_steps=2")
    run_dir = run_local(graph, progress=False).run_dir
    adapter = run_dir / "global_step_4" / "adapter" / "adapter_model.safetensors"
    adapter.write_bytes(adapter.read_bytes()[:200])  # cut inside the header
    with pytest.raises(ConfigError) as info:
        run_local(graph, resume=run_dir, progress=False)
    assert str(info.value) == (
        f"resume='{run_dir}': the newest checkpoint global_step_4 is damaged "
        "(adapter/adapter_model.safetensors: Error while deserializing header: invalid header "
        "length); add from_good_checkpoint=True to resume from global_step_2, the newest good one")
    (adapter.parent / "adapter_config.json").unlink()
    with pytest.raises(ConfigError) as info:
        run_local(graph, resume=run_dir, progress=False)
    assert "global_step_4 is damaged (adapter/adapter_config.json: No such file or directory)" \
        in str(info.value)


def test_kl_with_lora_is_to_the_base_model_with_the_adapters_off(wide_model, tmp_path):
    """The KL reference is the policy with its adapters switched off, which is the base
    model as loaded (no second copy): 0 at the first update, then growing."""
    from transformers import AutoModelForCausalLM

    from tunedsl.backends.local.trainer import LocalTrainer

    graph = graph_for("Arith", wide_model, tmp_path, "model.lora.rank=4",
                      "algorithm.kl_coef=0.5", "algorithm.learning_rate=0.01")
    summary = run_local(graph, progress=False)
    kls = [row["actor/kl_loss"] for row in metric_rows(summary.run_dir)]
    assert kls[0] == pytest.approx(0.0, abs=1e-6) and kls[-1] > 1e-4
    trainer = LocalTrainer(graph, summary.run_dir)
    trainer.restore()  # trained adapters: the policy now differs from the base
    inputs = {"input_ids": torch.tensor([[4, 5, 6, 7]]), "attention_mask": torch.ones(1, 4)}
    base = AutoModelForCausalLM.from_pretrained(wide_model, local_files_only=True)
    with torch.no_grad():
        expected = base(**inputs).logits
        assert torch.allclose(trainer.reference(**inputs).logits, expected, atol=1e-5)
        assert not torch.allclose(trainer.model(**inputs).logits, expected, atol=1e-3)


@pytest.mark.parametrize(("targets", "message"), [
    ('["qq_proj"]', "model.lora.target_modules = ['qq_proj']: 'qq_proj' matches no layer of "
                    "{model}; its linear layers are named down_proj, gate_proj, k_proj, "
                    "lm_head, o_proj, q_proj, up_proj, v_proj"),
    # one misspelt name of several: peft trained the others without a word (sweep 20 S2)
    ('["q_proj", "v_prj"]', "model.lora.target_modules = ['q_proj', 'v_prj']: 'v_prj' matches "
                            "no layer of {model}; its linear layers are named down_proj, "
                            "gate_proj, k_proj, lm_head, o_proj, q_proj, up_proj, v_proj"),
    ('["q_proj", "lm_head"]', "model.lora.target_modules = ['q_proj', 'lm_head']: {model} ties "
                              "its output head to its input embeddings (tie_word_embeddings), "
                              "so an adapter on its output head could not be merged into the "
                              "saved model without changing the other; leave that layer out"),
])
def test_target_modules_the_local_backend_cannot_train_are_refused(wide_model, tmp_path,
                                                                  targets, message):
    """Target modules that match nothing, or an adapter the merged checkpoint would get
    wrong, are one line before training, and no run directory is left; ``check --backend
    local`` refuses them alike (on an empty copy of the model: it passed both)."""
    from tunedsl.api import check

    graph = graph_for("Arith", wide_model, tmp_path, f"model.lora.target_modules={targets}")
    with pytest.raises(ConfigError) as info:
        run_local(graph, progress=False)
    assert str(info.value) == message.format(model=wide_model)
    assert not list(tmp_path.glob("tunedsl/*"))  # refused before a run directory is made
    with pytest.raises(ConfigError) as checked:
        check(graph, backend="local")
    assert checked.value.problems == (message.format(model=wide_model),)


def test_a_rank_wider_than_every_layer_is_refused_before_any_run(wide_model, tmp_path):
    """A rank above the model's widest linear layer made peft allocate until memory ran out
    (1,000,000 on the tiny model), and one past int64 ended in an internal error; one line
    from both check and run, and a rank past any model's width is refused as a setting."""
    import torch
    from transformers import AutoModelForCausalLM

    from tunedsl.api import check, load_experiment

    model = AutoModelForCausalLM.from_pretrained(wide_model, local_files_only=True)
    widest = max(min(layer.in_features, layer.out_features) for layer in model.modules()
                 if isinstance(layer, torch.nn.Linear))
    graph = graph_for("Arith", wide_model, tmp_path, f"model.lora.rank={widest + 1}")
    message = (f"model.lora.rank = {widest + 1}: wider than every linear layer of {wide_model} "
               f"(the widest is {widest} on its narrower side, and a rank above a layer's "
               f"width adds nothing); give at most {widest}")
    with pytest.raises(ConfigError) as info:
        run_local(graph, progress=False)
    assert str(info.value) == message
    with pytest.raises(ConfigError) as checked:
        check(graph, backend="local")
    assert checked.value.problems == (message,)
    with pytest.raises(ConfigError) as huge:
        load_experiment("examples.arith.experiment:Arith",
                        overrides=["model.lora.rank=99999999999999999999"])
    assert str(huge.value) == ("overrides: invalid value @ model.lora.rank: must be <= 65536 "
                               "(got 99999999999999999999)")
