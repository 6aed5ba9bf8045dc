"""A workflow's response as an eval results line keeps it, and back.

A response may be any object. A line keeps its text (``response_text``) and, so that
``rescore`` can hand the judge the same kind of object again: plain JSON data as it
is; an object that serialises itself (AgentScope's ``Msg.to_dict`` /
``Msg.from_dict``, pydantic's ``model_dump`` / ``model_validate``) as its data plus
its class (``response_class``); anything else as its repr (``response_is_repr``),
which no judge can see again.
"""

from __future__ import annotations

import importlib
import math
from typing import Any

from ..errors import DatasetError

#: (method that gives the data, class method that rebuilds the object), first match wins.
_PROTOCOLS = (("to_dict", "from_dict"), ("model_dump", "model_validate"))


def response_text(response: Any) -> str:
    """The text a person reads: a string itself, else the object's own text
    (``get_text_content()``), else ``str()`` (else what `_any_repr` gives, when the
    object's own methods raise)."""
    if isinstance(response, str):
        return response
    try:
        text = getattr(response, "get_text_content", None)
        if callable(text):
            return str(text() or "")
        return "" if response is None else str(response)
    except Exception:  # noqa: BLE001 - the object's own code; the rollout's result stands
        return _any_repr(response)


def _any_repr(response: Any) -> str:
    """``repr(response)``, or ``<Class object (repr raised Error)>`` when its own repr raises:
    a results line is written whatever the response's methods do."""
    try:
        return repr(response)
    except Exception as exc:  # noqa: BLE001 - the object's own code
        cls = type(response)
        return f"<{cls.__module__}.{cls.__qualname__} object (its repr raised " \
               f"{type(exc).__name__})>"


#: How deep a response is kept as data; deeper, its repr (JSON readers stop near 1,000).
MOST_DEPTH = 500
#: The largest integer kept as data (Python reads integers of at most 4,300 digits).
MOST_INTEGER_BITS = 14_000


def _json(value: Any) -> bool:
    """Whether ``value`` comes back from a JSON line as the same object: dicts with text
    keys, lists, text, finite numbers, booleans and None (a tuple comes back a list, an
    int key as text, NaN as null: the judge would see another object), nested at most
    `MOST_DEPTH` deep (walked without recursion, so any depth is answered)."""
    pending = [(value, 0)]
    while pending:
        item, depth = pending.pop()
        # text and numbers of a subclass (numpy's float64 and str_) read back as the
        # builtin, which every check a judge makes of them accepts
        if item is None or isinstance(item, (str, bool)):
            continue
        if isinstance(item, int):
            if item.bit_length() > MOST_INTEGER_BITS:
                return False
        elif isinstance(item, float):
            if not math.isfinite(item):
                return False
        elif depth >= MOST_DEPTH:
            return False
        elif type(item) is list:  # a tuple or a set would read back as a list
            pending += [(inner, depth + 1) for inner in item]
        elif isinstance(item, dict):  # (dict's own methods: a subclass's may raise)
            if any(not isinstance(key, str) for key in dict.keys(item)):
                return False
            pending += [(inner, depth + 1) for inner in dict.values(item)]
        else:
            return False
    return True


def encode_response(response: Any) -> dict[str, Any]:
    """The fields of a results line that keep ``response``."""
    fields: dict[str, Any] = {"response_text": response_text(response)}
    if _json(response):
        return {"response": response, **fields, "response_is_repr": False}
    cls = type(response)
    for dump, load in _PROTOCOLS:
        if callable(getattr(response, dump, None)) and callable(getattr(cls, load, None)):
            try:
                data = getattr(response, dump)()
            except Exception:  # noqa: BLE001, S112 - its own method failed: keep its repr
                continue
            if _json(data):
                return {"response": data, **fields, "response_is_repr": False,
                        "response_class": f"{cls.__module__}:{cls.__qualname__}"}
    return {"response": _any_repr(response), **fields, "response_is_repr": True}


def decode_response(record: dict[str, Any], where: str) -> Any:
    """The response a results line keeps, rebuilt as the object it was.

    Raises:
        DatasetError: the line kept only a repr, or its class cannot be imported or
            rebuild it; ``where`` (``file:line``) starts the message.
    """
    if "response" not in record:  # a response of None is kept as null, never left out
        return _refuse(where, "the line has no response (eval writes one on every line that "
                              "has no error); the file was edited or not written by tunedsl "
                              "eval")
    if record.get("response_is_repr"):
        return _refuse(where, "the response was saved as its repr (it was neither JSON data "
                              "that reads back as itself, as a tuple or a number as a key "
                              "would not, nor an object with to_dict/from_dict or "
                              "model_dump/model_validate), so the judge cannot see it again")
    ref = record.get("response_class")
    if ref is None:
        return record.get("response")
    module, _, qualname = ref.partition(":")
    try:
        cls: Any = importlib.import_module(module)
        for part in qualname.split("."):
            cls = getattr(cls, part)
    except (ImportError, AttributeError) as exc:
        return _refuse(where, f"the response is a {ref} object, which cannot be imported here "
                              f"({type(exc).__name__}: {exc}); install what the workflow used")
    for _, load in _PROTOCOLS:
        if callable(getattr(cls, load, None)):
            try:
                return getattr(cls, load)(record["response"])
            except Exception as exc:  # the class's own loader refused its saved data
                return _refuse(where, f"{ref}.{load} cannot rebuild the saved response "
                                      f"({type(exc).__name__}: {exc})")
    return _refuse(where, f"{ref} has neither from_dict nor model_validate to rebuild the saved "
                          f"response")


def _refuse(where: str, reason: str) -> Any:
    raise DatasetError(f"{where}: {reason}")
