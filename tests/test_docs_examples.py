"""Every code block a user would run in README.md and docs/ is exercised, so no example goes
stale (issue 35):

- ``python``: type-checked by mypy against the package, each block a module of its own;
  blocks that need no endpoint also run (an ``@experiment`` they define is loaded, its
  settings checked). A fragment's free names (a helper the guide leaves to the reader) are
  declared in `ASSUMED`, page by page; a block that calls an endpoint says so in a
  ``<!-- type-checked: ... -->`` comment just above it, and is only type-checked. A block
  for software that cannot share the test environment (AgentScope 2.x) names the test
  that runs it in its own: ``<!-- run by tests/NAME.py: why -->``.
- ``bash``: every ``tunedsl`` command parses with tunedsl's own parser (a synopsis's
  ``[optional]`` parts included), every ``-m`` module is importable, every script or file
  of the repository it names exists, every extra it installs is declared.
- ``toml``: loaded as the settings file of the experiment page's class.
- ``yaml``: parsed.
- ``text``: output or layout, shown, not run. A block with no language fails.
"""

from __future__ import annotations

import re
import shlex
import subprocess
import sys
import textwrap
from pathlib import Path

import attrs
import pytest
import yaml

import tunedsl
from tunedsl.cli import build_parser
from tunedsl.dsl.decorators import is_experiment

if sys.version_info >= (3, 11):
    import tomllib
else:
    import tomli as tomllib

REPO = Path(__file__).resolve().parents[1]
#: Pages written by scripts/docs_reference.py: their blocks are --help text and tables.
GENERATED = {"reference/commands.md", "reference/settings.md", "reference/metrics.md",
             "reference/error-catalogue.md", "reference/algorithm-parts.md",
             "reference/run-directory.md", "figures.md"}
FENCE = re.compile(r"^```(\w*)\n(.*?)^```", re.S | re.M)
TYPE_CHECKED_ONLY = re.compile(r"<!-- type-checked: [^>]+-->\n$")
RUN_BY = re.compile(r"<!-- run by (tests/\w+\.py): [^>]+-->\n$")

#: Names a page's fragments take from the text around them, with what they stand for.
ASSUMED = {
    "concepts/experiment.md": "async def ask_grader(grader: Any, task: Any, responses: Any) "
                              "-> list[float]: ...\n",
    "guides/agentscope.md": "ChatModelBase = Any\n",
    "guides/credit-per-turn.md": "FrozenLake: Any\nRULES = ''\ndef parse_move(text: str) -> "
                                 "str: ...\n",
}
#: What every block may use without importing it: tunedsl's names, and the guides'
#: workflow and judge where the block does not define its own.
IMPORTS = "from typing import Any\nimport tunedsl\nfrom tunedsl import *\nfrom tunedsl import group_judge\n"
PRELUDE = IMPORTS + textwrap.dedent('''\
    @workflow
    async def solve(task, model):
        reply = await model.chat([{"role": "user", "content": task["question"]}])
        return WorkflowOutput(response=reply.content)


    @judge
    async def exact(task, response):
        return JudgeOutput(reward=float(task["answer"] in response))
    ''')


@attrs.frozen
class Block:
    page: str
    line: int
    language: str
    code: str
    type_checked_only: bool
    #: The test that runs this block in an environment of its own (None: this file).
    run_by: str | None = None

    @property
    def name(self) -> str:
        return f"{self.page}:{self.line}"


def blocks() -> list[Block]:
    """Every fenced block of README.md and the site's hand-written pages."""
    pages = [REPO / "README.md", *sorted((REPO / "docs").rglob("*.md"))]
    found = []
    for path in pages:
        page = path.relative_to(REPO / "docs").as_posix() if "docs" in path.parts else path.name
        if page in GENERATED:
            continue
        text = path.read_text(encoding="utf-8")
        for match in FENCE.finditer(text):
            run_by = RUN_BY.search(text[:match.start()])
            found.append(Block(page, text.count("\n", 0, match.start()) + 1, match.group(1),
                               match.group(2),
                               bool(TYPE_CHECKED_ONLY.search(text[:match.start()])),
                               run_by[1] if run_by else None))
    return found


BLOCKS = blocks()


def of(language: str) -> list[Block]:
    return [block for block in BLOCKS if block.language == language and block.run_by is None]


def run_by(test: str) -> list[Block]:
    """The blocks that ``test`` (``tests/NAME.py``) runs in an environment of its own."""
    return [block for block in BLOCKS if block.run_by == test]


def test_a_block_run_elsewhere_names_a_test_that_runs_it():
    """Each ``<!-- run by tests/NAME.py -->`` block's test exists and takes its blocks
    from `run_by` (so the block is run, not only named)."""
    for block in BLOCKS:
        if block.run_by is not None:
            test = REPO / block.run_by
            assert test.is_file() and f'run_by("{block.run_by}")' in test.read_text(), block.name


def ids(found: list[Block]) -> list[str]:
    return [block.name for block in found]


def test_every_block_says_its_language():
    assert [block.name for block in BLOCKS if not block.language] == []
    assert {block.language for block in BLOCKS} <= {"python", "bash", "toml", "yaml", "text"}


def module_source(block: Block) -> str:
    defined = "async def solve(" in block.code or "async def exact(" in block.code
    return (IMPORTS if defined else PRELUDE) + ASSUMED.get(block.page, "") + "\n" + block.code


@pytest.mark.skipif(sys.version_info[:2] != (3, 11),
                    reason="types are checked against one Python, 3.11 (as the package is)")
def test_every_python_block_type_checks(tmp_path):
    pytest.importorskip("mypy")
    files = []
    for number, block in enumerate(of("python")):
        path = tmp_path / f"block_{number}.py"
        path.write_text(module_source(block), encoding="utf-8")
        files.append(path)
    done = subprocess.run([sys.executable, "-m", "mypy", "--no-error-summary",
                           "--cache-dir", str(tmp_path / "cache"), "--ignore-missing-imports",
                           "--check-untyped-defs", "--follow-imports", "silent",
                           "--disable-error-code", "empty-body",
                           *map(str, files)],
                          cwd=REPO, capture_output=True, text=True)
    python = of("python")

    def named(line: str) -> str:  # block_N.py:L -> page:line
        found = re.match(r".*block_(\d+)\.py:(\d+)", line)
        if not found:
            return line
        block = python[int(found[1])]
        at = int(found[2]) - module_source(block).count("\n", 0, -len(block.code)) - 1
        return f"{block.page}:{block.line + at}: {line.split(': ', 1)[-1]}"
    assert done.returncode == 0, "\n".join(map(named, done.stdout.splitlines()))


@pytest.mark.parametrize("block", [b for b in of("python") if not b.type_checked_only],
                         ids=ids([b for b in of("python") if not b.type_checked_only]))
def test_a_python_block_runs(block, tmp_path, monkeypatch, fresh_modules):
    """The block runs as a module; each @experiment it defines loads (its settings are
    checked as `tunedsl check` checks them before reading data); each test function it
    defines passes, given the test kit's scripted model."""
    monkeypatch.chdir(tmp_path)
    monkeypatch.syspath_prepend(str(REPO))
    source = module_source(block)
    namespace: dict = {"__name__": "docs_block"}
    exec(compile(source, f"{block.page}", "exec"), namespace)  # noqa: S102 - the docs' own
    for name, value in list(namespace.items()):
        if isinstance(value, type) and is_experiment(value):
            graph = tunedsl.load_experiment(value)
            assert graph.name == name
        elif name.startswith("test_") and callable(value):
            from tunedsl.testing import ScriptedModel

            value(*[ScriptedModel for _ in range(value.__code__.co_argcount)])


def synopsis_argv(line: str) -> list[str]:
    """A command line's arguments after ``tunedsl``, a synopsis's ``[optional]`` parts and
    ``a|b`` alternatives resolved to the first (every option named must still parse)."""
    line = re.sub(r"\s+#.*$", "", line)
    line = re.sub(r"\[--param \.\.\.\]", "", line).replace("...", "")
    line = re.sub(r"(\w)\|[\w|]+", r"\1", line)
    words = shlex.split(line.replace("[", " ").replace("]", " "))
    for start, word in enumerate(words):
        if word == "tunedsl" or word.endswith("/tunedsl"):
            return words[start + 1:]
    raise AssertionError(f"no tunedsl command in {line!r}")


def command_lines(block: Block) -> list[str]:
    text = block.code.replace("\\\n", " ")
    return [part.strip() for line in text.splitlines()
            for part in re.split(r"\s&&\s", line) if part.strip()]


@pytest.mark.parametrize("block", of("bash"), ids=ids(of("bash")))
def test_a_shell_block_names_only_what_exists(block, capsys):
    parser = build_parser()
    declared = tomllib.loads((REPO / "pyproject.toml").read_text())["project"][
        "optional-dependencies"]
    for line in command_lines(block):
        if "-m tunedsl" in line or line.startswith("tunedsl "):
            argv = synopsis_argv(line)
            if argv == ["--version"]:
                continue
            try:
                parser.parse_args(argv)
            except SystemExit:
                pytest.fail(f"{block.name}: {line!r} does not parse: "
                            f"{capsys.readouterr().err.strip()}")
            continue
        for module in re.findall(r"-m ([\w.]+)", line):
            if module not in {"venv", "pytest", "pip"}:
                assert __import__("importlib.util").util.find_spec(module), (block.name, module)
        for path in re.findall(r"(?:^|\s)((?:scripts|benchmarks|tests|constraints|examples)"
                               r"/[\w./-]+)", line):
            assert (REPO / path).exists(), (block.name, path)
        for extras in re.findall(r'-e "\.\[([\w,]+)\]"', line):
            assert set(extras.split(",")) <= set(declared), (block.name, extras)


@pytest.mark.parametrize("block", of("toml"), ids=ids(of("toml")))
def test_a_settings_block_is_taken_as_a_settings_file(block, tmp_path):
    """The block, as ``tunedsl.toml`` under the experiment page's class: every key is a
    setting in the right place."""
    settings = tmp_path / "tunedsl.toml"
    settings.write_text(block.code, encoding="utf-8")
    namespace: dict = {"__name__": "docs_settings"}
    exec(compile(PRELUDE + textwrap.dedent('''\
        @experiment
        class Math:
            workflow = solve
            judge = exact
            train_dataset = Dataset("data", split="train")
            model = Model("Qwen/Qwen3-0.6B", max_model_len=16384)
            algorithm = Algorithm("multi_step_grpo", group_size=8, batch_size=32)
        '''), "docs_settings", "exec"), namespace)  # noqa: S102
    graph = tunedsl.load_experiment(namespace["Math"], settings=settings)
    assert graph.algorithm.group_size == tomllib.loads(block.code).get(
        "algorithm", {}).get("group_size", 8)


@pytest.mark.parametrize("block", of("yaml"), ids=ids(of("yaml")))
def test_a_yaml_block_parses(block):
    assert isinstance(yaml.safe_load(block.code), dict)


def test_every_link_of_readme_into_the_repository_exists():
    """README is not part of the site (whose strict build checks its links): its links into
    docs/ and the repository are checked here."""
    text = (REPO / "README.md").read_text(encoding="utf-8")
    targets = [target.split("#")[0] for target in re.findall(r"\]\(([^)]+)\)", text)
               if "://" not in target]
    assert targets and [target for target in targets if not (REPO / target).exists()] == []
