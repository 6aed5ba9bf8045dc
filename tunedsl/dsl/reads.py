"""What a workflow or judge reads of its arguments, found in its source: the auxiliary
models it calls by name. A guess from the source, used only where it is sure."""

from __future__ import annotations

import ast
import inspect
import textwrap
from collections.abc import Callable
from typing import Any


def auxiliary_names_read(fn: Callable[..., Any]) -> frozenset[str] | None:
    """The names of the auxiliary models ``fn`` reads, as ``auxiliary_models["NAME"]`` or
    ``auxiliary_models.get("NAME")``; an empty set when it takes no ``auxiliary_models``.
    None when it uses them otherwise (passes them on, iterates them, reads a name held in
    a variable) or its source cannot be read: then any name may be read."""
    if getattr(fn, "__wrapped__", None) is not None:  # (a decorator's wrapper runs, and
        return None  # getsource shows the function it wraps)
    try:
        tree = ast.parse(textwrap.dedent(inspect.getsource(fn)))
    except (OSError, TypeError, SyntaxError):
        return None
    top = next((node for node in tree.body
                if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef))), None)
    if top is None:
        return None
    arguments = top.args
    if "auxiliary_models" not in {a.arg for a in (*arguments.posonlyargs, *arguments.args,
                                                  *arguments.kwonlyargs)}:
        return None if arguments.kwarg is not None else frozenset()
    parents = {child: node for node in ast.walk(tree) for child in ast.iter_child_nodes(node)}
    names = set()
    for node in ast.walk(tree):
        if not (isinstance(node, ast.Name) and node.id == "auxiliary_models"
                and isinstance(node.ctx, ast.Load)):
            continue
        parent = parents.get(node)
        if isinstance(parent, ast.Subscript) and parent.value is node:
            key = parent.slice
        elif isinstance(parent, ast.Attribute) and parent.attr == "get" and \
                isinstance(call := parents.get(parent), ast.Call) and call.args:
            key = call.args[0]
        elif isinstance(parent, ast.Compare) and node in parent.comparators:
            continue  # ("g" in auxiliary_models: a test, no read)
        else:
            return None
        if not (isinstance(key, ast.Constant) and isinstance(key.value, str)):
            return None
        names.add(key.value)
    return frozenset(names)
