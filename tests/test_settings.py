"""Settings layers: defaults < TOML < class < --set, TOML discovery, paths, env, errors."""

from __future__ import annotations

import textwrap
from pathlib import Path

import pytest

import tunedsl
from tunedsl.config.environment import EnvValue
from tunedsl.config.settings import parse_overrides
from tunedsl.backends.trinity.config import to_yaml, trinity_config
from tunedsl.errors import ConfigError

HEADER = '''\
from tunedsl import Algorithm, Dataset, Model, WorkflowOutput, experiment, workflow


@workflow
async def solve(task, model):
    return WorkflowOutput(response=task["question"], reward=1.0)


@experiment
class Exp:
    workflow = solve
'''
#: The class body most tests use: complete, so only the TOML under test varies.
FULL = '    train_dataset = Dataset("data")\n    model = Model("m", max_model_len=64)\n'


def make_project(root: Path, body: str = FULL, toml: str | None = None) -> Path:
    """Write ``root/exp.py`` (plus data/ and an optional tunedsl.toml); return the module.

    A pyproject.toml without ``[tool.tunedsl]`` one level up stops discovery from
    wandering into folders outside the test.
    """
    root.mkdir(parents=True, exist_ok=True)
    (root.parent / "pyproject.toml").write_text('[project]\nname = "x"\n')
    (root / "data").mkdir(exist_ok=True)
    (root / "data" / "train.jsonl").write_text('{"question": "q"}\n')
    module = root / "exp.py"
    module.write_text(HEADER + body)
    if toml is not None:
        (root / "tunedsl.toml").write_text(textwrap.dedent(toml))
    return module


def load(module: Path, **kwargs):
    return tunedsl.load_experiment(f"{module}:Exp", **kwargs)


def problems_of(module: Path, **kwargs) -> tuple[str, ...]:
    with pytest.raises(ConfigError) as info:
        load(module, **kwargs)
    return info.value.problems


def class_line(module: Path) -> int:
    return module.read_text().splitlines().index("@experiment") + 1


# ------------------------------------------------------------------------------ precedence


def test_defaults_apply_when_no_layer_sets_a_field(tmp_path):
    """Fields no layer sets keep the built-in defaults."""
    graph = load(make_project(tmp_path / "p"))
    assert (graph.algorithm.algorithm_type, graph.algorithm.group_size) == ("multi_step_grpo", 8)
    assert (graph.model.temperature, graph.project, graph.monitor) == (1.0, "tunedsl", "tensorboard")


def test_toml_value_survives_when_class_model_leaves_the_field_unset(tmp_path):
    """A TOML temperature/top_p survives a class Model() that does not name them."""
    toml = "[model]\ntemperature = 0.5\ntop_p = 0.9\nmax_tokens = 32\n"
    graph = load(make_project(tmp_path / "p", toml=toml))
    assert (graph.model.temperature, graph.model.top_p, graph.model.max_tokens) == (0.5, 0.9, 32)
    assert (graph.model.model_path, graph.model.max_model_len) == ("m", 64)


def test_class_field_set_to_its_default_still_beats_toml(tmp_path):
    """Model("m", max_model_len=1, temperature=1.0) overrides TOML temperature 0.5."""
    body = '    train_dataset = Dataset("data")\n    model = Model("m", max_model_len=1, temperature=1.0)\n'
    graph = load(make_project(tmp_path / "p", body, "[model]\ntemperature = 0.5\ntop_p = 0.9\n"))
    assert graph.model.temperature == 1.0
    assert graph.model.top_p == 0.9
    assert graph.model.max_model_len == 1


def test_set_beats_toml_and_class(tmp_path):
    """--set wins over both the class and the TOML value of the same field."""
    body = FULL + '    algorithm = Algorithm(batch_size=2, group_size=4)\n'
    toml = "[algorithm]\ngroup_size = 6\nlearning_rate = 3e-6\n"
    graph = load(make_project(tmp_path / "p", body, toml),
                 overrides=["algorithm.group_size=16", "model.max_model_len=128"])
    assert graph.algorithm.group_size == 16
    assert graph.algorithm.batch_size == 2
    assert graph.algorithm.learning_rate == 3e-6
    assert graph.model.max_model_len == 128


# ------------------------------------------------------------------------------- discovery


def test_settings_class_attribute_beats_tunedsl_toml_beside(tmp_path):
    """A class's ``settings = "..."`` is read instead of tunedsl.toml beside the module."""
    module = make_project(tmp_path / "p", FULL + '    settings = "conf/custom.toml"\n',
                          'project = "beside"\n')
    (tmp_path / "p" / "conf").mkdir()
    (tmp_path / "p" / "conf" / "custom.toml").write_text('project = "custom"\n')
    assert load(module).project == "custom"


def test_a_class_settings_path_reads_a_leading_tilde_as_the_home_folder(tmp_path,
                                                                        monkeypatch):
    """``settings = "~/x.toml"`` was read as a folder named ``~`` beside the module
    ("<project>/~/x.toml: settings file not found"); --settings read it as a shell does."""
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    (tmp_path / "home").mkdir()
    (tmp_path / "home" / "x.toml").write_text('project = "from-home"\n')
    module = make_project(tmp_path / "p", FULL + '    settings = "~/x.toml"\n')
    assert load(module).project == "from-home"


def test_a_class_settings_pyproject_is_read_for_its_tool_table_as_settings_is(tmp_path):
    """``settings = "other/pyproject.toml"`` reads its [tool.tunedsl] table, as --settings
    reads it (it was refused: "put them at the top of the file")."""
    module = make_project(tmp_path / "p", FULL + '    settings = "other/pyproject.toml"\n')
    (tmp_path / "p" / "other").mkdir()
    (tmp_path / "p" / "other" / "pyproject.toml").write_text(
        '[project]\nname = "other"\n\n[tool.tunedsl]\nproject = "from-other"\n')
    assert load(module).project == "from-other"
    assert load(module, settings=tmp_path / "p" / "other" / "pyproject.toml").project == \
        "from-other"


def test_tunedsl_toml_beside_module_beats_pyproject(tmp_path):
    """tunedsl.toml beside the module wins over [tool.tunedsl] in pyproject.toml."""
    module = make_project(tmp_path / "p", toml='project = "beside"\n')
    (tmp_path / "p" / "pyproject.toml").write_text('[tool.tunedsl]\nproject = "pyproject"\n')
    assert load(module).project == "beside"


@pytest.mark.parametrize("kind", ["dangling link", "folder", "looping link"])
def test_a_tunedsl_toml_that_cannot_be_read_is_refused_not_skipped(tmp_path, kind):
    """A tunedsl.toml beside the module that is a link to nothing (the file moved) or a
    folder: its settings would silently not apply, so it is named. A link that loops was
    said as one to a file that does not exist (sweep 50 A-W4)."""
    module = make_project(tmp_path / "p")
    beside = tmp_path / "p" / "tunedsl.toml"
    if kind == "folder":
        beside.mkdir()
        what = "not a file"
    elif kind == "looping link":
        beside.symlink_to("tt.toml")
        (tmp_path / "p" / "tt.toml").symlink_to("tunedsl.toml")
        what = "a link to tt.toml, which loops back to itself"
    else:
        beside.symlink_to(tmp_path / "moved.toml")
        what = f"a link to {tmp_path / 'moved.toml'}, which does not exist"
    assert problems_of(module) == (
        f"{beside}: {what}, so the settings kept in it would not apply; fix or remove it",)


@pytest.mark.parametrize("kind", ["dangling link", "looping link"])
def test_a_pyproject_link_that_leads_nowhere_is_refused_not_passed_over(tmp_path, kind):
    """A pyproject.toml beside the module that is a link to nothing was passed over without
    a word (sweep 50's known list): the search went on upwards, to another project's root
    and [tool.tunedsl], or none."""
    module = make_project(tmp_path / "p")
    beside = tmp_path / "p" / "pyproject.toml"
    if kind == "looping link":
        beside.symlink_to("pp.toml")
        (tmp_path / "p" / "pp.toml").symlink_to("pyproject.toml")
        what = "a link to pp.toml, which loops back to itself"
    else:
        beside.symlink_to(tmp_path / "moved.toml")
        what = f"a link to {tmp_path / 'moved.toml'}, which does not exist"
    assert problems_of(module) == (
        f"{beside}: {what}, so the project it marks (its folder, its [tool.tunedsl] "
        f"settings) would be passed over; fix or remove it",)


def test_a_pyproject_table_beside_a_tunedsl_toml_is_said_not_read(tmp_path, capsys):
    """tunedsl.toml applies whole: a [tool.tunedsl] of the project's pyproject.toml beside
    it was dropped without a word (sweep 52 A-S8)."""
    module = make_project(tmp_path / "p", toml='project = "beside"\n')
    pyproject = tmp_path / "p" / "pyproject.toml"
    pyproject.write_text('[tool.tunedsl]\nproject = "pyproject"\n')
    assert load(module).project == "beside"
    assert capsys.readouterr().err.splitlines() == [
        f"note: {pyproject} [tool.tunedsl] is not read: {tmp_path / 'p' / 'tunedsl.toml'} "
        f"applies instead, whole; keep the settings in one of them"]
    pyproject.write_text('[project]\nname = "x"\n')  # (no table of tunedsl's: no note)
    load(module)
    assert capsys.readouterr().err == ""


def test_a_tunedsl_toml_at_the_projects_root_applies_to_a_module_in_a_package(tmp_path):
    """The nearest tunedsl.toml from the module's folder up to the pyproject.toml's applies:
    one at the project's root was not read for ``pkg/exp.py`` and nothing said so (sweep 43
    A-S4); a nearer one wins, and one above the project never applies."""
    module = make_project(tmp_path / "proj" / "pkg")
    (tmp_path / "tunedsl.toml").write_text('project = "outside"\n')
    assert load(module).project == "tunedsl"
    (tmp_path / "proj" / "tunedsl.toml").write_text(
        'project = "root"\n[algorithm]\ngroup_size = 3\n')
    graph = load(module)
    assert (graph.project, graph.algorithm.group_size) == ("root", 3)
    (tmp_path / "proj" / "pkg" / "tunedsl.toml").write_text('project = "nearer"\n')
    graph = load(module)
    assert (graph.project, graph.algorithm.group_size) == ("nearer", 8)


def test_without_a_pyproject_the_working_folder_bounds_the_search(tmp_path, monkeypatch):
    """Without a pyproject.toml, a tunedsl.toml is looked for up to the working folder when
    the module is below it, and beside the module only when it is not."""
    module = make_project(tmp_path / "proj" / "pkg")
    (tmp_path / "proj" / "pyproject.toml").unlink()
    (tmp_path / "proj" / "tunedsl.toml").write_text('project = "root"\n')
    (tmp_path / "tunedsl.toml").write_text('project = "outside"\n')
    monkeypatch.chdir(tmp_path / "proj")
    assert load(module).project == "root"
    monkeypatch.chdir(tmp_path / "proj" / "pkg")
    assert load(module).project == "tunedsl"


def test_a_working_folder_s_tunedsl_toml_above_the_project_is_named_as_not_read(
        tmp_path, monkeypatch, capsys):
    """The module's own pyproject.toml (in pkg/) bounds the search below the working folder,
    whose tunedsl.toml was then dropped without a word (sweep 44 A)."""
    module = make_project(tmp_path / "root" / "pkg" / "exp")
    (tmp_path / "root" / "tunedsl.toml").write_text('project = "root"\n')
    monkeypatch.chdir(tmp_path / "root")
    assert load(module).project == "tunedsl"
    assert capsys.readouterr().err == (
        "note: tunedsl.toml is not read: the experiment's project is pkg, by its "
        "pyproject.toml, and its settings are searched there; give settings='tunedsl.toml' "
        "to use it\n")
    (tmp_path / "root" / "tunedsl.toml").unlink()
    assert load(module).project == "tunedsl" and capsys.readouterr().err == ""
    # a [tool.tunedsl] of the working folder's pyproject.toml, a tunedsl.toml between the
    # working folder and the project (sweep 45 A-S3)
    (tmp_path / "root" / "pyproject.toml").write_text('[tool.tunedsl]\nproject = "root"\n')
    assert load(module).project == "tunedsl"
    assert capsys.readouterr().err.startswith("note: pyproject.toml is not read: ")
    (tmp_path / "root" / "pyproject.toml").write_text('[project]\nname = "root"\n')
    monkeypatch.chdir(tmp_path)
    (tmp_path / "root" / "tunedsl.toml").write_text('project = "mid"\n')
    assert load(module).project == "tunedsl"
    assert capsys.readouterr().err == (
        "note: root/tunedsl.toml is not read: the experiment's project is root/pkg, by its "
        "pyproject.toml, and its settings are searched there; give "
        "settings='root/tunedsl.toml' to use it\n")
    # said once a process, and every unread file named, nearest first (sweep 46 A-W2)
    assert load(module).project == "tunedsl" and capsys.readouterr().err == ""
    (tmp_path / "tunedsl.toml").write_text('project = "top"\n')
    (tmp_path / "root" / "pyproject.toml").write_text('[tool.tunedsl]\nproject = "root"\n')
    assert load(module).project == "tunedsl"
    assert capsys.readouterr().err == (
        "note: root/tunedsl.toml, root/pyproject.toml and tunedsl.toml are not read: the "
        "experiment's project is root/pkg, by its pyproject.toml, and its settings are "
        "searched there; give settings='root/tunedsl.toml' to use the nearest\n")


def test_nearest_pyproject_tool_table_is_used(tmp_path):
    """Without tunedsl.toml, [tool.tunedsl] of the nearest pyproject.toml upward applies."""
    module = make_project(tmp_path / "proj" / "pkg")
    (tmp_path / "proj" / "pyproject.toml").write_text(
        '[project]\nname = "x"\n\n[tool.tunedsl]\nproject = "pyproject"\n'
        '[tool.tunedsl.algorithm]\ngroup_size = 3\n')
    graph = load(module)
    assert (graph.project, graph.algorithm.group_size) == ("pyproject", 3)


def test_nearest_pyproject_without_tool_table_stops_discovery(tmp_path):
    """A nearer pyproject.toml lacking [tool.tunedsl] hides a farther one that has it."""
    module = make_project(tmp_path / "outer" / "inner" / "pkg")
    (tmp_path / "outer" / "pyproject.toml").write_text('[tool.tunedsl]\nproject = "far"\n')
    assert load(module).project == "tunedsl"


def test_settings_argument_replaces_discovery(tmp_path):
    """settings= (CLI --settings) is the only TOML read: the beside file is ignored entirely."""
    module = make_project(tmp_path / "p", toml='project = "beside"\n[algorithm]\ngroup_size = 4\n')
    chosen = tmp_path / "chosen.toml"
    chosen.write_text('project = "chosen"\n')
    graph = load(module, settings=str(chosen))
    assert (graph.project, graph.algorithm.group_size) == ("chosen", 8)


@pytest.mark.parametrize("found", ["beside", "declared", "pyproject"])
def test_a_settings_file_of_params_alone_goes_on_top_of_the_discovered_one(tmp_path, found):
    """What ``tune-prompt -o`` writes (``[params]`` only) adds to the discovered settings
    (tunedsl.toml, the class's ``settings`` file or ``[tool.tunedsl]``) instead of replacing
    them: their other settings and params stay, its params win over the TOML's and the
    class's, key by key."""
    body = FULL + '    params = {"prompt": "class", "kept": "class"}\n'
    discovered = 'project = "found"\n[algorithm]\ngroup_size = 4\n[params]\nextra = "toml"\n'
    if found == "declared":
        module = make_project(tmp_path / "p", body + '    settings = "conf/s.toml"\n')
        (tmp_path / "p" / "conf").mkdir()
        (tmp_path / "p" / "conf" / "s.toml").write_text(discovered)
    elif found == "pyproject":
        module = make_project(tmp_path / "p", body)
        (tmp_path / "p" / "pyproject.toml").write_text(
            discovered.replace("project =", "[tool.tunedsl]\nproject =").replace(
                "[algorithm]", "[tool.tunedsl.algorithm]").replace("[params]",
                                                                   "[tool.tunedsl.params]"))
    else:
        module = make_project(tmp_path / "p", body, discovered)
    # params reach the workflow only when it takes them (else every command refuses them)
    module.write_text(module.read_text().replace("async def solve(task, model):",
                                                 "async def solve(task, model, params):"))
    best = tmp_path / "best.toml"
    best.write_text('[params]\nprompt = "tuned"\n')
    graph = load(module, settings=str(best))
    assert (graph.project, graph.algorithm.group_size) == ("found", 4)
    assert dict(graph.params) == {"prompt": "tuned", "kept": "class", "extra": "toml"}
    # A file with anything besides [params] still replaces the discovered one.
    best.write_text('project = "chosen"\n[params]\nprompt = "tuned"\n')
    graph = load(module, settings=str(best))
    assert (graph.project, graph.algorithm.group_size) == ("chosen", 8)
    assert dict(graph.params) == {"prompt": "tuned", "kept": "class"}

# ----------------------------------------------------------------------------------- paths


def test_relative_dataset_path_in_toml_resolves_against_the_toml_folder(tmp_path):
    """A TOML dataset path is anchored to the TOML file's folder, not the module's."""
    module = make_project(tmp_path / "p", '    model = Model("m", max_model_len=64)\n')
    (tmp_path / "conf" / "data").mkdir(parents=True)
    settings = tmp_path / "conf" / "s.toml"
    settings.write_text('[train_dataset]\npath = "data"\n')
    graph = load(module, settings=str(settings))
    assert graph.train_dataset.path == str((tmp_path / "conf" / "data").resolve())


def test_relative_dataset_path_in_class_resolves_against_the_module_folder(tmp_path):
    """A class Dataset("data") is anchored to the module's folder, not the cwd."""
    graph = load(make_project(tmp_path / "p"))
    assert graph.train_dataset.path == str((tmp_path / "p" / "data").resolve())


def test_path_that_does_not_exist_locally_is_kept_as_a_hub_id(tmp_path):
    """A relative path that names no local folder stays as written (a hub id)."""
    graph = load(make_project(tmp_path / "p", toml='[model]\nmodel_path = "Qwen/Qwen3-0.6B"\n'),
                 overrides=["train_dataset.path=openai/gsm8k"])
    assert (graph.model.model_path, graph.train_dataset.path) == ("m", "openai/gsm8k")


# ------------------------------------------------------------------------------------- env


def test_env_interpolation_with_and_without_default(tmp_path, monkeypatch):
    """${env:NAME} reads the variable, ${env:NAME,default} falls back to the default."""
    monkeypatch.setenv("TUNEDSL_T_PROJECT", "from-env")
    monkeypatch.delenv("TUNEDSL_T_UNSET", raising=False)
    toml = ('project = "x-${env:TUNEDSL_T_PROJECT}-y"\n'
            'name = "${env:TUNEDSL_T_UNSET,fallback}"\n')
    graph = load(make_project(tmp_path / "p", toml=toml))
    assert (graph.project, graph.name) == ("x-from-env-y", "fallback")


def test_unset_env_variable_is_reported(tmp_path, monkeypatch):
    """An unset variable without default is a problem line naming the file and key."""
    monkeypatch.delenv("TUNEDSL_T_UNSET", raising=False)
    module = make_project(tmp_path / "p", toml='[trinity.monitor]\nkey = "${env:TUNEDSL_T_UNSET}"\n')
    toml = tmp_path / "p" / "tunedsl.toml"
    assert problems_of(module) == (
        f"{toml}: trinity.monitor.key: environment variable TUNEDSL_T_UNSET is not set"
        "; export it, or give a default: ${env:TUNEDSL_T_UNSET,default}",
    )


def test_env_secret_is_written_to_yaml_as_omegaconf_reference(tmp_path, monkeypatch):
    """A [trinity] value read from the environment reaches YAML as ${oc.env:...}, not the secret."""
    monkeypatch.setenv("TUNEDSL_T_SECRET", "s3cr3t-value")
    toml = ('[trinity.monitor.monitor_args]\napi_key = "${env:TUNEDSL_T_SECRET}"\n'
            'other = "${env:TUNEDSL_T_MISSING,dflt}"\n')
    graph = load(make_project(tmp_path / "p", toml=toml))
    assert graph.trinity["monitor"]["monitor_args"]["api_key"] == "s3cr3t-value"
    text = to_yaml(trinity_config(graph))
    assert "s3cr3t-value" not in text
    assert "api_key: ${oc.env:TUNEDSL_T_SECRET}" in text
    assert "other: ${oc.env:TUNEDSL_T_MISSING,'dflt'}" in text


def test_to_yaml_writes_env_values_as_their_template():
    """to_yaml writes an EnvValue's template, never its resolved text."""
    value = EnvValue("hidden", "${oc.env:TUNEDSL_T_KEY}")
    assert value == "hidden"
    assert to_yaml({"a": {"key": value}, "b": "plain"}) == \
        "a:\n  key: ${oc.env:TUNEDSL_T_KEY}\nb: plain\n"


def test_env_value_in_a_model_field_is_not_written_to_yaml(tmp_path, monkeypatch):
    """A TOML model_path read from the environment is written as ${oc.env:...}, not resolved."""
    monkeypatch.setenv("TUNEDSL_T_MODEL", "private-org/secret-model")
    toml = '[model]\nmodel_path = "${env:TUNEDSL_T_MODEL}"\nmax_model_len = 64\n'
    graph = load(make_project(tmp_path / "p", '    train_dataset = Dataset("data")\n', toml))
    assert graph.model.model_path == "private-org/secret-model"
    text = to_yaml(trinity_config(graph))
    assert "private-org/secret-model" not in text
    assert "model_path: ${oc.env:TUNEDSL_T_MODEL}" in text


def test_env_value_naming_a_local_folder_stays_a_template_too(tmp_path, monkeypatch):
    """An ${env:...} model_path that names a folder beside the settings is used as that
    folder here, and still written as ${oc.env:...} (it was written resolved)."""
    monkeypatch.setenv("TUNEDSL_T_MODEL", "weights")
    toml = '[model]\nmodel_path = "${env:TUNEDSL_T_MODEL}"\nmax_model_len = 64\n'
    module = make_project(tmp_path / "p", '    train_dataset = Dataset("data")\n', toml)
    (tmp_path / "p" / "weights").mkdir()
    graph = load(module)
    assert graph.model.model_path == str(tmp_path / "p" / "weights")
    text = to_yaml(trinity_config(graph))
    assert "model_path: ${oc.env:TUNEDSL_T_MODEL}" in text and "/weights" not in text


# ------------------------------------------------------------------------------------ --set


def test_set_values_parse_as_toml_values_or_bare_strings():
    """--set parses ints, floats, bools and quoted strings; a bare word stays a string."""
    layer = parse_overrides([
        "algorithm.group_size=4", "algorithm.learning_rate=2e-6", "model.enable_thinking=false",
        "model.model_path=Qwen/Qwen3-0.6B", 'project="quoted"', "name=run-2",
        "auxiliary_models.judge.temperature=0.2", "trinity.trainer.save_interval=5",
    ])
    assert layer.source == "overrides"  # as the Python API names them
    assert layer.values == {
        "algorithm": {"group_size": 4, "learning_rate": 2e-6},
        "model": {"enable_thinking": False, "model_path": "Qwen/Qwen3-0.6B"},
        "project": "quoted", "name": "run-2",
        "auxiliary_models": {"judge": {"temperature": 0.2}},
        "trinity": {"trainer": {"save_interval": 5}},
    }
    assert type(layer.values["algorithm"]["group_size"]) is int
    assert type(layer.values["model"]["enable_thinking"]) is bool


@pytest.mark.parametrize("raw, number", [(".001", 0.001), ("1.", 1.0), ("-.5e-3", -0.0005),
                                         ("+2.E2", 200.0)])
def test_set_takes_a_number_with_no_digit_on_one_side_of_its_point(raw, number):
    """``--set algorithm.learning_rate=.001`` was read as text (TOML wants a digit each side
    of the point) and refused as "must be a number (got '.001')" (sweep 29 A-W8)."""
    layer = parse_overrides([f"algorithm.learning_rate={raw}", "name=v1.", "model.model_path=.5b"])
    assert layer.values == {"algorithm": {"learning_rate": number}, "name": "v1.",
                            "model": {"model_path": ".5b"}}


def test_set_takes_a_date_or_time_as_the_text_it_is():
    """``--set name=2024-06-01`` was refused as "must be a non-empty string (got
    datetime.date(2024, 6, 1))": TOML reads it as a date, which no setting takes (sweep 31
    A-W3)."""
    layer = parse_overrides(["name=2024-06-01", "project=12:30:00",
                             "params.stamp=2024-06-01T10:00:00Z"])
    assert layer.values == {"name": "2024-06-01", "project": "12:30:00",
                            "params": {"stamp": "2024-06-01T10:00:00Z"}}


def test_set_without_equals_sign_is_an_error():
    """An item without '=' names itself and shows the expected form."""
    with pytest.raises(ConfigError) as info:
        parse_overrides(["algorithm.group_size"])
    assert info.value.problems == (
        "overrides item 'algorithm.group_size': expected KEY=VALUE, e.g. "
        "'algorithm.group_size=8'",)


@pytest.mark.parametrize("items, merged", [
    (["algorithm.group_size=4", "algorithm={batch_size=4}"],
     {"algorithm": {"group_size": 4, "batch_size": 4}}),
    (["algorithm={batch_size=4}", "algorithm.group_size=4"],
     {"algorithm": {"group_size": 4, "batch_size": 4}}),
    (["params.a=1", "params={b=2}", "params={a=3}"], {"params": {"a": 3, "b": 2}}),
    (["algorithm.group_size=4", "algorithm={}"], {"algorithm": {"group_size": 4}}),
])
def test_a_table_set_after_its_dotted_keys_merges_with_them(items, merged):
    """``--set algorithm={batch_size=4}`` after ``--set algorithm.group_size=4`` dropped the
    group size, while the other order merged both (sweep 34 A-S4): a table merges with what
    the same layer set before it, as with the other layers."""
    assert parse_overrides(items).values == merged


def test_set_below_a_value_is_an_error():
    """Setting a key under a key already given a value is refused."""
    with pytest.raises(ConfigError) as info:
        parse_overrides(["a.b=1", "a.b.c=2"])
    assert info.value.problems == ("overrides item 'a.b.c=2': b is already set to a value",)


def test_set_dotted_keys_reach_auxiliary_models_and_trinity(tmp_path):
    """--set creates an auxiliary model by name and fills the [trinity] passthrough."""
    graph = load(make_project(tmp_path / "p"), overrides=[
        "auxiliary_models.judge.model_path=Qwen/Qwen3-0.6B",
        "auxiliary_models.judge.temperature=0.2", "trinity.trainer.grad_clip=0.5",
    ])
    assert graph.auxiliary_models["judge"].model_path == "Qwen/Qwen3-0.6B"
    assert graph.auxiliary_models["judge"].temperature == 0.2
    config = trinity_config(graph)
    assert config["trainer"]["grad_clip"] == 0.5
    [judge] = config["explorer"]["auxiliary_models"]
    assert (judge["name"], judge["temperature"]) == ("judge", 0.2)


def test_trinity_table_passes_through_to_the_yaml_dict(tmp_path):
    """[trinity] keys reach the Trinity dict verbatim and override tunedsl's defaults."""
    toml = "[trinity.explorer]\nrunner_per_model = 4\n[trinity.trainer]\ngrad_clip = 0.5\n"
    graph = load(make_project(tmp_path / "p", toml=toml),
                 overrides=["trinity.synchronizer.sync_interval=2"])
    config = trinity_config(graph)
    assert config["explorer"]["runner_per_model"] == 4
    assert config["trainer"]["grad_clip"] == 0.5
    assert config["synchronizer"]["sync_interval"] == 2
    # Trinity's step bound follows the runners [trinity] sets: 256 rollouts a step on 4
    # runners are 64 waves of an hour's rollout and the runner's grace (bounds.py).
    assert config["explorer"]["max_timeout"] == 64 * (3600 + 60)


def test_rollout_timeout_is_a_setting_the_workflow_enforces_on_trinity(tmp_path):
    """rollout_timeout defaults to an hour; the class, TOML and --set set it like any setting.
    On Trinity the workflow class gets it, and Trinity's step bound is sized from it."""
    assert load(make_project(tmp_path / "a")).rollout_timeout == 3600
    graph = load(make_project(tmp_path / "b", toml="rollout_timeout = 90\n"))
    config = trinity_config(graph)
    assert config["buffer"]["explorer_input"]["taskset"]["workflow_args"]["rollout_timeout"] \
        == 90
    assert config["explorer"]["max_timeout"] == 16 * (90 + 60)  # 256 rollouts, 16 runners
    graph = load(make_project(tmp_path / "c", FULL + "    rollout_timeout = 120\n"),
                 overrides=["rollout_timeout=30"])
    assert graph.rollout_timeout == 30


def test_trinity_table_values_with_a_tunedsl_field_reach_the_graph(tmp_path):
    """[trinity] is merged over the YAML, so the graph every backend reads shows its values."""
    graph = load(make_project(tmp_path / "p"), overrides=[
        "trinity.trainer.max_checkpoints_to_keep=3", "trinity.algorithm.repeat_times=4"])
    assert (graph.algorithm.keep_checkpoints, graph.algorithm.group_size) == (3, 4)
    config = trinity_config(graph)
    assert (config["trainer"]["max_checkpoints_to_keep"],
            config["algorithm"]["repeat_times"]) == (3, 4)


def test_trinity_table_values_are_checked_under_their_trinity_names(tmp_path):
    """A refused [trinity] value names the Trinity key the user wrote, every one at once."""
    module = make_project(tmp_path / "p")
    assert problems_of(module, overrides=[
        "trinity.algorithm.repeat_times=0", "trinity.algorithm.optimizer.clip_grad=-1"]) == (
        "overrides: trinity.algorithm.repeat_times must be >= 1 (got 0)",
        "overrides: trinity.algorithm.optimizer.clip_grad must be > 0.0 (got -1)")
    # named by the layer that set it, as every other settings problem is (sweep 21b W6)
    module = make_project(tmp_path / "q", toml='[trinity.algorithm]\nrepeat_times = "x"\n'
                                              '[trinity.explorer]\nmax_timeout = "ten"\n')
    assert problems_of(module) == (
        f"{tmp_path / 'q' / 'tunedsl.toml'}: trinity.algorithm.repeat_times must be an integer "
        f"(got 'x')",
        f"{tmp_path / 'q' / 'tunedsl.toml'}: trinity.explorer.max_timeout must be a positive "
        f"number of seconds (got 'ten')")


def test_bad_rollout_timeout_names_the_source(tmp_path):
    """A rollout timeout that is not a positive number is refused where it was set: on the
    class, when it is decorated; in TOML, naming the file."""
    module = make_project(tmp_path / "p", FULL + "    rollout_timeout = 0\n")
    assert problems_of(module) == (
        f"@experiment Exp ({tmp_path / 'p' / 'exp.py'}:9).rollout_timeout must be a "
        f"positive number of seconds (got 0)",)
    module = make_project(tmp_path / "q", toml="rollout_timeout = -1\n")
    toml = tmp_path / "q" / "tunedsl.toml"
    assert problems_of(module) == (
        f"{toml}: invalid value @ rollout_timeout: must be a positive number of seconds "
        f"(got -1)",)


# --------------------------------------------------------------------------------- bad input


def test_malformed_toml_reports_line_and_column(tmp_path):
    """A TOML syntax error names the file, the line and the column."""
    module = make_project(tmp_path / "p", toml='project = "x"\n[model\n')
    assert problems_of(module) == (
        f"{tmp_path / 'p' / 'tunedsl.toml'}: invalid TOML: Expected ']' at the end of a table "
        "declaration (at line 2, column 7)",)


@pytest.mark.parametrize("name, text, said", [
    ("s.yaml", "model:\n  model_path: x\n",
     "invalid TOML: Expected '=' after a key in a key/value pair (at line 1, column 6); this file "
     "is YAML, and settings files are TOML (key = value); a Trinity YAML is given as the base "
     "config: --set trinity_config={path}"),
    ("s.json", '{"model": {"model_path": "x"}}',
     "invalid TOML: Invalid statement (at line 1, column 1); this file is JSON, and settings "
     "files are TOML (key = value)"),
    ("s.toml", "model:\n  model_path: x\n",  # YAML's look, named .toml: TOML's words only
     "invalid TOML: Expected '=' after a key in a key/value pair (at line 1, column 6)")])
def test_a_settings_file_in_another_language_says_which(tmp_path, name, text, said):
    """``--settings`` given a YAML (a Trinity config, say) or JSON file said only "invalid
    TOML" at line 1, which reads as a typo to find (sweep 45 A-W)."""
    from tunedsl.config.settings import read_toml

    path = tmp_path / name
    path.write_text(text)
    with pytest.raises(ConfigError) as raised:
        read_toml(path)
    assert str(raised.value) == f"{path}: " + said.format(path=path)


def test_unknown_keys_are_reported_with_did_you_mean(tmp_path):
    """Unknown keys name their table; a close match gets a suggestion."""
    toml = "[algorithm]\nlr = 1e-5\ngrop_size = 4\n[modle]\nx = 1\n"
    module = make_project(tmp_path / "p", toml=toml)
    path = tmp_path / "p" / "tunedsl.toml"
    assert problems_of(module) == (
        f"{path}: extra fields found (lr) @ algorithm (did you mean 'learning_rate'?)",
        f"{path}: extra fields found (grop_size) @ algorithm (did you mean 'group_size'?)",
        f"{path}: extra fields found (modle) @ <top level> (did you mean 'model'?)",
    )


def test_a_key_another_section_has_is_pointed_there_not_to_a_near_spelling(tmp_path):
    """``total_steps`` under [algorithm] is close to ``save_interval_steps``, but it is
    [train_dataset]'s: the exact owner beats a near spelling (sweep 13 W1)."""
    toml = ("learning_rate = 1e-5\n[algorithm]\ntotal_steps = 2\nrollout_timeout = 3\n"
            "[model]\nbatch_size = 4\n")
    module = make_project(tmp_path / "p", toml=toml)
    path = tmp_path / "p" / "tunedsl.toml"
    assert problems_of(module) == (
        f"{path}: extra fields found (learning_rate) @ <top level>: it is a field of algorithm "
        f"and warmup; set algorithm.learning_rate (in TOML: under [algorithm])",
        f"{path}: extra fields found (total_steps) @ algorithm: it is a field of train_dataset, "
        f"eval_dataset and warmup_dataset; set train_dataset.total_steps (in TOML: under "
        f"[train_dataset])",
        f"{path}: extra fields found (rollout_timeout) @ algorithm: it is a top-level setting; "
        f"set rollout_timeout (in TOML: above every [table])",
        f"{path}: extra fields found (batch_size) @ model: it is a field of algorithm and "
        f"warmup; set algorithm.batch_size (in TOML: under [algorithm])",
    )


def test_a_section_nested_in_another_is_pointed_to_its_own_table(tmp_path):
    """``[algorithm.model]`` was "extra fields found (model) @ algorithm" with no lead
    (sweep 14 W1)."""
    toml = "[algorithm.model]\nmax_tokens = 4\n[model.params]\na = 1\n"
    module = make_project(tmp_path / "p", toml=toml)
    path = tmp_path / "p" / "tunedsl.toml"
    assert problems_of(module) == (
        f"{path}: extra fields found (model) @ algorithm: it is a section of its own; set "
        f"model.<field> (in TOML: under [model])",
        f"{path}: extra fields found (params) @ model: it is a section of its own; set "
        f"params.<field> (in TOML: under [params])",
    )


def test_settings_wrapped_in_one_header_too_many_are_said_so(tmp_path):
    """A pyproject's ``[tool.tunedsl]`` copied into tunedsl.toml, or one level too deep in
    the pyproject, was "extra fields found (tool) @ <top level>" (sweep 14 W2)."""
    module = make_project(tmp_path / "p", toml="[tool.tunedsl]\nrollout_timeout = 5\n")
    assert problems_of(module) == (
        f"{tmp_path / 'p' / 'tunedsl.toml'}: extra fields found (tool) @ <top level>: the "
        f"settings sit under a [tool.tunedsl] table; put them at the top of the file (only "
        f"pyproject.toml needs [tool.tunedsl]), with sub-tables named [algorithm], [model], "
        f"...",)
    (tmp_path / "p" / "tunedsl.toml").unlink()
    (tmp_path / "p" / "pyproject.toml").write_text(
        "[tool.tunedsl.tunedsl]\nrollout_timeout = 5\n")
    assert problems_of(module) == (
        f"{tmp_path / 'p' / 'pyproject.toml'} [tool.tunedsl]: extra fields found (tunedsl) @ "
        f"<top level>: the settings sit under a [tool.tunedsl.tunedsl] table; put them "
        f"directly under [tool.tunedsl], with sub-tables named [tool.tunedsl.algorithm], "
        f"[tool.tunedsl.model], ...",)


def test_an_override_cannot_remove_an_optional_record_and_says_where_it_can(tmp_path):
    module = make_project(tmp_path / "p")
    assert problems_of(module, overrides=["eval_dataset=null", "model=null"]) == (
        "overrides: invalid value @ eval_dataset: must be a table of Dataset fields (got "
        "'null'); no settings file or override can remove eval_dataset: set eval_dataset = "
        "None on the class (a subclass drops its base's)",
        "overrides: invalid value @ model: must be a table of Model fields (got 'null')",
    )


def test_an_algorithm_parts_argument_under_algorithm_is_pointed_to_its_table(tmp_path):
    """``omega`` under [algorithm] with gigpo was "extra fields found (omega) @ algorithm"
    with no lead (sweep 15 W5)."""
    module = make_project(tmp_path / "p", toml="[algorithm]\nomega = 0.5\n")
    assert problems_of(module) == (
        f"{tmp_path / 'p' / 'tunedsl.toml'}: extra fields found (omega) @ algorithm: it is an "
        f"argument of the advantage gigpo; set algorithm.advantage_args.omega (in TOML: under "
        f"[algorithm.advantage_args])",)


def test_a_pyproject_given_as_the_settings_file_is_read_by_its_tool_table(tmp_path):
    """``--settings pyproject.toml`` read the whole file as settings: "extra fields found
    (build-system)" (sweep 15 W11); its [tool.tunedsl] table is what it holds of them."""
    module = make_project(tmp_path / "p")
    pyproject = tmp_path / "elsewhere" / "pyproject.toml"
    pyproject.parent.mkdir()
    pyproject.write_text('[build-system]\nrequires = ["x"]\n[tool.tunedsl]\n'
                         'rollout_timeout = 9\n')
    assert load(module, settings=pyproject).rollout_timeout == 9


def test_wrong_type_is_reported(tmp_path):
    """group_size = "eight" is refused with the value shown."""
    module = make_project(tmp_path / "p", toml='[algorithm]\ngroup_size = "eight"\n')
    assert problems_of(module) == (
        f"{tmp_path / 'p' / 'tunedsl.toml'}: invalid value @ algorithm.group_size: "
        "must be an integer (got 'eight')",)


@pytest.mark.parametrize("raw, text", [("123", "123"), ("1.5", "1.5"), ("true", "true")])
def test_a_number_where_text_belongs_is_told_to_quote_it(tmp_path, raw, text):
    """``--set model.model_path=123`` (a model named by digits) is read as a number, as
    TOML reads it; the line said only "must be a non-empty string (got 123)" (sweep 50's
    known list)."""
    module = make_project(tmp_path / "p", toml=f"[model]\ntool_call_parser = {raw}\n")
    got = {"123": "123", "1.5": "1.5", "true": "True"}[raw]
    assert problems_of(module, overrides=[f"model.model_path={raw}"]) == (
        f"{tmp_path / 'p' / 'tunedsl.toml'}: invalid value @ model.tool_call_parser: must be a "
        f"non-empty string (got {got}); to mean the text {text}, quote it: "
        f'tool_call_parser = "{text}"',
        f"overrides: invalid value @ model.model_path: must be a non-empty string (got {got}); "
        f"to mean the text {text}, quote it: overrides item 'model.model_path=\"{text}\"'",)


def test_missing_required_fields_are_all_reported(tmp_path):
    """No model and no dataset: model_path, max_model_len and train_dataset are all named."""
    module = make_project(tmp_path / "p", body="")
    label = f"Exp ({module}:{class_line(module)})"
    assert problems_of(module) == (
        f"{label}: required field missing @ train_dataset.path; set "
        'train_dataset = Dataset("path/to/data") on the class, path = ... under '
        "[train_dataset] in tunedsl.toml, or overrides item train_dataset.path=...",
        f"{label}: required field missing @ model.model_path; set "
        'model = Model("org/model", max_model_len=4096) on the class, model_path = ... under '
        "[model] in tunedsl.toml, or overrides item model.model_path=...",
        f"{label}: required field missing @ model.max_model_len; set "
        "Model(..., max_model_len=4096) on the class, max_model_len = ... under [model] in "
        "tunedsl.toml, or overrides item model.max_model_len=...",
    )


def test_missing_max_model_len_alone(tmp_path):
    """A model without max_model_len anywhere is the one problem reported."""
    module = make_project(tmp_path / "p", '    train_dataset = Dataset("data")\n    model = Model("m")\n')
    [problem] = problems_of(module)
    assert problem.endswith(": required field missing @ model.max_model_len; set "
                            "Model(..., max_model_len=4096) on the class, max_model_len = ... "
                            "under [model] in tunedsl.toml, or overrides item model.max_model_len=...")


def test_unknown_algorithm_type(tmp_path):
    """An unknown algorithm type lists the choices and suggests the closest."""
    module = make_project(tmp_path / "p", toml='[algorithm]\nalgorithm_type = "grpoo"\n')
    assert problems_of(module) == (
        f"{tmp_path / 'p' / 'tunedsl.toml'}: invalid value @ algorithm.algorithm_type: 'grpoo' "
        "is not a known algorithm type (did you mean 'grpo'?); choose one of: asymre, cispo, "
        "dapo, gigpo, grpo, grpo_verl, gspo, jsd, mix, mix_chord, multi_step_grpo, "
        "on_policy_distill, opmd, ppo, raft, rec, reinforceplusplus, rloo, sapo, sft, sppo, topr",)


def test_unknown_monitor(tmp_path):
    """An unknown monitor lists Trinity's monitors."""
    module = make_project(tmp_path / "p", toml='monitor = "tensorbord"\n')
    assert problems_of(module) == (
        f"{tmp_path / 'p' / 'tunedsl.toml'}: invalid value @ monitor: 'tensorbord' is not a known "
        "monitor (did you mean 'tensorboard'?); choose one of: mlflow, swanlab, tensorboard, wandb",)


def test_group_size_one_with_grpo(tmp_path):
    """grpo with group_size = 1 is refused by the graph check, naming the settings file
    that gave the value (it named the class, sweep 46 A-W5)."""
    module = make_project(tmp_path / "p", toml='[algorithm]\nalgorithm_type = "grpo"\ngroup_size = 1\n')
    assert problems_of(module) == (
        f"{tmp_path / 'p' / 'tunedsl.toml'}: algorithm.group_size = 1: algorithm.algorithm_type "
        "'grpo' compares rollouts of the same task, so it needs group_size >= 2",)


def test_a_problem_of_two_settings_given_by_two_layers_names_both(tmp_path):
    """A graph check's line was named by the layer that gave the first setting it names
    alone: a warm-up from tunedsl.toml refused for the LoRA a --set gave named only the
    file (sweep 47's known list)."""
    module = make_project(tmp_path / "p", toml=(
        '[warmup]\nalgorithm_type = "sft"\n[warmup_dataset]\npath = "data"\n'))
    assert problems_of(module, overrides=["model.lora.rank=8"]) == (
        f"{tmp_path / 'p' / 'tunedsl.toml'}, overrides: warmup: model.lora trains adapters, and "
        f"a warm-up's adapters would have to be merged before RL adds its own; warm up without "
        f"LoRA, or run the SFT as an experiment of its own",)


def test_workflow_in_toml_is_refused(tmp_path):
    """Code keys cannot come from TOML."""
    module = make_project(tmp_path / "p", toml='workflow = "exp:solve"\n')
    assert problems_of(module) == (
        f"{tmp_path / 'p' / 'tunedsl.toml'}: workflow cannot be set here; it is code: "
        "assign it on the @experiment class",)


def test_settings_in_toml_is_refused_as_a_file_name_not_code(tmp_path):
    """``settings = "other.toml"`` in tunedsl.toml was refused as "it is code" (sweep 30
    A-W11): it names a settings file, which cannot be given inside one."""
    module = make_project(tmp_path / "p", toml='settings = "other.toml"\n')
    assert problems_of(module) == (
        f"{tmp_path / 'p' / 'tunedsl.toml'}: settings cannot be set here: it names a settings "
        f"file, which cannot be given inside one; give it with --settings FILE, or settings = "
        f"... on the @experiment class",)


def test_several_problems_from_several_layers_are_reported_together(tmp_path):
    """TOML and --set problems all arrive in one ConfigError, in layer order."""
    toml = 'monitor = "nope"\n[algorithm]\nlr = 1\ngroup_size = "eight"\n'
    module = make_project(tmp_path / "p", toml=toml)
    problems = problems_of(module, overrides=["algorithm.batch_size=zero"])
    path = tmp_path / "p" / "tunedsl.toml"
    assert len(problems) == 4
    assert problems[0].startswith(f"{path}: invalid value @ monitor: 'nope' is not a known monitor")
    assert problems[1:] == (
        f"{path}: extra fields found (lr) @ algorithm (did you mean 'learning_rate'?)",
        f"{path}: invalid value @ algorithm.group_size: must be an integer (got 'eight')",
        "overrides: invalid value @ algorithm.batch_size: must be an integer (got 'zero')",
    )


def test_problems_are_data_a_caller_can_filter_by_setting(tmp_path, monkeypatch):
    """Each problem keeps where it was given, the setting and the fix apart from its line,
    so a caller can pick the ones about one setting (or word them its own way)."""
    monkeypatch.delenv("TUNEDSL_T_UNSET", raising=False)
    module = make_project(tmp_path / "p", toml='[model]\nbase_url = "${env:TUNEDSL_T_UNSET}"\n')
    with pytest.raises(ConfigError) as caught:
        load(module, overrides=["algorithm.group_size=eight", "monitr=x"])
    toml = str(tmp_path / "p" / "tunedsl.toml")
    details = caught.value.details
    assert [(problem.where, problem.setting) for problem in details] == [
        ("overrides", "algorithm.group_size"), ("overrides", "monitr"),
        (toml, "model.base_url")]
    assert details[2].fix == "export it, or give a default: ${env:TUNEDSL_T_UNSET,default}"
    assert caught.value.problems == tuple(str(problem) for problem in details)
    assert caught.value.problems[0] == (
        "overrides: invalid value @ algorithm.group_size: must be an integer (got 'eight')")


def test_a_number_read_from_the_environment_is_that_number(tmp_path, monkeypatch):
    """``${env:GS}`` for a number setting: the variable's text read as the value it
    spells (it was refused as "must be an integer (got '4')"); text that spells no number
    is still refused, naming the reference as the user wrote it (it showed the YAML's
    ``${oc.env:...}``: sweep 39 A-W7)."""
    monkeypatch.setenv("TUNEDSL_T_GS", "4")
    monkeypatch.setenv("TUNEDSL_T_LR", "2e-6")
    module = make_project(tmp_path / "p", toml='[algorithm]\ngroup_size = "${env:TUNEDSL_T_GS}"\n'
                          'learning_rate = "${env:TUNEDSL_T_LR}"\n')
    graph = load(module, overrides=["rollout_timeout=${env:TUNEDSL_T_GS}"])
    assert (graph.algorithm.group_size, graph.algorithm.learning_rate, graph.rollout_timeout) \
        == (4, 2e-6, 4)
    graph = load(module, overrides=["trinity.algorithm.repeat_times=${env:TUNEDSL_T_GS}"])
    assert graph.algorithm.group_size == 4  # a [trinity] key tunedsl reads back, alike
    monkeypatch.setenv("TUNEDSL_T_GS", "four")
    assert problems_of(module) == (
        f"{tmp_path / 'p' / 'tunedsl.toml'}: invalid value @ algorithm.group_size: must be an "
        f"integer (got 'four') (read from the environment: ${{env:TUNEDSL_T_GS}})",)


def test_a_number_read_from_the_environment_is_read_as_set_reads_it(tmp_path, monkeypatch):
    """``.5`` from the environment was "must be a number (got '.5')", where ``--set`` takes
    it; ``90.0`` seconds was "must be a positive number of seconds (got '90.0')", which it
    is: the rule it breaks is whole seconds (sweep 49 A-W6)."""
    monkeypatch.setenv("TUNEDSL_T_TEMP", ".5")
    monkeypatch.setenv("TUNEDSL_T_RT", "90.0")
    module = make_project(tmp_path / "p", toml='rollout_timeout = "${env:TUNEDSL_T_RT,60}"\n'
                          '[model]\ntemperature = "${env:TUNEDSL_T_TEMP}"\n')
    assert problems_of(module) == (
        f"{tmp_path / 'p' / 'tunedsl.toml'}: invalid value @ rollout_timeout: must be a whole "
        f"number of seconds, as Trinity reads it (got 90.0) (read from the environment: "
        f"${{env:TUNEDSL_T_RT,60}})",)
    monkeypatch.setenv("TUNEDSL_T_RT", "90")
    assert (load(module).model.temperature, load(module).rollout_timeout) == (0.5, 90)


@pytest.mark.parametrize("setting", ["rollout_timeout", "algorithm.group_size"])
def test_an_escaped_env_reference_for_a_number_is_said_to_be_text(tmp_path, setting):
    """``$${env:GS}`` (the text ``${env:GS}`` itself) for a number was refused "(read from
    the environment: \\${env:GS})", though nothing was read (sweep 35 A-W9)."""
    section, _, key = setting.rpartition(".")
    toml = (f"[{section}]\n" if section else "") + f'{key} = "$${{env:TUNEDSL_T_GS}}"\n'
    module = make_project(tmp_path / "p", toml=toml)
    kind = "a positive number of seconds" if key == "rollout_timeout" else "an integer"
    assert problems_of(module) == (
        f"{tmp_path / 'p' / 'tunedsl.toml'}: invalid value @ {setting}: must be {kind} (got "
        f"'${{env:TUNEDSL_T_GS}}') ($${{env:...}} is that text itself; write ${{env:NAME}} to "
        f"read the variable)",)


def test_another_librarys_name_for_a_setting_suggests_tunedsls():
    """``lr`` is no near spelling of ``learning_rate``: named all the same (README's
    example shows the suggestion)."""
    from tunedsl.errors import did_you_mean

    assert did_you_mean("lr", ["learning_rate", "group_size"]) == \
        " (did you mean 'learning_rate'?)"
    assert did_you_mean("num_generations", ["learning_rate", "group_size"]) == \
        " (did you mean 'group_size'?)"
    assert did_you_mean("lr", ["temperature"]) == ""


def test_two_letters_swapped_suggest_the_name_they_spell():
    """``gpro`` was told "did you mean 'gspo'?", another algorithm (sweep 49 A-W13)."""
    from tunedsl.dsl.trinity_fields import ALGORITHM_TYPES
    from tunedsl.errors import did_you_mean

    assert did_you_mean("gpro", ALGORITHM_TYPES) == " (did you mean 'grpo'?)"
    assert did_you_mean("gspo", ALGORITHM_TYPES) == " (did you mean 'gspo'?)"
    assert did_you_mean("rloo", ["rolo", "loor"]) == " (did you mean 'rolo'?)"


def test_a_python_trinity_dicts_dotted_keys_nest_as_in_toml(tmp_path):
    """``trinity = {"algorithm.kl_loss_fn": "k3"}`` in a class passed `config` as one key
    Trinity does not know (refused later, in its words); dotted keys nest as TOML's do, a
    dotted key and a table for the same place merge, and the setting it names is read."""
    module = make_project(tmp_path / "p", FULL + (
        '    trinity = {"algorithm.kl_loss_fn": "k3", "explorer.max_retry_times": 3,\n'
        '               "explorer": {"eval_on_startup": False}}\n'))
    graph = load(module)
    assert graph.trinity == {"algorithm": {"kl_loss_fn": "k3"},
                             "explorer": {"max_retry_times": 3, "eval_on_startup": False}}
    assert graph.algorithm.kl_loss_fn == "k3"
    config = trinity_config(graph)
    assert config["algorithm"]["kl_loss_fn"] == "k3" and "algorithm.kl_loss_fn" not in config
    assert (config["explorer"]["max_retry_times"], config["explorer"]["eval_on_startup"]) == (
        3, False)


def test_an_inherited_relative_path_is_meant_from_the_class_that_wrote_it(tmp_path):
    """A subclass in another folder inherited trinity_config = "base.yaml" resolved against
    its own file, while the base's Dataset("data") resolved against the base's: both are
    the base's now, and a path the subclass sets is its own."""
    base = make_project(tmp_path / "base", FULL + '    trinity_config = "base.yaml"\n')
    # a module name of its own: other tests' projects import an "exp" too
    base = base.rename(base.parent / "inherited_base.py")
    (base.parent / "base.yaml").write_text("explorer:\n  max_retry_times: 3\n")
    sub = tmp_path / "elsewhere"
    sub.mkdir()
    (sub / "sub.py").write_text(
        "import sys\n"
        f"sys.path.insert(0, {str(base.parent)!r})\n"
        "from tunedsl import experiment\n"
        "from inherited_base import Exp\n\n\n"
        "@experiment\n"
        "class Sub(Exp):\n"
        "    pass\n")
    graph = tunedsl.load_experiment(f"{sub / 'sub.py'}:Sub")
    assert graph.trinity_config == str((base.parent / "base.yaml").resolve())
    assert graph.train_dataset.path == str((base.parent / "data").resolve())
    (sub / "own.yaml").write_text("explorer:\n  max_retry_times: 2\n")
    (sub / "own.py").write_text((sub / "sub.py").read_text().replace(
        "    pass\n", '    trinity_config = "own.yaml"\n'))
    graph = tunedsl.load_experiment(f"{sub / 'own.py'}:Sub")
    assert graph.trinity_config == str((sub / "own.yaml").resolve())


from hypothesis import given, settings  # noqa: E402
from hypothesis import strategies as st  # noqa: E402


@settings(max_examples=200, deadline=None)
@given(st.text(st.characters(exclude_categories=("Cs", "Cc")), min_size=1, max_size=12)
       .filter(str.strip))  # (a name of blank space alone is refused as an empty part)
def test_a_quoted_key_part_is_the_name_it_quotes(name):
    """``--set 'params."a.b"=1'`` is the param ``a.b``, as TOML reads the key (its quotes
    and dots were kept in the name, or split it: sweep 16 S1)."""
    import json

    quoted = json.dumps(name, ensure_ascii=False)  # TOML basic string: JSON escapes
    assert parse_overrides([f"params.{quoted}=1"]).values == {"params": {name: 1}}


@settings(max_examples=50, deadline=None)
@given(st.lists(st.sampled_from([" ", "\t"]), max_size=2).map("".join),
       st.lists(st.sampled_from([" ", "\t"]), max_size=2).map("".join))
def test_blank_space_around_a_keys_dots_is_taken_as_toml_takes_it(before, after):
    """``--set ' algorithm . group_size = 4'`` is TOML's ``algorithm.group_size`` (the
    space had been kept in the names: sweep 19 W2), as the same key in a file reads."""
    key = f"{before}algorithm{after}.{before}group_size{after}"
    assert parse_overrides([f"{key}=4"]).values == {"algorithm": {"group_size": 4}}
    assert parse_overrides([f'params{after}.{before}"a b"=1']).values == {
        "params": {"a b": 1}}


def test_a_key_that_is_not_toml_is_refused_in_one_line():
    with pytest.raises(ConfigError) as raised:
        parse_overrides(['params."a"b=1'])
    assert str(raised.value) == ("overrides item 'params.\"a\"b=1': the key 'params.\"a\"b' is "
                                 "not a TOML key; quote a part holding dots or spaces whole, e.g. "
                                 "'params.\"a.b\"=1'")


def test_a_pyproject_under_another_name_is_read_for_its_table(tmp_path):
    module = make_project(tmp_path / "p")
    dev = tmp_path / "pyproject-dev.toml"
    dev.write_text('[project]\nname = "x"\n[tool.tunedsl]\nproject = "dev"\n')
    assert load(module, settings=str(dev)).project == "dev"


@pytest.mark.parametrize("params, problem", [
    # a list appended to itself: every reader of the layer recursed until RecursionError
    ("(lambda loop: (loop.append(loop), {'loop': loop})[1])([])",
     "holds itself (a list or table inside itself), which no YAML can write; give a copy "
     "instead of the container itself"),
    ("{'deep': eval('[' * 150 + ']' * 150)}", "nested more than 100 deep; flatten it"),
])
def test_a_setting_that_holds_itself_or_nests_too_deep_is_one_line(tmp_path, params, problem):
    module = make_project(tmp_path / "p", FULL + f"    params = {params}\n")
    assert problems_of(module) == (
        f"Exp ({module}:{class_line(module)}): invalid value @ params: {problem}",)


def test_the_same_list_twice_is_not_a_list_inside_itself():
    """A value shared by two settings (not nested in itself) is fine: it travels twice."""
    from tunedsl.config.nested import nesting_problem

    shared = [1, [2]]
    assert nesting_problem({"a": shared, "b": [shared, shared]}) is None
    assert nesting_problem(eval("[" * 100 + "]" * 100)) is None  # 100 deep is allowed


AUX_JUDGED = '''\
from tunedsl import Dataset, JudgeOutput, Model, WorkflowOutput, experiment, judge, workflow


@workflow
async def solve(task, model):
    return WorkflowOutput(response=task["question"])


@judge
async def graded(task, response, auxiliary_models):
    said = await auxiliary_models["grader"].chat([{"role": "user", "content": response}])
    return JudgeOutput(reward=float(said.content == "yes"))


@judge
async def handed_on(task, response, auxiliary_models):
    return JudgeOutput(reward=await score(auxiliary_models, response))


async def score(models, response):
    return 1.0


@experiment
class Exp:
    workflow = solve
    judge = graded
    train_dataset = Dataset("data")
    model = Model("m", max_model_len=64)
    auxiliary_models = {"grader": Model("g", max_model_len=64)}


@experiment
class HandedOn(Exp):
    judge = handed_on
'''


def test_an_auxiliary_model_no_function_reads_is_refused(tmp_path):
    """``--set auxiliary_models.gradr...`` (a typo), or a settings file's
    ``[auxiliary_models.judge]`` where the judge reads ``grader``, added a model never
    called, the one read staying as it was (sweep 44 A): refused, with the name read. A
    judge that hands the models on reads any name: nothing is said."""
    module = make_project(tmp_path / "p", body="")
    module.write_text(AUX_JUDGED)
    typo = ["auxiliary_models.gradr.model_path=g2", "auxiliary_models.gradr.max_model_len=64"]
    assert problems_of(module, overrides=typo) == (
        f"overrides: auxiliary_models.gradr: neither the workflow nor the judge reads "
        f"it (they read 'grader') (did you mean 'grader'?), so it would never be called; name "
        f"it as they read it, or remove it",)
    assert load(module).auxiliary_models.keys() == {"grader"}
    handed_on = tunedsl.load_experiment(f"{module}:HandedOn", overrides=typo)
    assert handed_on.auxiliary_models.keys() == {"grader", "gradr"}


def test_an_endpoint_model_s_name_is_no_folder_beside_the_module(tmp_path, monkeypatch):
    """A model an endpoint serves is named: ``Model("m", base_url=...)`` beside a folder
    ``m`` sent its absolute path as the name, and check said the endpoint "does not list
    '/tmp/.../m'" (sweep 44 A)."""
    module = make_project(tmp_path / "p", body="")
    module.write_text(AUX_JUDGED + '''

@experiment
class Served(Exp):
    auxiliary_models = {"grader": Model("Qwen/Qwen3-8B", base_url="http://127.0.0.1:9/v1")}
''')
    (tmp_path / "p" / "Qwen" / "Qwen3-8B").mkdir(parents=True)
    monkeypatch.chdir(tmp_path / "p")  # (where --set's relative paths are read)
    served = tunedsl.load_experiment(f"{module}:Served")
    assert served.auxiliary_models["grader"].model_path == "Qwen/Qwen3-8B"
    overridden = load(module, overrides=["auxiliary_models.grader.base_url=http://127.0.0.1:9/v1",
                                         "auxiliary_models.grader.model_path=Qwen/Qwen3-8B"])
    assert overridden.auxiliary_models["grader"].model_path == "Qwen/Qwen3-8B"
    local = load(module, overrides=["auxiliary_models.grader.model_path=Qwen/Qwen3-8B"])
    assert local.auxiliary_models["grader"].model_path == str(tmp_path / "p" / "Qwen" / "Qwen3-8B")


def test_a_class_model_given_an_endpoint_by_a_later_layer_keeps_its_name(tmp_path, monkeypatch):
    """The class's ``Model("Qwen/Qwen3-8B")`` beside a folder of that name, pointed at an
    endpoint by ``--set`` or a settings file's ``base_url``: the folder's absolute path was
    sent as the model's name (sweep 45 A-W5). Without an endpoint it is the folder."""
    module = make_project(tmp_path / "p", body="")
    module.write_text(AUX_JUDGED + '''

@experiment
class Local(Exp):
    auxiliary_models = {"grader": Model("Qwen/Qwen3-8B")}
''')
    (tmp_path / "p" / "Qwen" / "Qwen3-8B").mkdir(parents=True)
    monkeypatch.chdir(tmp_path / "p")
    folder = str(tmp_path / "p" / "Qwen" / "Qwen3-8B")
    assert tunedsl.load_experiment(f"{module}:Local").auxiliary_models[
        "grader"].model_path == folder
    served = tunedsl.load_experiment(f"{module}:Local", overrides=[
        "auxiliary_models.grader.base_url=http://127.0.0.1:9/v1"])
    assert served.auxiliary_models["grader"].model_path == "Qwen/Qwen3-8B"
    (tmp_path / "p" / "served.toml").write_text(
        '[auxiliary_models.grader]\nbase_url = "http://127.0.0.1:9/v1"\n')
    from_file = tunedsl.load_experiment(f"{module}:Local", settings=str(tmp_path / "p" /
                                                                      "served.toml"))
    assert from_file.auxiliary_models["grader"].model_path == "Qwen/Qwen3-8B"
    assert type(from_file.auxiliary_models["grader"].model_path) is str


def test_a_judge_a_decorator_wraps_reads_any_auxiliary_model(tmp_path):
    """Under a functools.wraps decorator, the source read was the wrapped function's, not
    the wrapper's that runs, and a model the wrapper calls was refused (sweep 45 A-W5)."""
    module = make_project(tmp_path / "p", body="")
    module.write_text(AUX_JUDGED.replace("@judge\nasync def graded", """\
import functools


def calls_h(judge_fn):
    @functools.wraps(judge_fn)
    async def wrapper(task, response, auxiliary_models):
        await auxiliary_models["h"].chat([])
        return await judge_fn(task, response, auxiliary_models)
    return wrapper


@judge
@calls_h
async def graded"""))
    graph = load(module, overrides=["auxiliary_models.h.model_path=g2",
                                    "auxiliary_models.h.max_model_len=64"])
    assert graph.auxiliary_models.keys() == {"grader", "h"}


def test_a_later_layer_s_total_epochs_replaces_an_earlier_total_steps(tmp_path):
    """``--set train_dataset.total_epochs=2`` over a class's ``total_steps``: the run went
    total_steps, the epochs asked for dropped without a word (sweep 47 A-S4). Both in one
    layer are refused: one of them would be ignored."""
    graph = tunedsl.load_experiment("tests.fixtures.local.agents:WarmedUp",
                                    overrides=["warmup_dataset.total_epochs=2"])
    assert (graph.warmup_dataset.total_steps, graph.warmup_dataset.total_epochs) == (None, 2)
    kept = tunedsl.load_experiment("tests.fixtures.local.agents:WarmedUp")
    assert kept.warmup_dataset.total_steps == 3
    with pytest.raises(ConfigError) as refused:
        tunedsl.load_experiment("tests.fixtures.local.agents:WarmedUp", overrides=[
            "warmup_dataset.total_epochs=2", "warmup_dataset.total_steps=5"])
    assert str(refused.value) == (
        "overrides: warmup_dataset.total_epochs = 2 is given with total_steps = 5, which "
        "decides the run's length (Trinity's rule), so the epochs would be ignored; give one "
        "of them")
