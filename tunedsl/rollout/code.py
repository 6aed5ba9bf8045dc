"""A function's code as a digest: what a resume compares to tell an edited workflow or judge
from the one that scored what it resumes (an eval's results, a tuning's candidates, a
run's rewards)."""

from __future__ import annotations

import ast
import functools
import importlib.util
import inspect
import linecache
import os
import sys
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from itertools import islice
from typing import Any

from ..data.json_text import digest

#: How far `code_digest` follows what a function reads into containers and instances (GS =
#: {"strict": Base()}: a dict, then an instance in it), how many items of each it looks at
#: and how many in all: a large table held in a global costs a bounded look, not a walk of
#: every row.
_DEPTH, _ITEMS, _BUDGET = 3, 256, 10_000
#: The names by which a module-level expression reads the environment: a value read so is
#: hashed as it is, since a changed variable may change what the code computes.
_ENVIRONMENT = frozenset({"environ", "environb", "getenv", "getenvb"})


def code_digest(fn: Any) -> str:
    """``name@digest``: a function by its name and a digest of what it computes with (its
    name alone when its source cannot be read, as for a function defined at a prompt), so
    an edited judge is told from the one that scored a results file: its source, the
    source of the user's own functions and classes it uses (in any of the project's
    modules, and theirs in turn: a class's bases and the functions and values its methods
    use; those held in containers and instances it reads), and the plain values (numbers,
    text) of the globals and closure variables it reads. A module-level value made by an
    expression other than a literal (``STARTED = time.time()``) counts as that expression's
    text, which an edit changes and a new process does not (one read from the environment
    counts as its value)."""
    function = inspect.unwrap(fn)
    try:
        inspect.getsource(function)
    except (OSError, TypeError):
        return function.__qualname__
    return f"{function.__qualname__}@{digest(''.join(_Walk().function_parts(function)))}"


def _names(code: Any) -> set[str]:
    """The global and attribute names a code object and the code nested in it use."""
    found = set(code.co_names)
    for constant in code.co_consts:
        if hasattr(constant, "co_names"):
            found |= _names(constant)
    return found


def _plain(value: Any) -> bool:
    """A value whose repr is the same in every process: numbers, text, None, and tuples of
    them."""
    if isinstance(value, tuple):
        return all(map(_plain, value))
    return value is None or isinstance(value, (bool, int, float, complex, str, bytes))


def _users_own(value: Any) -> bool:
    """A function or class of the user's code: defined in a file outside the Python
    installation, its packages and tunedsl."""
    try:
        return users_file(inspect.getsourcefile(value) or "")
    except Exception:  # (a class of a module no longer loaded, an object that is neither)
        return False


def users_file(file: str) -> bool:
    """Whether the source file ``file`` is the user's: outside the Python installation, its
    packages and tunedsl."""
    path = os.path.realpath(file) if file else ""
    return bool(path) and not any(path.startswith(folder + os.sep) for folder in _not_users())


@functools.cache
def _not_users() -> tuple[str, ...]:
    """The folders whose files are not the user's: the Python installation's, its
    packages' and tunedsl's (found once: a digest asks of every class it meets)."""
    import sysconfig

    installed = {os.path.realpath(sysconfig.get_path(name))
                 for name in ("stdlib", "platstdlib", "purelib", "platlib")}
    return (*sorted(installed), os.path.dirname(os.path.dirname(os.path.realpath(__file__))))


@dataclass(frozen=True)
class _Imported:
    """A module-level name bound by ``from MODULE import NAME``: where its value is made."""

    module: str
    name: str


#: A module's top-level binding of a name: the expression assigned to it last, where it was
#: imported from, or None when a statement of another kind (a def, an import) bound it last.
_Binding = ast.expr | _Imported | None


@dataclass(frozen=True)
class _Module:
    """Where a global's value is made: a module's source file and its namespace."""

    file: str
    namespace: dict[str, Any]

    @classmethod
    def of(cls, module: Any) -> _Module | None:
        """The user's ``module`` (None for any other, whose values are hashed as they are)."""
        file = getattr(module, "__file__", None)
        namespace = getattr(module, "__dict__", None)
        if not isinstance(file, str) or not isinstance(namespace, dict) or not users_file(file):
            return None
        return cls(file, namespace)


def _bound_names(target: ast.expr) -> Iterator[str]:
    """The names an assignment's target binds (``A, *B = ...`` binds A and B)."""
    if isinstance(target, ast.Name):
        yield target.id
    elif isinstance(target, (ast.Tuple, ast.List)):
        for element in target.elts:
            yield from _bound_names(element)
    elif isinstance(target, ast.Starred):
        yield from _bound_names(target.value)


def _bindings(source: str, package: Any) -> dict[str, _Binding]:
    """Each name a module's top-level statements bind, to its last binding."""
    found: dict[str, _Binding] = {}
    for statement in ast.parse(source).body:
        if isinstance(statement, ast.Assign):
            for target in statement.targets:
                found.update(dict.fromkeys(_bound_names(target), statement.value))
        elif isinstance(statement, ast.AnnAssign) and statement.value is not None:
            found.update(dict.fromkeys(_bound_names(statement.target), statement.value))
        elif isinstance(statement, ast.ImportFrom):
            try:
                module = importlib.util.resolve_name(
                    "." * statement.level + (statement.module or ""), package)
            except (ImportError, ValueError, TypeError):
                module = None
            for alias in statement.names:
                found[alias.asname or alias.name] = (
                    None if module is None else _Imported(module, alias.name))
        elif isinstance(statement, ast.Import):
            found.update(dict.fromkeys(((alias.asname or alias.name).partition(".")[0]
                                        for alias in statement.names), None))
        elif isinstance(statement, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            found[statement.name] = None
    return found


def _literal(node: ast.expr) -> bool:
    """Whether an expression is a literal (``0.5``, ``-1``, ``("a", 2)``, ``{"k": 1}``)."""
    try:
        ast.literal_eval(node)
    except (ValueError, TypeError, SyntaxError, MemoryError, RecursionError):
        return False
    return True


def _reads_environment(node: ast.expr) -> bool:
    """Whether an expression reads the environment (``os.environ["T"]``, ``getenv("T")``)."""
    return any((isinstance(part, ast.Name) and part.id in _ENVIRONMENT)
               or (isinstance(part, ast.Attribute) and part.attr in _ENVIRONMENT)
               for part in ast.walk(node))


def _order(value: Any) -> tuple[str, str]:
    """A key that sorts a set's items alike in every process (a set of instances iterates
    in the order of their addresses)."""
    named = value if inspect.isfunction(value) or inspect.isclass(value) else type(value)
    return str(getattr(named, "__module__", "")), str(getattr(named, "__qualname__", ""))


def _members_code(member: Any) -> list[Any]:
    """The functions a class's attribute runs: a method's, a static or class method's, a
    property's getter, setter and deleter."""
    if isinstance(member, (staticmethod, classmethod)):
        return [member.__func__]
    if isinstance(member, property):
        return [part for part in (member.fget, member.fset, member.fdel) if part is not None]
    if isinstance(member, functools.cached_property):
        return [member.func]
    return [member]


@dataclass
class _Walk:
    """One `code_digest`: what it has hashed (each function, class, container and instance
    once, so a cycle ends), the modules' bindings it has parsed, which classes are the
    user's, and how many more items it may look at."""

    seen: set[int] = field(default_factory=set)
    parsed: dict[str, dict[str, _Binding]] = field(default_factory=dict)
    owned: dict[int, bool] = field(default_factory=dict)
    budget: int = _BUDGET

    def function_parts(self, function: Any) -> Iterator[str]:
        """The texts hashed for ``function``: its source, then what it reads."""
        self.seen.add(id(function))
        yield inspect.getsource(function)
        code, scope = function.__code__, function.__globals__
        names = _names(code)
        here = _Module(code.co_filename, scope)
        values: list[tuple[str, Any, _Module | None]] = [
            (name, scope[name], here) for name in sorted(names) if name in scope]
        for name, cell in zip(code.co_freevars, function.__closure__ or ()):
            try:
                values.append((name, cell.cell_contents, None))
            except ValueError:  # a cell not yet filled
                continue
        # attributes of the user's modules it reads by name (helpers.score(...))
        values += [(f"{name}.{attribute}", getattr(value, attribute), _Module.of(value))
                   for name, value, _ in list(values) if inspect.ismodule(value)
                   for attribute in sorted(names) if hasattr(value, attribute)]
        for label, value, module in values:
            try:
                yield from self._read_parts(label, value, module)
            except Exception:  # (a user's object can raise where it is looked at)
                continue

    def _read_parts(self, label: str, value: Any, module: _Module | None) -> Iterator[str]:
        """The texts hashed for a value a function reads by ``label`` (NAME, or
        MODULE.NAME), ``module`` the user's module that binds that name."""
        name = label.rpartition(".")[2]
        if _plain(value):
            yield from self._plain_parts(label, value, module, set())
            return
        if inspect.ismodule(value):
            return
        if module is not None and (isinstance(value, (dict, list, tuple, set, frozenset))
                                   or self._users_own(type(value))):
            # what made it (G = Grader(threshold=0.5)): an edit of that line changes the
            # instance as an edit of its class does
            binding, _ = self._binding(module, name)
            if isinstance(binding, ast.expr):
                yield f"\n{label} := {ast.unparse(binding)}"
        yield from self._reached(value, 0)

    def _plain_parts(self, label: str, value: Any, module: _Module | None,
                     trail: set[tuple[str, str]]) -> Iterator[str]:
        """A plain value as hashed: its repr when a literal made it (or the environment,
        or nothing found made it); else the text of the expression that made it at import,
        which a new process does not change (STARTED = time.time()), with the module's
        values and code it uses (LIMIT = BASE * 2: BASE). ``trail``: the (file, name) of
        the values whose making is hashed already, against a cycle (X = f(X))."""
        binding, module = (None, None) if module is None else \
            self._binding(module, label.rpartition(".")[2])
        if module is None or not isinstance(binding, ast.expr) or _literal(binding) \
                or _reads_environment(binding):
            yield f"\n{label} = {value!r}"
            return
        yield f"\n{label} := {ast.unparse(binding)}"
        trail.add((module.file, label.rpartition(".")[2]))
        for used in sorted({part.id for part in ast.walk(binding)
                            if isinstance(part, ast.Name)}):
            if used not in module.namespace or (module.file, used) in trail:
                continue
            found = module.namespace[used]
            if _plain(found):
                yield from self._plain_parts(used, found, module, trail)
            else:
                yield from self._reached(found, _DEPTH)  # (a function or class it calls)

    def _binding(self, module: _Module, name: str) -> tuple[_Binding, _Module]:
        """The expression that last binds ``name`` at the top of ``module``'s source, and
        the module whose source it is: followed through ``from ... import`` to the user's
        module that makes it; None when none is found (set by ``globals()[...]``, made in
        another package)."""
        for _ in range(8):  # (a chain of re-exports, bounded against a cycle)
            if module.file not in self.parsed:
                try:
                    source = "".join(linecache.getlines(module.file, module.namespace))
                    self.parsed[module.file] = _bindings(source,
                                                         module.namespace.get("__package__"))
                except Exception:  # (no source, or source that no longer parses)
                    self.parsed[module.file] = {}
            binding = self.parsed[module.file].get(name)
            found = _Module.of(sys.modules.get(binding.module)) \
                if isinstance(binding, _Imported) else module
            if found is None or not isinstance(binding, _Imported):
                return (None if found is None else binding), module
            module, name = found, binding.name
        return None, module

    def _users_own(self, value: Any) -> bool:
        """`_users_own`, asked once of each class in a digest (a list of a thousand
        instances asks of one class)."""
        if id(value) not in self.owned:
            self.owned[id(value)] = _users_own(value)
        return self.owned[id(value)]

    def _reached(self, value: Any, depth: int) -> Iterator[str]:
        """The texts hashed for the user's code ``value`` leads to: a function's, a class's,
        an instance's class's, and those of what a container or an instance holds (to
        ``_DEPTH`` levels below what the function reads)."""
        if id(value) in self.seen or self.budget <= 0:
            return
        self.budget -= 1
        if inspect.ismethod(value):  # (S = Grader().score)
            yield from self._reached(value.__func__, depth)
            yield from self._reached(value.__self__, depth)
        elif inspect.isfunction(value):
            if self._users_own(value):
                function = inspect.unwrap(value)
                self.seen.update((id(value), id(function)))
                try:
                    yield from self.function_parts(function)
                except (OSError, TypeError):  # (its source cannot be read)
                    pass
        elif inspect.isclass(value):
            yield from self._class_parts(value)
        else:
            yield from self._held_parts(value, depth)

    def _held_parts(self, value: Any, depth: int) -> Iterator[str]:
        """The texts hashed for an instance of the user's class (its class's) and, above
        ``_DEPTH``, for what it or a plain container (a dict's values, a list's, tuple's or
        set's items) holds."""
        owned = self._users_own(type(value))
        if owned:
            yield from self._class_parts(type(value))
        if depth >= _DEPTH:
            return  # (deep enough: an instance here counts by its class alone)
        held: Iterable[Any] = ()
        if isinstance(value, dict):
            held = islice(dict.values(value), _ITEMS)
        elif isinstance(value, (list, tuple)):
            held = islice(value, _ITEMS)
        elif isinstance(value, (set, frozenset)):
            held = sorted(islice(value, _ITEMS), key=_order)
        elif not owned:
            return
        self.seen.add(id(value))
        if owned:
            try:
                state = vars(value)  # (never getattr: a property or __getattr__ may raise)
            except Exception:
                state = None
            if isinstance(state, dict):
                held = [*held, *islice(dict.values(state), _ITEMS)]
        for item in held:
            if self.budget <= 0:
                return
            if _plain(item):
                self.budget -= 1
            else:
                yield from self._reached(item, depth + 1)

    def _class_parts(self, cls: type) -> Iterator[str]:
        """The texts hashed for the user's class ``cls``: the source of it and of each of
        its bases that is the user's, and what their methods use."""
        for klass in cls.__mro__:
            if id(klass) in self.seen or not self._users_own(klass):
                continue
            self.seen.add(id(klass))
            try:
                yield inspect.getsource(klass)
            except (OSError, TypeError):
                pass
            for member in list(vars(klass).values()):
                if not _plain(member):  # (a plain one's text is in the class's source)
                    for code in _members_code(member):
                        yield from self._reached(code, 1)
