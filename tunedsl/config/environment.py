"""``${env:NAME[,default]}`` in settings: read from the environment for tunedsl's own use,
written back as OmegaConf's ``${oc.env:...}`` for Trinity's (so a secret never lands in a
file), and every other ``${`` kept as text on the way.

It imports nothing of the DSL, so whatever reads a value a user wrote (a setting, a
`Dataset` previewed outside an experiment, a model handed to the Python API) reads its
``${env:...}`` one way.
"""

from __future__ import annotations

import os
import re
import sys
from typing import Any

import attrs

from ..errors import ConfigError, Problem
from ..keys import looks_like_a_key
from ..text import holds_a_lone_surrogate

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover - exercised on Python 3.10 only
    import tomli as tomllib

#: ``${env:NAME}`` or ``${env:NAME,default}``; ``$${env:...}`` is that text itself.
_ENV_PATTERN = re.compile(r"(?<!\$)\$\{env:([A-Za-z_][A-Za-z0-9_]*)(?:,([^}]*))?\}")
#: How a string says ``${env:`` as text (a prompt about tunedsl's syntax, say).
ESCAPED_ENV = "$${env:"


class EnvValue(str):
    """A string read from the environment; it remembers the template it came from.

    The Trinity YAML writes the template back as ``${oc.env:NAME}`` so a secret
    never lands in a file, while tunedsl itself uses the resolved value.
    """

    template: str
    #: Whether a variable was read into it (else its template only keeps text as written:
    #: an escaped ``$${env:...}``, a ``[trinity]`` value's own ``${...}``).
    read: bool
    #: The text the user wrote (``${env:NAME}``), which messages show.
    written: str

    def __new__(cls, value: str, template: str, read: bool = False,
                written: str | None = None) -> EnvValue:
        self = super().__new__(cls, value)
        self.template, self.read = template, read
        self.written = template if written is None else written
        return self

    def __reduce__(self) -> tuple[Any, ...]:  # copy and pickle keep the template
        return (EnvValue, (str(self), self.template, self.read, self.written))


def whence(value: Any) -> str:
    """Where the text of a refused setting came from, said after the problem: `` (read from
    the environment: ${env:N})`` as the user wrote it, or the escape it was written with;
    else ``""``."""
    if not isinstance(value, EnvValue):
        return ""
    if value.read:
        return f" (read from the environment: {value.written})"
    if "${env:" in value:  # $${env:N} is the text ${env:N}
        return " ($${env:...} is that text itself; write ${env:NAME} to read the variable)"
    return ""


@attrs.frozen
class Unresolved:
    """A value naming an environment variable that is not set: its problem is reported
    only if no higher layer sets the same key (``--set``, or ``--aux`` for an auxiliary
    model's endpoint), once, rather than also as an invalid empty value."""

    #: The problem, with the setting's dotted path (``auxiliary_models.grader.base_url``).
    problem: Problem


def unresolved_in(value: Any) -> list[Unresolved]:
    """Every `Unresolved` leaf left in merged settings."""
    if isinstance(value, Unresolved):
        return [value]
    if isinstance(value, dict):
        return [found for item in value.values() for found in unresolved_in(item)]
    if isinstance(value, list):
        return [found for item in value for found in unresolved_in(item)]
    return []


#: A number with its point at an end (``.5``, ``1.``), which TOML (a digit each side of
#: the point) does not read, and a command line writes.
POINT_AT_AN_END = re.compile(r"[+-]?(\.\d+|\d+\.)([eE][+-]?\d+)?")


def env_read(text: EnvValue) -> Any:
    """Text read from the environment as the TOML value it spells (``4``, ``1e-6``,
    ``true``), or a number as ``--set`` reads one (``.5``: sweep 49 A-W6), for a setting
    that is not text; the text itself otherwise. (Trinity's config reader converts the
    ``${oc.env:...}`` it writes to the field's type alike.)"""
    try:
        return tomllib.loads(f"value = {text}")["value"]
    except ValueError:  # not TOML (TOMLDecodeError), or digits past what Python reads
        return float(text) if POINT_AT_AN_END.fullmatch(text.strip()) else text


#: A ``${...}`` that is not tunedsl's ``${env:...}`` (a shell's ``${HOME}``, OmegaConf's
#: ``${oc.env:HOME}``, ``${ENV:HOME}``), not escaped as text (``$${``).
_OTHER_REFERENCE = re.compile(r"(?<!\$)\$\{(?!env:)")


def _verbatim_setting(path: str) -> bool:
    """Whether the setting ``path`` reaches the Trinity YAML as written (``[trinity]``
    tables, a model's engine options) or is text of the user's own (``params``), where an
    OmegaConf reference is meant."""
    parts = path.split(".")
    return parts[0] in ("trinity", "params") or "trinity" in parts


def _key_named(value: str) -> str | None:
    """The name of an ``${env:NAME...}`` in ``value`` that looks like a key itself (and is
    no variable set here), or None: never shown again."""
    for match in re.finditer(r"(?<!\$)\$\{env:([^,}]*)", value):
        name = match.group(1)
        if looks_like_a_key(name) and name not in os.environ:
            return name
    return None


def interpolate(value: Any, source: str, path: str, problems: list[Problem]) -> Any:
    """Replace ``${env:NAME}`` / ``${env:NAME,default}`` in every string of ``value`` (the
    setting ``path`` of the layer ``source``); a string naming an unset variable becomes
    `Unresolved`."""
    if isinstance(value, dict):
        return {k: interpolate(v, source, f"{path}.{k}", problems) for k, v in value.items()}
    if isinstance(value, list):
        return [interpolate(v, source, f"{path}[{i}]", problems) for i, v in enumerate(value)]
    if isinstance(value, str) and _OTHER_REFERENCE.search(value) \
            and not _verbatim_setting(path):
        problems.append(_env_problem(source, path, f"{value!r} holds a ${{...}} reference "
                                     f"tunedsl does not read (${{HOME}}, OmegaConf's "
                                     f"${{oc.env:...}}), which a setting would keep as text",
                                     "write ${env:NAME} for an environment variable (tunedsl "
                                     "writes it to the YAML as ${oc.env:NAME})"))
        return value
    if not isinstance(value, str) or "${env:" not in value:
        return value
    keyish = _key_named(value)
    if keyish is not None:
        problems.append(_env_problem(source, path, f"an ${{env:...}} names text of "
                                     f"{len(keyish)} characters, not shown: it looks like a "
                                     f"key, not an environment variable's name",
                                     "export the key as a variable, e.g. OPENAI_API_KEY, and "
                                     "write ${env:OPENAI_API_KEY}"))
        return value
    for start in (match.start() for match in re.finditer(r"(?<!\$)\$\{env:", value)):
        if not _ENV_PATTERN.match(value, start):  # ${env:} or ${env:1X}: tunedsl's syntax, wrong
            problems.append(_env_problem(source, path, f"{value!r} names no environment "
                                         f"variable in its ${{env:...}}", "write ${env:NAME} "
                                         "or ${env:NAME,default}, or $${env:...} for the text "
                                         "itself"))
            return value
    nested = next((match for match in _ENV_PATTERN.finditer(value)
                   if match.group(2) is not None and "${" in match.group(2)), None)
    if nested is not None:  # the default would end at the inner reference's "}"
        problems.append(_env_problem(source, path, f"{value!r}: the default of "
                                     f"${{env:{nested.group(1)},...}} holds another ${{...}}, "
                                     f"which tunedsl does not read", "give the default as "
                                     "plain text"))
        return value
    unset = [match.group(1) for match in _ENV_PATTERN.finditer(value)
             if match.group(2) is None and match.group(1) not in os.environ]
    if unset:
        return Unresolved(_env_problem(source, path, f"environment variable {unset[0]} is not "
                                       f"set", f"export it, or give a default: "
                                       f"${{env:{unset[0]},default}}"))
    undecodable = [match.group(1) for match in _ENV_PATTERN.finditer(value)
                   if holds_a_lone_surrogate(os.environ.get(match.group(1), ""))]
    if undecodable:  # (lone surrogates: no request, file or tokenizer takes them)
        problems.append(_env_problem(source, path, f"environment variable {undecodable[0]} "
                                     f"holds bytes that are not UTF-8 (text in another "
                                     f"encoding, such as Latin-1)", "set it in UTF-8"))
        return value
    # The value this process uses, and the template the files tunedsl writes keep: the
    # references as OmegaConf's (Trinity resolves them; a default quoted, so a comma or
    # a number in it stays text), the text between them escaped for OmegaConf.
    used, template, last = [], [], 0
    for match in _ENV_PATTERN.finditer(value):
        text = value[last:match.start()].replace(ESCAPED_ENV, "${env:")
        name, default = match.group(1), match.group(2)
        used += [text, os.environ.get(name, default or "")]
        template += [omegaconf_text(text), _oc_env(name, default)]
        last = match.end()
    text = value[last:].replace(ESCAPED_ENV, "${env:")
    used.append(text)
    template.append(omegaconf_text(text))
    return EnvValue("".join(used), "".join(template), read=last > 0, written=value)


_INTERPOLATION = re.compile(r"(\\*)\$\{")



def omegaconf_text(text: str) -> str:
    """``text`` as OmegaConf (Trinity's config reader) reads it back as itself: each
    ``${`` escaped and the backslashes before it doubled, so a prompt holding ``${HOME}``,
    ``\\${x}`` or ``${oc.env:KEY}`` is not resolved on the way."""
    return _INTERPOLATION.sub(lambda found: found[1] * 2 + "\\${", text)


def verbatim(value: Any) -> Any:
    """``value`` with each string that holds ``${`` marked to reach Trinity's YAML as
    written: an interpolation of OmegaConf's, meant for it (a base Trinity YAML's, a
    ``[trinity]`` table's), where every other string is written as text."""
    if isinstance(value, dict):
        return {key: verbatim(item) for key, item in value.items()}
    if isinstance(value, list):
        return [verbatim(item) for item in value]
    if isinstance(value, str) and not isinstance(value, EnvValue) and "${" in value:
        return EnvValue(value, value)
    return value


def _oc_env(name: str, default: str | None) -> str:
    """``${env:NAME[,default]}`` as OmegaConf's reference, the default a quoted string."""
    if default is None:
        return f"${{oc.env:{name}}}"
    quoted = default.replace("\\", "\\\\").replace("'", "\\'")
    return f"${{oc.env:{name},'{quoted}'}}"


def _env_problem(source: str, path: str, what: str, fix: str) -> Problem:
    """A problem with the ``${env:...}`` of setting ``path`` in the layer ``source`` (or of
    the value ``path`` names, for `env_resolved`)."""
    return Problem(f"{path}: {what}", where=source, setting=path if source else "", fix=fix)


def env_resolved(text: str, where: str) -> str:
    """``text`` with its ``${env:NAME[,default]}`` read from the environment as settings
    read theirs (for a model the Python API is handed directly); a ConfigError naming
    ``where`` when a variable is unset or the reference is malformed."""
    problems: list[Problem] = []
    resolved = interpolate(text, "", where, problems)
    problems += [item.problem for item in unresolved_in(resolved)]
    if problems:
        raise ConfigError(problems[0])
    return str(resolved)
