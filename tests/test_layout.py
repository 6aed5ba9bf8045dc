"""The package's layout keeps its promises: no import cycles, arrows pointing one way.

Every ``import`` statement counts, those inside functions too, since a deferred import
is still a dependency. The stages, lowest first: errors and wording, the DSL,
configuration, data and model clients, run directories and the rollout, the checks (with
the Trinity run reader and the test kit), evaluation, backends, and the entry points that
choose a backend. Each folder holds one concept, named for it in its ``__init__``.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

PACKAGE = Path(__file__).resolve().parents[1] / "tunedsl"

#: Rank of each stage; a module may import its own stage or a lower one.
STAGES = {
    "tunedsl.errors": 0, "tunedsl.wording": 0, "tunedsl.interrupts": 0, "tunedsl.keys": 0,
    "tunedsl.lfs": 0, "tunedsl.access": 0, "tunedsl.text": 0,
    "tunedsl.dsl": 1,
    "tunedsl.config": 2,
    "tunedsl.data": 3, "tunedsl.models": 3,
    "tunedsl.runs": 4, "tunedsl.rollout": 4,
    "tunedsl.checks": 5, "tunedsl.trinity_runs": 5, "tunedsl.testing": 5,
    "tunedsl.evaluation": 6,
    "tunedsl.backends": 7,
    "tunedsl.api": 8, "tunedsl.cli": 8, "tunedsl.reach": 8, "tunedsl.view": 8, "tunedsl": 8,
    "tunedsl.__main__": 8,
}
#: The one upward arrow, on purpose: ``DatasetConfig.preview`` (AgentScope's tuner) streams rows.
ALLOWED_UPWARD = {("tunedsl.dsl.records", "tunedsl.data.preview")}


def module_files(root: Path) -> dict[str, Path]:
    """Dotted module name -> file, for every module of the package at ``root``."""
    found = {}
    for path in root.rglob("*.py"):
        parts = path.relative_to(root.parent).with_suffix("").parts
        name = ".".join(parts[:-1] if parts[-1] == "__init__" else parts)
        found[name] = path
    return found


def imports_of(name: str, path: Path, modules: dict[str, Path]) -> set[str]:
    """The package's modules that ``name`` imports anywhere in its file."""
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    targets = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            candidates = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                anchor = package.split(".")[: len(package.split(".")) - node.level + 1]
                base = ".".join([*anchor, base] if base else anchor)
            candidates = [base, *(f"{base}.{alias.name}" for alias in node.names)]
        else:
            continue
        for candidate in candidates:
            while candidate and candidate not in modules:
                candidate = candidate.rpartition(".")[0]
            # A module's own package __init__ runs first anyway; it is not an arrow.
            if candidate and candidate != name and not name.startswith(candidate + "."):
                targets.add(candidate)
    return targets


def import_graph(root: Path) -> dict[str, set[str]]:
    modules = module_files(root)
    return {name: imports_of(name, path, modules) for name, path in modules.items()}


def cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """Groups of modules that import each other, directly or through others (Tarjan)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    found = []

    def visit(node: str) -> None:
        index[node] = low[node] = len(index)
        stack.append(node)
        for target in graph[node]:
            if target not in index:
                visit(target)
                low[node] = min(low[node], low[target])
            elif target in stack:
                low[node] = min(low[node], index[target])
        if low[node] == index[node]:
            group = []
            while True:
                member = stack.pop()
                group.append(member)
                if member == node:
                    break
            if len(group) > 1:
                found.append(sorted(group))

    for node in sorted(graph):
        if node not in index:
            visit(node)
    return found


def stage(module: str) -> int:
    while module not in STAGES:
        module = module.rpartition(".")[0]
    return STAGES[module]


@pytest.fixture(scope="module")
def graph():
    return import_graph(PACKAGE)


def test_the_package_has_no_import_cycles(graph):
    """No group of modules imports each other, counting imports inside functions."""
    assert cycles(graph) == []


def backend_imports(graph: dict[str, set[str]]) -> list[str]:
    """Imports of a backend from a stage below the backends."""
    return sorted(f"{module} -> {target}" for module, targets in graph.items()
                  for target in targets if target.startswith("tunedsl.backends")
                  and stage(module) < STAGES["tunedsl.backends"])


def upward_arrows(graph: dict[str, set[str]]) -> list[str]:
    """Imports of a later stage from an earlier one."""
    return sorted(f"{module} -> {target}" for module, targets in graph.items()
                  for target in targets if stage(target) > stage(module)
                  and (module, target) not in ALLOWED_UPWARD)


def test_dsl_config_runtime_and_tools_never_import_a_backend(graph):
    """Only the entry points (api, cli) choose a backend."""
    assert backend_imports(graph) == []


def test_arrows_point_from_later_stages_to_earlier_ones(graph):
    """errors < dsl < config < data, models < runs, rollout < checks < evaluation <
    backends < entry points."""
    assert upward_arrows(graph) == []


def test_every_folder_and_module_of_the_package_has_a_stage_of_its_own():
    """A new folder or top-level module is placed on purpose (falling back to the package's
    stage would make it an entry point, free to import anything), and says its concept."""
    unplaced = sorted(f"tunedsl.{path.stem if path.suffix else path.name}"
                      for path in PACKAGE.iterdir()
                      if (path.suffix == ".py" and path.stem != "__init__")
                      or (path / "__init__.py").exists())
    assert [name for name in unplaced if name not in STAGES] == []
    undocumented = [path.parent.name for path in PACKAGE.glob("*/__init__.py")
                    if ast.get_docstring(ast.parse(path.read_text())) is None]
    assert undocumented == []


def test_backends_do_not_import_each_other(graph):
    """The local backend runs without Trinity, and Trinity's without torch's trainer."""
    crossed = sorted(f"{module} -> {target}" for module, targets in graph.items()
                     for target in targets
                     if module.startswith("tunedsl.backends.local")
                     and target.startswith("tunedsl.backends.trinity")
                     or module.startswith("tunedsl.backends.trinity")
                     and target.startswith("tunedsl.backends.local"))
    assert crossed == []


def test_the_walker_finds_what_the_checks_forbid(tmp_path):
    """A deferred import that closes a loop and a backend import from the data layer are
    reported, so the checks above can fail."""
    package = tmp_path / "tunedsl"
    (package / "data").mkdir(parents=True)
    (package / "__init__.py").write_text("")
    (package / "data" / "__init__.py").write_text("")
    (package / "data" / "a.py").write_text("from . import b\n")
    (package / "data" / "b.py").write_text("def later():\n    from .a import x\n")
    (package / "data" / "c.py").write_text("from ..backends import local\n")
    (package / "backends").mkdir()
    (package / "backends" / "__init__.py").write_text("")
    (package / "backends" / "local.py").write_text("")
    planted = import_graph(package)
    assert cycles(planted) == [["tunedsl.data.a", "tunedsl.data.b"]]
    assert backend_imports(planted) == ["tunedsl.data.c -> tunedsl.backends",
                                        "tunedsl.data.c -> tunedsl.backends.local"]
    assert upward_arrows(planted) == backend_imports(planted)


#: The functions that take more than `MOST_PARAMETERS` on purpose. Each public entry point's
#: keyword options are separate choices of the user's (they mirror the command's flags) and
#: it builds from them the records everything below it takes whole (`Execution`,
#: `EvalScope`, `PromptSearch`, `Bootstrap`, `Reached`, `AuxiliaryPlan`); `tune` keeps
#: AgentScope's signature; `setting` declares a settings-table field, as `attrs.field` does.
WIDE_ON_PURPOSE = {"tunedsl.api.evaluate", "tunedsl.api.tune", "tunedsl.api.tune_prompt",
                   "tunedsl.evaluation.select.select_model", "tunedsl.dsl.setting.setting"}
MOST_PARAMETERS = 8


def wide_functions(root: Path) -> dict[str, int]:
    """``module.function`` (or ``module.Class.method``) -> its parameters, ``self`` and
    ``cls`` not counted, for every function over `MOST_PARAMETERS` in the package."""
    found = {}
    for name, path in module_files(root).items():
        tree = ast.parse(path.read_text())
        for parent in ast.walk(tree):
            for node in ast.iter_child_nodes(parent):
                if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                    args = node.args
                    count = len([a for a in (*args.posonlyargs, *args.args, *args.kwonlyargs)
                                 if a.arg not in ("self", "cls")])
                    owner = f".{parent.name}" if isinstance(parent, ast.ClassDef) else ""
                    if count > MOST_PARAMETERS:
                        found[f"{name}{owner}.{node.name}"] = count
    return found


def test_no_function_takes_more_than_eight_parameters():
    """Options that belong together travel as one record, not threaded by hand."""
    assert set(wide_functions(PACKAGE)) == WIDE_ON_PURPOSE, wide_functions(PACKAGE)


def test_the_parameter_count_sees_methods_and_keyword_only_parameters(tmp_path):
    package = tmp_path / "tunedsl"
    package.mkdir()
    (package / "__init__.py").write_text("")
    (package / "wide.py").write_text(
        "class C:\n    def m(self, a, b, c, d, e, f, g, h, *, i): ...\n"
        "def fine(a, b, c, d, e, f, g, h): ...\n"
        "async def g(a, /, b, *, c, d, e, f, g, h, i, j): ...\n")
    assert wide_functions(package) == {"tunedsl.wide.C.m": 9, "tunedsl.wide.g": 10}
