"""A function's code as a digest: what a resume compares to tell an edited workflow or judge
from the one that scored what it resumes (an eval's results, a tuning's candidates, a
run's rewards).

The digest is of source files, not of values: the file that defines the function and
every file of the user's project it imports (anywhere in the file, inside functions
too), and theirs in turn, each read as Python's parser reads it (comments, blank lines
and docstrings aside); and the environment variables those files name. A walk of the
values a function reads was tried first: each sweep found another way to reach code or
data it did not follow (a compiled pattern, a ``functools.partial``, a module reached as
``pkg.mod.f``), and values made anew by each import (a time, a uuid) refused a resume of
code nobody had edited. The data files those files read by a literal name count by their
bytes. What the digest leaves out, and a resume cannot tell: files found by a computed
name, services the code calls, its randomness (docs/guides/resuming.md).
"""

from __future__ import annotations

import ast
import copy
import functools
import importlib.util
import inspect
import os
import sys
from collections.abc import Iterator
from typing import Any

from ..data.json_text import digest

#: The most project files one digest reads: a project importing thousands of its own
#: modules is hashed by its first ones (in import order), not read whole at every start.
_MOST_FILES = 2_000
#: The names by which code reads the environment (``os.environ["X"]``, ``os.getenv("X")``,
#: ``environ.get("X")``): each variable named so counts by its value.
_ENVIRONMENT = frozenset({"environ", "environb", "getenv", "getenvb"})
#: Decorators that make a workflow or a judge: another one's definition in a file is left
#: out of a function's digest, so an edit of the judge is not said of the workflow beside it.
_ROLES = frozenset({"workflow", "judge"})


def code_digest(fn: Any) -> str:
    """``name@digest``: a function by its name and a digest of the code it runs with (its
    name alone when its source file cannot be read, as for a function defined at a
    prompt), so an edited judge is told from the one that scored a results file.

    The digest covers the file defining the function (and those defining the decorators
    around it), the user's files those import, and theirs in turn: each as parsed, so
    comments, layout and docstrings do not count; an ``@experiment`` class's settings do
    not count either (they are compared as settings), nor another ``@workflow`` or
    ``@judge`` defined beside it that the rest of the file does not use. The values of the
    environment variables those files name count too, but for those named as secrets
    (a key rotated between a run and its resume is no other code)."""
    function = inspect.unwrap(fn)
    start = [file for file in _defining_files(fn) if users_file(file)]
    if not start:
        return function.__qualname__
    parts: list[str] = []
    variables: set[str] = set()
    named: dict[str, str] = {}
    for label, file in _reached(start):
        tree = _parsed(file)
        if tree is None:
            continue
        # (another role's function left out of its own file only: one imported from
        # another file is used by this one; sweep 52 A-S5)
        kept = _without_others(tree, function.__name__) if file in start else tree
        # (a file by its module's name, not its path: a project moved, or a helper on
        # PYTHONPATH outside it, keeps its digest; sweep 52 A-L3)
        parts.append(f"{label}\n{_canonical(kept)}")
        variables |= _environment_names(kept)
        for name, content in _named_files(kept, os.path.dirname(file), tree).items():
            named.setdefault(name, content)
    parts += [f"{name}\n{content}" for name, content in sorted(named.items())]
    parts += [f"${name}={value!r}" for name in sorted(variables)
              if not _a_secret(name, value := os.environ.get(name))]
    return f"{function.__qualname__}@{digest(chr(10).join(parts))}"


def _a_secret(variable: str, value: str | None) -> bool:
    """Whether an environment variable holds a secret, which a digest leaves out (a key
    rotated between a run and its resume is no other code): named as a secret's and
    holding 16 characters or more. A setting named like one (``PASS_THRESHOLD=5``,
    ``JUDGE_MAX_TOKENS=64``, ``ANSWER_KEY=answer``) counts (sweep 52 A-S4)."""
    from ..keys import names_a_secret

    return value is not None and len(value) >= 16 and names_a_secret(variable)


def _defining_files(fn: Any) -> list[str]:
    """The source files of ``fn`` and of each function it wraps (a decorator of the user's
    keeps its wrapper in its own file), its own first."""
    files: list[str] = []
    seen: set[int] = set()
    while fn is not None and id(fn) not in seen:
        seen.add(id(fn))
        try:
            file = inspect.getsourcefile(fn)
        except TypeError:
            file = None
        if file and os.path.realpath(file) not in files:
            files.append(os.path.realpath(file))
        fn = getattr(fn, "__wrapped__", None)
    return files[::-1]  # (the innermost: the function the user wrote)


def _reached(start: list[str]) -> Iterator[tuple[str, str]]:
    """``start`` and every file of the user's they import, and theirs in turn, each once
    (at most `_MOST_FILES`), in the order found, each with its label: its module's name
    (``start``'s: the first's position among them)."""
    seen = set(start)
    packages = _packages()
    queue: list[tuple[str, str, str | None]] = [
        (f"<defining {number}>", file, packages.get(file)) for number, file in enumerate(start)]
    while queue and len(seen) <= _MOST_FILES:
        label, file, package = queue.pop(0)
        yield label, file
        tree = _parsed(file)
        if tree is None:
            continue
        for name, imported in _imported_files(tree, package):
            if imported not in seen:
                seen.add(imported)
                # (a package's own name for its __init__; its parent's for a module: what
                # its relative imports start from, loaded or not: sweep 52 A-S6)
                own = name if os.path.basename(imported) == "__init__.py" else \
                    name.rpartition(".")[0]
                queue.append((name, imported, packages.get(imported, own or None)))


def _imported_files(tree: ast.Module, package: str | None) -> Iterator[tuple[str, str]]:
    """The user's modules ``tree`` (a module of ``package``, for its relative imports)
    imports, wherever the import statement is, each as ``(name, file)``: by ``import``,
    ``from ... import``, or ``importlib.import_module``/``__import__`` given a literal."""
    for node in ast.walk(tree):
        names: list[str] = []
        if isinstance(node, ast.Import):
            names = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                if package is None:
                    continue
                parent = package.rsplit(".", node.level - 1)[0] if node.level > 1 else package
                base = f"{parent}.{base}" if base else parent
            names = [base, *(f"{base}.{alias.name}" for alias in node.names)]
        elif isinstance(node, ast.Call) and _called(node) in ("import_module", "__import__") \
                and node.args and isinstance(node.args[0], ast.Constant) and \
                isinstance(node.args[0].value, str):
            names = [node.args[0].value]
        for name in names:
            found = _module_file(name)
            if found is not None and users_file(found):
                yield name, found


def _called(call: ast.Call) -> str:
    """The name a call calls: ``f`` of ``f(...)`` and of ``x.f(...)``, else ``""``."""
    function = call.func
    return function.id if isinstance(function, ast.Name) else \
        function.attr if isinstance(function, ast.Attribute) else ""


def _packages() -> dict[str, str]:
    """The package of each loaded module of the user's, by its file (for its relative
    imports): read once per digest, not once per file."""
    found = {}
    for module in list(sys.modules.values()):
        path, package = getattr(module, "__file__", None), getattr(module, "__package__", None)
        if isinstance(path, str) and isinstance(package, str) and package and users_file(path):
            found[os.path.realpath(path)] = package
    return found


def _module_file(name: str) -> str | None:
    """The source file of the module ``name``: a loaded one's, else where the import system
    would find it, looked up without importing anything (a submodule of a package not yet
    imported is looked for in the package's folders, as the import would: importing the
    package to ask would run its code)."""
    if not name or name.startswith("."):
        return None
    module = sys.modules.get(name)
    if module is not None:
        file = getattr(module, "__file__", None)
    else:
        spec = _spec_without_importing(name)
        file = spec.origin if spec is not None else None
    if not isinstance(file, str) or not file.endswith(".py"):
        return None
    return os.path.realpath(file)


def _spec_without_importing(name: str) -> Any:
    """Where ``name`` would be imported from (its spec), or None: its top-level package
    found as the import system finds it, each part after it in the folders of the one
    before (or asked of a loaded package)."""
    from importlib.machinery import PathFinder

    head, *rest = name.split(".")
    try:
        spec = importlib.util.find_spec(head)  # (a top-level name: nothing is imported)
        for depth in range(1, len(rest) + 1):
            if spec is None:
                return None
            full = ".".join([head, *rest[:depth]])
            loaded = sys.modules.get(full)
            if loaded is not None:
                spec = getattr(loaded, "__spec__", None)
                continue
            folders = spec.submodule_search_locations
            spec = PathFinder.find_spec(full, list(folders)) if folders else None
    except (ImportError, ValueError, AttributeError, TypeError):
        return None
    return spec


def _parsed(file: str) -> ast.Module | None:
    """``file`` as Python's parser reads it, docstrings dropped; None when it cannot be read
    or parsed (its digest then leaves it out, as the code running is what was imported)."""
    return _parsed_cached(file, _stamp(file))


def _stamp(file: str) -> tuple[int, int] | None:
    """What tells an edited file from the one parsed before: its size and change time."""
    try:
        stat = os.stat(file)
    except OSError:
        return None
    return stat.st_size, stat.st_mtime_ns


@functools.lru_cache(maxsize=256)
def _parsed_cached(file: str, stamp: tuple[int, int] | None) -> ast.Module | None:
    import tokenize

    if stamp is None:
        return None
    try:
        with tokenize.open(file) as handle:  # (its coding line, as Python reads it)
            tree = ast.parse(handle.read(), filename=file)
    except (OSError, SyntaxError, ValueError, UnicodeDecodeError, RecursionError):
        return None
    for node in ast.walk(tree):
        body = getattr(node, "body", None)
        if isinstance(node, (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)) \
                and body and isinstance(body[0], ast.Expr) and \
                isinstance(body[0].value, ast.Constant) and isinstance(body[0].value.value, str):
            node.body = body[1:] or [ast.Pass()]
    return tree


def _canonical(node: Any) -> str:
    """A parsed tree as text that each Python from 3.10 on writes alike (a run begun on one
    resumes on another): ``ast.dump`` gains fields in newer versions (``type_params=[]``)
    and ``ast.unparse`` lays code out differently in each; here a field left empty or None
    is left out."""
    if isinstance(node, ast.AST):
        fields = [f"{name}={_canonical(value)}" for name in node._fields
                  if (value := getattr(node, name, None)) is not None and value != []]
        return f"{type(node).__name__}({','.join(fields)})"
    if isinstance(node, list):
        return f"[{','.join(map(_canonical, node))}]"
    return repr(node)


def _decorator_names(node: ast.AST) -> set[str]:
    """The last part of each decorator's name (``tunedsl.judge(...)`` is ``judge``)."""
    names = set()
    for decorator in getattr(node, "decorator_list", []):
        target = decorator.func if isinstance(decorator, ast.Call) else decorator
        if isinstance(target, ast.Name):
            names.add(target.id)
        elif isinstance(target, ast.Attribute):
            names.add(target.attr)
    return names


def _without_others(tree: ast.Module, own: str | None) -> ast.Module:
    """``tree`` without what a function's digest leaves out: the settings of an
    ``@experiment`` class (its statements other than definitions), and each other
    ``@workflow`` or ``@judge`` (not ``own``) that the rest of the file does not name."""
    body: list[ast.stmt] = []
    others: list[ast.stmt] = []
    for node in tree.body:
        decorators = _decorator_names(node)
        if isinstance(node, ast.ClassDef) and "experiment" in decorators:
            defs: list[ast.stmt] = [item for item in node.body if isinstance(
                item, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef))]
            node = copy.copy(node)  # (the parsed tree is cached: never edited in place)
            node.body, node.decorator_list = defs or [ast.Pass()], []
        elif isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)) and \
                decorators & _ROLES and node.name != own:
            others.append(node)
            continue
        body.append(node)
    named = {n.id for n in ast.walk(ast.Module(body=body, type_ignores=[]))
             if isinstance(n, ast.Name)}
    body += [node for node in others if getattr(node, "name", None) in named]
    return ast.Module(body=body, type_ignores=[])


def _named_files(tree: ast.Module, folder: str, whole: ast.Module | None = None) -> dict[str, str]:
    """The data files ``tree`` reads by literal names (``json.load(open("judge.json"))``,
    ``(Path(__file__).parent / "data" / "rubric.json").read_text()``, ``RUBRIC =
    "rubric.json"`` then ``open(RUBRIC)``, ``np.genfromtxt("s.csv")``), each found beside
    the module or else in the working folder, by a digest of its bytes (at most
    `_LARGEST_DATA_FILE`: a model's weights named in code are no rubric). A judge's config
    edited between a run and its resume changed rewards without a word (sweeps 51 B-S3,
    52 A-S1..A-S3). A file the code also writes (a log, a cache) is left out: it changes
    as the run goes, and would refuse every resume (sweep 52 A-L1); the writes are looked
    for in the ``whole`` file, another role's function left out of ``tree`` included (the
    judge writing the cache the module reads at import)."""
    values = _module_values(tree)
    read: set[str] = set()
    written: set[str] = set()
    for source in (tree, *([] if whole is None else [whole])):
        for node in ast.walk(source):
            if isinstance(node, ast.Call):
                for given in _given(node):
                    if _writes(node):
                        written.update(_paths_in(given, values))
                    elif source is tree:
                        read.update(_paths_in(given, values))
    found = {}
    for name in sorted(read - written):
        if os.path.basename(name).startswith(".env") or name.endswith(".env"):
            continue  # (keys kept for the environment: a rotated one is no other code)
        content = _file_digest(os.path.join(folder, name))
        if content is None:  # (beside the module first: the same file from any folder)
            content = _file_digest(os.path.join(os.getcwd(), name))
        if content is not None:
            found[name] = content
    return found


def _module_values(tree: ast.Module) -> dict[str, ast.expr]:
    """The expression each top-level ``NAME = ...`` binds (the last one), so that
    ``open(RUBRIC)`` finds the literal ``RUBRIC`` was given."""
    values = {}
    for node in tree.body:
        if isinstance(node, ast.Assign) and len(node.targets) == 1 and \
                isinstance(node.targets[0], ast.Name):
            values[node.targets[0].id] = node.value
        elif isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name) and \
                node.value is not None:
            values[node.target.id] = node.value
    return values


def _given(call: ast.Call) -> list[ast.expr]:
    """What a call is given: its arguments, its keywords' values, and the object whose
    method it calls (``Path("x").read_text()``)."""
    given = [*call.args, *(word.value for word in call.keywords)]
    if isinstance(call.func, ast.Attribute):
        given.append(call.func.value)
    return given


#: How the names of calls that write a file begin (``json.dump``, ``df.to_csv``,
#: ``path.write_text``, ``np.save``); a logging handler's name ends in "Handler".
_WRITERS = ("write", "dump", "save", "to_", "mkdir", "touch", "unlink", "remove", "rename",
            "replace", "rmtree", "copy", "move", "makedirs", "symlink")


def _writes(call: ast.Call) -> bool:
    """Whether ``call`` writes the file it names: ``open(..., "w")`` (or "a", "x", "+"),
    ``X.open("w")``, a writer's name (`_WRITERS`), a logging handler."""
    called = _called(call)
    if called == "open":
        method = isinstance(call.func, ast.Attribute)  # (Path(...).open(mode))
        place = 0 if method else 1
        mode: Any = call.args[place] if len(call.args) > place else None
        mode = next((word.value for word in call.keywords if word.arg == "mode"), mode)
        return isinstance(mode, ast.Constant) and isinstance(mode.value, str) and \
            bool(set(mode.value) & set("wax+"))
    return called.startswith(_WRITERS) or called.endswith("Handler")


def _paths_in(given: ast.expr, values: dict[str, ast.expr], depth: int = 0) -> set[str]:
    """The relative paths an expression may name: each text in it, and its texts joined
    in the order written (``HERE / "data" / "rubric.json"``, ``os.path.join("prompts",
    "p.txt")``); a name bound at the top of the module read as what it binds."""
    texts: list[tuple[int, int, str]] = []
    for leaf in ast.walk(given):
        if isinstance(leaf, ast.Constant) and isinstance(leaf.value, str) and \
                0 < len(leaf.value) < 256 and not set(leaf.value) & {"\n", "\0"}:
            texts.append((leaf.lineno, leaf.col_offset, leaf.value))
        elif isinstance(leaf, ast.Name) and leaf.id in values and depth < 3 and \
                values[leaf.id] is not given:
            texts += [(leaf.lineno, leaf.col_offset, path)
                      for path in sorted(_paths_in(values[leaf.id], values, depth + 1))]
    ordered = [text for *_, text in sorted(texts)]
    return {*ordered, os.path.join(*ordered)} if ordered else set()


#: The largest data file a code digest reads (`_named_files`).
_LARGEST_DATA_FILE = 16 * 2**20


def _file_digest(path: str) -> str | None:
    """The digest of the regular file ``path`` a run keeps of its data (`bytes_digest`);
    None when it is none, or too large."""
    from pathlib import Path

    from ..data.digest import bytes_digest

    try:
        if not os.path.isfile(path) or os.path.getsize(path) > _LARGEST_DATA_FILE:
            return None
        return bytes_digest(Path(path))
    except (OSError, ValueError):
        return None


def _environment_names(tree: ast.AST) -> set[str]:
    """The environment variables ``tree`` names by a literal: ``os.environ["X"]``,
    ``os.environ.get("X")``, ``os.getenv("X")``, also under another name (``from os import
    environ as env``; sweep 52 A-S7)."""
    aliases = set(_ENVIRONMENT) | {
        alias.asname for node in ast.walk(tree) if isinstance(node, ast.ImportFrom)
        and node.module == "os" for alias in node.names
        if alias.name in _ENVIRONMENT and alias.asname}
    names = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Subscript) and _names_environment(node.value, aliases):
            key = node.slice
        elif isinstance(node, ast.Compare) and len(node.ops) == 1 and \
                isinstance(node.ops[0], (ast.In, ast.NotIn)) and \
                _names_environment(node.comparators[0], aliases):
            key = node.left  # ("HALF" in os.environ: a flag; sweep 52 B-S2)
        elif isinstance(node, ast.Call) and node.args and (
                _names_environment(node.func, aliases)
                or (isinstance(node.func, ast.Attribute)
                    and node.func.attr in ("get", "pop", "setdefault")
                    and _names_environment(node.func.value, aliases))):
            key = node.args[0]
        else:
            continue
        if isinstance(key, ast.Constant) and isinstance(key.value, str):
            names.add(key.value)
    return names


def _names_environment(node: ast.AST, aliases: set[str]) -> bool:
    """Whether ``node`` is ``environ``, ``os.environ``, ``getenv`` or ``os.getenv`` (or
    one of ``aliases``)."""
    return (isinstance(node, ast.Name) and node.id in aliases) or \
        (isinstance(node, ast.Attribute) and node.attr in _ENVIRONMENT)


def users_file(file: str) -> bool:
    """Whether the source file ``file`` is the user's: outside the Python installation, its
    packages and tunedsl."""
    path = os.path.realpath(file) if file else ""
    return bool(path) and not any(path.startswith(folder + os.sep) for folder in _not_users())


@functools.cache
def _not_users() -> tuple[str, ...]:
    """The folders whose files are not the user's: the Python installation's, its
    packages' and tunedsl's (found once: a digest asks of every file it meets)."""
    import sysconfig

    installed = {os.path.realpath(sysconfig.get_path(name))
                 for name in ("stdlib", "platstdlib", "purelib", "platlib")}
    return (*sorted(installed), os.path.dirname(os.path.dirname(os.path.realpath(__file__))))
