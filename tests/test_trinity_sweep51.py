"""The user's Trinity settings (``[trinity]``, a base YAML) as the Trinity backend reads
them, by the real Trinity-RFT 0.6.0 and verl: verl's older layout of
``trainer.trainer_config`` beside tunedsl's own attention table, an enum or list setting
given a number, and ``config`` of a ``trainer_config`` that is no table (sweep 51)."""

from __future__ import annotations

import pytest

pytest.importorskip("trinity.trainer.verl.config")

from trinity.trainer.verl.config import build_verl_config  # noqa: E402

import tunedsl  # noqa: E402
from tunedsl.api import check  # noqa: E402
from tunedsl.backends.trinity.validate import fitted_config  # noqa: E402
from tunedsl.errors import ConfigError  # noqa: E402

from .cli_support import cli  # noqa: E402
from .trinity_support import validate  # noqa: E402

EXAMPLE = "examples.math_agent.experiment:MathAgent"
#: verl's older layout, whose ``model`` Trinity reads in place of a flat one.
WRAPPED = "trinity.trainer.trainer_config.actor_rollout_ref.model"
WHERE = "trinity: trainer.trainer_config"


def refused(*overrides: str) -> tuple[str, ...]:
    """The lines ``check`` on Trinity refuses the example with ``overrides`` for."""
    graph = tunedsl.load_experiment(EXAMPLE, overrides=list(overrides))
    with pytest.raises(ConfigError) as info:
        check(graph, backend="trinity")
    return info.value.problems


# --------------------------------------- trainer_config: verl's older layout (A-W1)


def test_a_model_override_in_verls_older_layout_passes_and_keeps_tunedsls_sdpa(tmp_path):
    """It was refused as "trainer.trainer_config.model: it is given under actor_rollout_ref
    too": the flat model table was tunedsl's own attention setting, which Trinity drops when
    the user writes actor_rollout_ref.model (``_normalize_trainer_config``); tunedsl now
    writes it there, so verl gets both."""
    graph = tunedsl.load_experiment(EXAMPLE, overrides=[
        f"{WRAPPED}.enable_gradient_checkpointing=false"])
    check(graph, backend="trinity")
    model = build_verl_config(validate(graph, tmp_path)).model
    assert model.enable_gradient_checkpointing is False
    assert model.override_config == {"attn_implementation": "sdpa"}


def test_the_users_attention_in_verls_older_layout_wins_over_tunedsls(tmp_path):
    graph = tunedsl.load_experiment(EXAMPLE, overrides=[
        f"{WRAPPED}.override_config.attn_implementation=flash_attention_2"])
    assert build_verl_config(validate(graph, tmp_path)).model.override_config == {
        "attn_implementation": "flash_attention_2"}


def test_a_key_trinity_sets_in_verls_older_layout_is_said_once():
    """Two lines were said: the "given twice" one was tunedsl's table's."""
    assert refused(f'{WRAPPED}.path="x"') == (
        f"{WHERE}.actor_rollout_ref.model.path: Trinity-RFT sets model.path from its own "
        f"settings and ignores this override; remove it",)


def test_a_model_table_the_user_gives_in_both_layouts_is_said_given_twice():
    """Trinity reads the wrapped one and drops the flat one whole."""
    assert refused(f"{WRAPPED}.enable_gradient_checkpointing=false",
                   "trinity.trainer.trainer_config.model.use_shm=true") == (
        f"{WHERE}.model: it is given under actor_rollout_ref too, and Trinity-RFT reads that "
        f"one; give it once",)


# ---------------------------------------- an enum or a list given a number (A-W2, A-W3)


@pytest.mark.parametrize("override, said", [
    # "Trinity-RFT rejects the generated config: Invalid configuration: 'int' object has no
    # attribute 'lower' full_key: object_type=Config": Trinity's enums lower() the value
    ("trinity.synchronizer.sync_method=5",
     "trinity: synchronizer.sync_method is given the int 5, where Trinity-RFT reads one of "
     "nccl, checkpoint, memory; give one of them (in the base YAML or [trinity]), or remove "
     "it"),
    ("trinity.synchronizer.sync_style=5",
     "trinity: synchronizer.sync_style is given the int 5, where Trinity-RFT reads one of "
     "fixed, trainer_driven, explorer_driven, fully_async; give one of them (in the base "
     "YAML or [trinity]), or remove it"),
    # "Trinity-RFT rejects buffer.explorer_input.eval_tasksets: Invalid value assigned:
    # AnyNode is not a ListConfig, list or tuple."
    ("trinity.buffer.explorer_input.eval_tasksets=5",
     "trinity: buffer.explorer_input.eval_tasksets is given the int 5, where Trinity-RFT "
     "reads a list of tables of settings (TasksetConfig); give a list (in the base YAML or "
     "[trinity]), or remove it"),
    ("trinity.explorer.auxiliary_models=5",
     "trinity: explorer.auxiliary_models is given the int 5, where Trinity-RFT reads a list "
     "of tables of settings (InferenceModelConfig); give a list (in the base YAML or "
     "[trinity]), or remove it"),
    ('trinity.algorithm.optimizer.betas="x"',
     "trinity: algorithm.optimizer.betas is given the str x, where Trinity-RFT reads a "
     "list; give a list (in the base YAML or [trinity]), or remove it"),
])
def test_an_enum_or_list_setting_given_a_number_is_named_with_what_trinity_reads(
        override, said):
    """``check`` and ``config`` (`fitted_config`) say it by the key's path."""
    assert refused(override) == (said,)
    with pytest.raises(ConfigError) as info:
        fitted_config(tunedsl.load_experiment(EXAMPLE, overrides=[override]))
    assert info.value.problems == (said,)


def test_a_base_yamls_enum_or_list_given_a_number_is_named_by_its_file(tmp_path):
    base = tmp_path / "base.yaml"
    base.write_text("synchronizer:\n  sync_method: 5\nexplorer:\n  auxiliary_models: 5\n")
    assert refused(f"trinity_config={str(base)!r}") == (
        f"{base}: synchronizer.sync_method is 5, where Trinity-RFT reads one of nccl, "
        f"checkpoint, memory; give one of them, or remove it",
        f"{base}: explorer.auxiliary_models is 5, where Trinity-RFT reads a list of tables "
        f"of settings (InferenceModelConfig); give a list, or remove it")


def test_words_and_lists_given_as_such_pass():
    """A word (an alias too), a list and the named tables tunedsl reads as a list pass."""
    graph = tunedsl.load_experiment(EXAMPLE, overrides=[
        'trinity.synchronizer.sync_method="checkpoint"',
        'trinity.synchronizer.sync_style="dynamic_by_explorer"',
        "trinity.algorithm.optimizer.betas=[0.9, 0.99]"])
    check(graph, backend="trinity")


# --------------------------------------------- config of a trainer_config no table (A-W4)


def test_config_refuses_a_trainer_config_that_is_no_table_as_check_does(tmp_path):
    """It wrote ``trainer_config: 5`` into the YAML, exit 0."""
    said = (f"{WHERE} is given 5, where Trinity-RFT reads a table of verl's sections; give "
            f"a table, or remove it")
    out = tmp_path / "trinity.yaml"
    done = cli("config", EXAMPLE, "--set", "trinity.trainer.trainer_config=5", "-o", out)
    assert (done.returncode, done.stdout, done.stderr) == (2, "", f"Error: {said}\n")
    assert not out.exists()
    assert refused("trinity.trainer.trainer_config=5") == (said,)
