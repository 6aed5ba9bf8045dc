"""What verl 0.8 trains with, built by Trinity-RFT 0.6.0's own config builder
(``trinity/trainer/verl/config.py``'s ``build_verl_config``) from tunedsl's YAML, and fed to
verl's own optimizer-config dataclass and FSDP engine's learning-rate scheduler: the
optimizer, the gradient clip and the schedule a GPU run would get, on the CPU."""

from __future__ import annotations

import importlib.util
import types

import pytest

pytest.importorskip("trinity.trainer.verl.config")

import torch  # noqa: E402
from trinity.trainer.verl.config import build_verl_config  # noqa: E402

import tunedsl  # noqa: E402
from tunedsl.api import check  # noqa: E402
from tunedsl.backends.local.batches import lr_factor  # noqa: E402
from tunedsl.backends.trinity.config import trinity_config  # noqa: E402
from tunedsl.backends.trinity.verl_overrides import verl_override_problems  # noqa: E402
from tunedsl.errors import ConfigError  # noqa: E402

from .trinity_support import validate  # noqa: E402

EXAMPLE = "examples.math_agent.experiment:MathAgent"


def verl_actor(tmp_path, *overrides):
    """verl's actor config for the example with ``overrides``, as Trinity builds it."""
    graph = tunedsl.load_experiment(EXAMPLE, overrides=list(overrides))
    return build_verl_config(validate(graph, tmp_path)).actor


def verl_schedule(optim, steps):
    """The learning rate verl's FSDP engine sets at each of ``steps`` optimizer steps."""
    from verl.utils.config import omega_conf_to_dataclass
    from verl.workers.engine.fsdp.transformer_impl import FSDPEngine

    config = omega_conf_to_dataclass(optim)
    optimizer = torch.optim.AdamW([torch.nn.Parameter(torch.zeros(1))], lr=config.lr)
    engine = types.SimpleNamespace(optimizer_config=config, rank=1)
    scheduler = FSDPEngine._build_lr_scheduler(engine, optimizer)
    rates = []
    for _ in range(steps):
        rates.append(optimizer.param_groups[0]["lr"])
        optimizer.step()
        scheduler.step()
    return rates


def test_grad_clip_reaches_the_optimizer_verl_clips_with(tmp_path):
    """verl 0.8 clips with the optimizer's clip_grad (FSDP's transformer_impl.py); the
    actor's grad_clip reaches no optimizer."""
    actor = verl_actor(tmp_path, "algorithm.grad_clip=0.5", "algorithm.weight_decay=0.05",
                       "algorithm.learning_rate=3e-6")
    assert (actor.optim.clip_grad, actor.optim.weight_decay, actor.optim.lr) == (0.5, 0.05, 3e-6)


def test_a_cosine_schedule_decays_over_the_runs_steps_as_it_does_locally(tmp_path):
    """Trinity hands verl trainer.total_steps (else sys.maxsize: a cosine that never
    decays); tunedsl writes the run's steps there, and verl's own scheduler then gives the
    local backend's learning rate at every step, ending at min_lr_ratio."""
    actor = verl_actor(tmp_path, "algorithm.lr_scheduler=cosine", "algorithm.lr_warmup_steps=2",
                       "algorithm.min_lr_ratio=0.1", "train_dataset.total_steps=10")
    assert actor.optim.total_training_steps == 10
    rates = verl_schedule(actor.optim, 11)
    local = [1e-6 * lr_factor(step, 10, warmup=2, schedule="cosine", min_ratio=0.1)
             for step in range(11)]
    assert rates == pytest.approx(local, rel=1e-9, abs=1e-15)
    assert rates[10] == pytest.approx(1e-7)


def test_the_dataset_sizes_a_cosine_schedule_without_total_steps(tmp_path):
    """With the rows the preflight counted, the steps are Trinity's own count: total_epochs x
    rows // batch_size (64 rows, 2 epochs, 32 a step: 4)."""
    graph = tunedsl.load_experiment(EXAMPLE, overrides=["algorithm.lr_scheduler=cosine"])
    checked = validate(graph, tmp_path, rows={"train_dataset": 64, "eval_dataset": 16})
    assert build_verl_config(checked).actor.optim.total_training_steps == 4
    assert checked.trainer.total_steps == 4


def test_keep_checkpoints_is_trinitys_max_checkpoints_to_keep(tmp_path):
    """Trinity 0.6.0's trainer keeps the newest trainer.max_checkpoints_to_keep."""
    graph = tunedsl.load_experiment(EXAMPLE, overrides=["algorithm.keep_checkpoints=2"])
    assert validate(graph, tmp_path).trainer.max_checkpoints_to_keep == 2


def verl_model(graph, tmp_path):
    """verl's own model config (``HFModelConfig``, built as verl's workers build it from the
    DictConfig Trinity hands them) for ``graph``'s YAML."""
    from verl.utils.config import omega_conf_to_dataclass

    return omega_conf_to_dataclass(build_verl_config(validate(graph, tmp_path)).model)


def test_verl_trains_with_sdpa_attention_which_needs_no_flash_attn_kernel(tmp_path, tiny_model):
    """verl defaults to flash_attention_2 (verl/workers/config/model.py); tunedsl's YAML
    makes the model Trinity's trainer builds (from ``hf_config``, monkey_patch.py's
    ``_build_module``) use torch's sdpa."""
    from transformers import AutoModelForCausalLM

    graph = tunedsl.load_experiment(EXAMPLE, overrides=[f"model.model_path={tiny_model}"])
    model = verl_model(graph, tmp_path)
    assert model.override_config["attn_implementation"] == "sdpa"
    assert model.hf_config._attn_implementation == "sdpa"
    assert AutoModelForCausalLM.from_config(model.hf_config).config._attn_implementation == "sdpa"


def test_flash_attention_2_is_a_trinity_setting_away(tmp_path):
    """With flash-attn's kernels installed, [trinity] opts back into verl's default."""
    graph = tunedsl.load_experiment(EXAMPLE, overrides=[
        "trinity.trainer.trainer_config.model.override_config.attn_implementation="
        "flash_attention_2"])
    assert build_verl_config(validate(graph, tmp_path)).model.override_config == {
        "attn_implementation": "flash_attention_2"}


def test_trinitys_padding_helper_imports_flash_attn_whatever_the_attention():
    """Why a GPU install without flash-attn is refused (checks.py's check_flash_attn): the
    trainer's every step (``_update_actor``, trainer/verl/trainer.py) unpads the batch with
    verl's ``unpad_input``, which imports ``flash_attn.bert_padding`` off NPUs
    (verl/utils/attention_utils.py), whatever the attention or ``use_remove_padding``."""
    from tensordict import TensorDict
    from trinity.trainer.verl.monkey_patch import left_right_2_no_padding

    batch = TensorDict({"input_ids": torch.tensor([[0, 5, 6, 7]]),
                        "attention_mask": torch.tensor([[0, 1, 1, 1]]),
                        "response_mask": torch.tensor([[1, 1]]),
                        "position_ids": torch.tensor([[0, 0, 1, 2]])}, batch_size=[1])
    if importlib.util.find_spec("flash_attn") is not None:
        pytest.skip("flash-attn is installed here")
    with pytest.raises(ModuleNotFoundError, match="flash_attn"):
        left_right_2_no_padding(batch)


# ------------------------------------------- trainer.trainer_config: what verl makes of it

WHERE = "trinity: trainer.trainer_config"


@pytest.mark.parametrize("override, said", [
    # FSDPActorConfig.__init__() got an unexpected keyword argument 'bogus', on the workers
    ("actor.bogus=1", f"{WHERE}.actor.bogus: verl's FSDPActorConfig has no field 'bogus', "
                      f"and its workers would stop on it after the cluster started; fix its "
                      f"name, or remove it"),
    ("actor.optim.lrr=2", f"{WHERE}.actor.optim.lrr: verl's FSDPOptimizerConfig has no "
                          f"field 'lrr', and its workers would stop on it after the cluster "
                          f"started; fix its name, or remove it"),
    # a table of a misspelt name is said once, not again for each key in it
    ("actor.optm.lr=2", f"{WHERE}.actor.optm: verl's FSDPActorConfig has no field 'optm', "
                        f"and its workers would stop on it after the cluster started; fix its "
                        f"name, or remove it"),
    ("actor_rollout_ref.ref.bogus=1", f"{WHERE}.actor_rollout_ref.ref.bogus: verl's "
                                      f"FSDPActorConfig has no field 'bogus', and its "
                                      f"workers would stop on it after the cluster started; "
                                      f"fix its name, or remove it"),
    # "Ignoring trainer_config override for 'model.path'" in the trainer's log alone
    ("model.path=/elsewhere", f"{WHERE}.model.path: Trinity-RFT sets model.path from its "
                              f"own settings and ignores this override; remove it"),
    # "Stripping trainer_config override 'actor.megatron'", likewise
    ("actor.megatron.tensor_model_parallel_size=2",
     f"{WHERE}.actor.megatron: the trainer's strategy is fsdp2, whose verl config has no "
     f"megatron table (Trinity drops it); remove it, or set trainer.trainer_strategy"),
    # verl's older layout, whose other sections Trinity drops without a word
    ("trainer.total_epochs=3", f"{WHERE}.trainer: Trinity-RFT passes verl only model, actor, "
                               f"ref, rollout, critic (or actor_rollout_ref.model, .actor, "
                               f".ref, .rollout) and drops the rest; move it under one of "
                               f"them, or set it among Trinity's own settings"),
    ("actor.optim=5", f"{WHERE}.actor.optim: verl reads a table of settings there, and this "
                      f"value would replace it; give a table, or remove it"),
])
def test_check_says_what_verl_would_refuse_or_trinity_drop_of_trainer_config(
        tmp_path, override, said):
    """Trinity's Config takes trainer_config as any value, so its validator passed every
    key, and verl read them on the GPU workers alone (sweep 49's known list)."""
    graph = tunedsl.load_experiment(
        EXAMPLE, overrides=[f"trinity.trainer.trainer_config.{override}"])
    assert verl_override_problems(validate(graph, tmp_path), trinity_config(graph)) == [said]


@pytest.mark.parametrize("override", [
    "actor.ppo_epochs=2", "actor.fsdp_config.param_offload=true",
    "actor_rollout_ref.actor.ppo_epochs=2", "critic.ppo_epochs=2",
    # a key Trinity writes itself, which verl's workers rename (ref's log_prob_*)
    "ref.log_prob_micro_batch_size_per_gpu=2",
    # a free table of verl's (no dataclass below it)
    "model.override_config.rope_theta=10000",
])
def test_keys_verl_takes_in_trainer_config_pass_and_reach_its_config(tmp_path, override):
    """A key verl's dataclass has passes, and Trinity's builder carries it into verl's
    config."""
    graph = tunedsl.load_experiment(
        EXAMPLE, overrides=[f"trinity.trainer.trainer_config.{override}"])
    validated = validate(graph, tmp_path)
    assert verl_override_problems(validated, trinity_config(graph)) == []
    path, value = override.removeprefix("actor_rollout_ref.").split("=")
    node = build_verl_config(validated)
    for key in path.split("."):
        node = node[key]
    assert str(node).lower() == value


def test_check_refuses_a_trainer_config_key_verl_has_no_field_for():
    """`check` (and `run`, before its first step) says it: the same validation."""
    graph = tunedsl.load_experiment(
        EXAMPLE, overrides=["trinity.trainer.trainer_config.actor.ppo_epoch=2"])
    with pytest.raises(ConfigError) as info:
        check(graph, backend="trinity")
    assert info.value.problems == (
        f"{WHERE}.actor.ppo_epoch: verl's FSDPActorConfig has no field 'ppo_epoch', and its "
        f"workers would stop on it after the cluster started; fix its name, or remove it",)


def test_trainer_config_given_no_table_is_refused(tmp_path):
    """Trinity's builder cannot read a trainer_config that is no table (OmegaConf's
    "Object of unsupported type" on the trainer)."""
    graph = tunedsl.load_experiment(EXAMPLE, overrides=["trinity.trainer.trainer_config=5"])
    assert verl_override_problems(validate(graph, tmp_path), trinity_config(graph)) == [
        "trinity: trainer.trainer_config is given 5, where Trinity-RFT reads a table of "
        "verl's sections; give a table, or remove it"]
