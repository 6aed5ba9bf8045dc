"""Trinity configs read back as settings (config/trinity_base.py): a `[trinity]` value that a
tunedsl setting owns is checked as that setting and named by its Trinity key."""

from __future__ import annotations

from .cli_support import cli


def test_max_timeout_must_be_a_number_on_the_local_backend(tmp_path):
    """A non-numeric Trinity step bound in [trinity] is refused before training, on the
    local backend too (its run directory keeps the Trinity YAML)."""
    done = cli("run", "tests.fixtures.local.agents:Arith", "--backend", "local", "--set",
               "trinity.explorer.max_timeout=ten", "--set", f"checkpoint_root_dir={tmp_path}",
               "--set", "model.model_path=/nowhere")
    assert done.returncode == 2
    assert done.stderr.strip().splitlines()[-1] == (
        "Error: --set: trinity.explorer.max_timeout must be a positive number of seconds (got "
        "'ten')")


def test_a_base_yamls_environment_numbers_are_read_as_trinity_reads_them(tmp_path, monkeypatch):
    """``runner_per_model: ${oc.env:RPM}`` and ``save_interval: ${oc.env:SI}`` in a base YAML,
    the variables set: refused as "must be a whole number (got '${oc.env:RPM}')" and "(got
    '${env:SI}')", text the file does not hold (sweep 24)."""
    import tunedsl
    from tunedsl.backends.trinity.config import trinity_config

    monkeypatch.setenv("TUNEDSL_T_RPM", "3")
    monkeypatch.setenv("TUNEDSL_T_SI", "7")
    base = tmp_path / "base.yaml"
    base.write_text("explorer:\n  runner_per_model: ${oc.env:TUNEDSL_T_RPM}\n"
                    "trainer:\n  save_interval: ${oc.env:TUNEDSL_T_SI}\n")
    graph = tunedsl.load_experiment("examples.math_agent.experiment:MathAgent",
                                    overrides=[f"trinity_config={base}"])
    config = trinity_config(graph)  # the class's save_interval_steps = 50 is above the base
    assert config["explorer"]["runner_per_model"] == "${oc.env:TUNEDSL_T_RPM}"


DUPLICATED = {
    "top level": ("explorer:\n  runner_per_model: 8\nmonitor:\n  monitor_type: tensorboard\n"
                  "explorer:\n  eval_interval: 7\n", 5, "explorer", "line 1"),
    "nested": ("explorer:\n  runner_per_model: 8\n  eval_interval: 3\n  runner_per_model: 4\n",
               4, "runner_per_model", "line 2"),
    # on one line, in a flow mapping (sweep 31 A-S1)
    "flow": ("explorer: {runner_per_model: 8, runner_per_model: 4}\n", 1, "runner_per_model",
             "column 12 of that line"),
}


def test_a_base_yaml_giving_a_key_twice_is_refused_as_trinity_refuses_it(tmp_path):
    """A base YAML with ``explorer:`` twice lost its first block without a word (PyYAML
    keeps the last), where Trinity's loader (OmegaConf) refuses the file (sweep 30 A-S1);
    a key a merge brings in may be given again."""
    import pytest
    import yaml
    from omegaconf import OmegaConf

    import tunedsl
    from tunedsl.backends.trinity.config import trinity_config
    from tunedsl.errors import ConfigError

    for text, line, key, first in DUPLICATED.values():
        base = tmp_path / "base.yaml"
        base.write_text(text)
        with pytest.raises(yaml.YAMLError):
            OmegaConf.load(base)  # as Trinity reads it
        with pytest.raises(ConfigError) as caught:
            tunedsl.load_experiment("examples.math_agent.experiment:MathAgent",
                                    overrides=[f"trinity_config={base}"])
        assert str(caught.value) == (
            f"{base}:{line}: the key {key!r} is given twice in one mapping (first at {first}); "
            f"YAML keeps the last, and Trinity's loader refuses the file: merge them")
    merged = tmp_path / "merged.yaml"
    merged.write_text("common: &common\n  runner_per_model: 3\nexplorer:\n  <<: *common\n"
                      "  runner_per_model: 5\n")
    graph = tunedsl.load_experiment("examples.math_agent.experiment:MathAgent",
                                    overrides=[f"trinity_config={merged}"])
    assert trinity_config(graph)["explorer"]["runner_per_model"] == 5


def test_a_base_yaml_reference_to_a_key_the_experiment_sets_reads_the_experiment_s(tmp_path):
    """``${model.max_model_len}`` in a base YAML is resolved by Trinity over the config the
    experiment's settings made, not to the base's own value (sweep 35 A-S4: resolving it
    when the base was read gave the base's 4096 where the experiment set 8192)."""
    from omegaconf import OmegaConf

    import tunedsl
    from tunedsl.backends.trinity.config import to_yaml, trinity_config

    base = tmp_path / "base.yaml"
    base.write_text("model:\n  max_model_len: 4096\nexplorer:\n  rollout_model:\n"
                    "    max_model_len: ${model.max_model_len}\n")
    graph = tunedsl.load_experiment("examples.math_agent.experiment:MathAgent",
                                    overrides=[f"trinity_config={base}",
                                               "model.max_model_len=8192"])
    read = OmegaConf.to_container(OmegaConf.create(to_yaml(trinity_config(graph))),
                                  resolve=True)
    assert (read["model"]["max_model_len"],
            read["explorer"]["rollout_model"]["max_model_len"]) == (8192, 8192)
