"""What Trinity-RFT's Tinker mode needs before its validator asks Tinker's service.

Trinity's validator asks the service which models it serves, through the Tinker SDK: a key
of the wrong shape reached the user as "Trinity-RFT rejects the generated config", and a
machine with no route to the service waited five minutes of the SDK's retries in silence
before saying the same (sweep 47 A-W10, A-W11). Both are said here first, in the words of
what the user gave: the ``TINKER_API_KEY`` variable, the service's address.
"""

from __future__ import annotations

import importlib.util
import json
import os
import socket
import sys
import urllib.request
from typing import Any
from urllib.parse import urlsplit

from ...dsl.records import redact_url
from ...errors import ConfigError
from ...models.endpoint import error_message, key_text_problem, without_the_key

#: How long the service's address is given to accept a connection.
REACH_SECONDS = 10.0
#: The prefixes the Tinker SDK accepts a key with (its own check: a key, or a JWT).
KEY_PREFIXES = ("tml-", "eyJ")
#: How long the service is given to answer the check's own first request: past the TCP
#: probe, the SDK retried a service answering 500, closing the connection or silent for
#: minutes, in silence (sweep 50 A-W10).
ANSWER_SECONDS = 5.0
#: The SDK's first request (``ServiceClient()`` asks it before anything else).
FIRST_REQUEST = "/api/v1/client/config"


def check_tinker(config: dict[str, Any]) -> None:
    """Refuse, in one line, what Trinity's Tinker mode would fail on when its validator
    asks the service: no SDK, no key or a key the SDK refuses, a service that cannot be
    reached. Nothing for a config without ``model.tinker.enable``."""
    tinker = config.get("model", {}).get("tinker") or {}
    if not tinker.get("enable"):
        return
    if importlib.util.find_spec("tinker") is None:
        if sys.version_info < (3, 11):
            raise ConfigError(f"tinker: Trinity-RFT's Tinker backend needs Python 3.11 or "
                              f"newer (this is {sys.version_info.major}."
                              f"{sys.version_info.minor}); run on 3.11+, or remove tinker")
        raise ConfigError('tinker: the Tinker SDK is not installed; pip install '
                          '"tunedsl[tinker]"')
    key = os.environ.get("TINKER_API_KEY")
    if not key:
        raise ConfigError("tinker: TINKER_API_KEY is not set; export it (the key is read "
                          "from the environment only)")
    problem = key_problem(key)
    if problem is not None:
        raise ConfigError(f"tinker: TINKER_API_KEY {problem}")
    address = service_address(tinker.get("base_url"))
    problem = reach_problem(address)
    if problem is not None:
        raise ConfigError(unreachable(address, problem))
    problem = answer_problem(address, key)
    if problem is not None:
        raise ConfigError(problem)


def key_problem(key: str) -> str | None:
    """What makes ``key`` one the Tinker SDK refuses (said after the variable's name,
    never showing the key), or None."""
    problem = key_text_problem(key)
    if problem is not None:
        return problem
    bare = key.strip()
    # ('"tml-..."': docker --env-file keeps the quotes of a quoted value: sweep 50 A-W11)
    if len(bare) > 1 and bare[0] == bare[-1] and bare[0] in "\"'":
        return "holds quotes around the key; export the key alone"
    if key != bare:  # (" tml-...": it does start so, after a blank: sweep 49 A-W8)
        return "holds blank space around the key (pasted with it); export the key alone"
    if not key.startswith(KEY_PREFIXES):
        return ("does not start with 'tml-', as every Tinker API key does; export the key "
                "Tinker's console gives")
    return None


def service_address(base_url: str | None) -> str:
    """The Tinker service's address as the SDK resolves it: ``tinker.base_url``, else
    ``TINKER_BASE_URL``, else the SDK's own."""
    from tinker.lib.base_url import resolve_base_url

    return str(resolve_base_url(base_url))


def reach_problem(address: str) -> str | None:
    """Why nothing accepts a connection at ``address``'s host and port within
    `REACH_SECONDS` (the name unknown, the connection refused, no route), or None. Where
    a proxy carries the SDK's requests, the proxy is asked: it is what they reach (one that
    is down waited the SDK's retries in silence: sweep 49 A-W10)."""
    parts = urlsplit(address)
    host = parts.hostname
    if host is None:
        return None
    proxy = _proxy_for(parts.scheme, host)
    reached = urlsplit(proxy) if proxy is not None else parts
    if reached.hostname is None:
        return None
    try:
        port = reached.port or (443 if reached.scheme == "https" else 80)
    except ValueError:  # (a base_url's port out of range: the SDK says so in its own words)
        if proxy is None:
            return None
        # (the SDK's retries waited in silence for a proxy's: sweep 50 A-W10)
        raise ConfigError(f"tinker: {_proxy_variable(proxy)}={redact_url(proxy)} has a port "
                          f"that is not a number from 1 to 65535; write the proxy's URL as "
                          f"http://HOST:PORT") from None
    try:
        with socket.create_connection((reached.hostname, port), timeout=REACH_SECONDS):
            return None
    except TimeoutError:
        why = f"no answer to a connection in {REACH_SECONDS:g} s"
    except OSError as exc:
        why = exc.strerror or str(exc) or type(exc).__name__
    return why if proxy is None else f"through the proxy {redact_url(proxy)}: {why}"


def answer_problem(address: str, key: str) -> str | None:
    """The line for a service that fails the SDK's first request, asked once here within
    `ANSWER_SECONDS` and without retries: an HTTP 5xx, the connection closed, no answer
    (the SDK retried each for minutes in silence, then Trinity said "rejects the generated
    config": sweep 50 A-W10), a 429 or 402 (the SDK waits on each, in silence: sweep 51
    A-W9), the key refused, an answer no Tinker service gives (said as the config's
    refusal: sweep 51 A-W8); or None: it answered (what, Trinity's validator judges)."""
    import httpx
    from tinker import __version__

    # the SDK's own request: its path after the base URL's, its body, its key's header,
    # through the proxies the environment sets (httpx reads them as for the SDK)
    url = address.rstrip("/") + FIRST_REQUEST
    parts = urlsplit(address)
    proxy = _proxy_for(parts.scheme, parts.hostname or "")
    through = f" (through the proxy {redact_url(proxy)})" if proxy else ""
    where = f"Tinker's service at {address}{through}"
    fix = "try again later if the service is down, or point tinker.base_url at the service"
    try:
        with httpx.Client(timeout=ANSWER_SECONDS) as client:
            response = client.post(url, json={"sdk_version": __version__},
                                   headers={"X-API-Key": key})
    except httpx.TimeoutException:
        return (f"tinker: {where} did not answer within {ANSWER_SECONDS:g} s (POST "
                f"{FIRST_REQUEST}, the SDK's first request); {fix}")
    except (httpx.RemoteProtocolError, httpx.ReadError):  # (the server hung up)
        return (f"tinker: {where} closed the connection without answering (POST "
                f"{FIRST_REQUEST}, the SDK's first request); {fix}")
    except Exception:  # noqa: BLE001 (anything else, e.g. a socks proxy without socksio,
        return None  # meets the SDK too, which says it in its own words, as before)
    status, reason = response.status_code, response.reason_phrase
    answered = (f"HTTP {status}{' ' * bool(reason)}{reason} to POST {FIRST_REQUEST}, the "
                f"SDK's first request{_said_by(response, key) if status >= 400 else ''}")
    if status in (401, 403):
        return (f"tinker: {where} refused the key in TINKER_API_KEY ({answered}); export a "
                f"key Tinker's console gives, or point tinker.base_url at the service the "
                f"key is for")
    if status == 429:  # (the SDK retries it for minutes)
        return (f"tinker: {where} is limiting the rate of requests ({answered}); try again "
                f"later")
    if status == 402:  # (the SDK pauses on it for up to an hour)
        return (f"tinker: {where} asks payment for the account of the key in "
                f"TINKER_API_KEY ({answered}); settle its billing in Tinker's console, then "
                f"try again")
    not_tinker = ("; point tinker.base_url at Tinker's service, or unset it (and "
                  "TINKER_BASE_URL)")
    if status >= 500 or status in (408, 409):  # (the SDK retries each for minutes)
        return (f"tinker: {where} answered HTTP {status} ({response.reason_phrase}) to POST "
                f"{FIRST_REQUEST}, the SDK's first request; {fix}")
    if status >= 400:  # 400, 404, ...: no Tinker service answers its SDK's request so
        return (f"tinker: {address}{through} answered, but not as Tinker's service does "
                f"({answered})" + not_tinker)
    if status < 300:
        try:
            response.json()
        except ValueError as exc:  # (the SDK's parse error was said as the config's)
            held = ("a web page" if response.text.lstrip()[:1] == "<" else
                    f"a body that is not JSON ({' '.join(str(exc).split())[:120]})")
            return (f"tinker: {address}{through} answered, but not as Tinker's service does "
                    f"({answered}, with {held})" + not_tinker)
    return None  # (it answered: what, Trinity's validator judges)


def _said_by(response: Any, key: str) -> str:
    """What an answer's body says, for a line about it (``": Invalid API key"``; the key
    never shown, a long body cut, a page of HTML not quoted), or "" for nothing."""
    try:
        body = response.json()
    except ValueError:
        body = response.text
        if body.lstrip()[:1] == "<":  # (a web page: its markup tells nothing)
            return ""
    if isinstance(body, dict) and isinstance(body.get("detail"), str):
        body = body["detail"]  # (FastAPI's words, as Tinker's service writes them)
    found = error_message(body)
    text = (found if isinstance(found, str) else json.dumps(found))[:4000]
    # (the key hidden before the text is cut, so no part of one is left to show)
    text = " ".join(without_the_key(text, key).split())
    return f": {text[:200]}{'...' * (len(text) > 200)}" if text else ""


def unreachable(address: str, why: str) -> str:
    """The line for a Tinker service that cannot be reached."""
    return (f"tinker: Tinker's service at {address} cannot be reached ({why}); check this "
            f"machine's network (a firewall, or a proxy to set in HTTPS_PROXY), or point "
            f"tinker.base_url at the service")


def is_not_tinker(exc: BaseException) -> bool:
    """Whether ``exc`` is the Tinker SDK's word that the address answered, but not as
    Tinker's service does (another server there: sweep 49 A-W9)."""
    try:
        from tinker import APIResponseValidationError
    except ImportError:
        return False
    return isinstance(exc, APIResponseValidationError)


def is_connection_failure(exc: BaseException) -> bool:
    """Whether ``exc`` is the Tinker SDK's word that its requests reached no service (after
    its retries), not a refusal of the config."""
    try:
        from tinker import APIConnectionError
    except ImportError:
        return False
    return isinstance(exc, APIConnectionError)


def _proxy_for(scheme: str, host: str) -> str | None:
    """The proxy requests to ``host`` go through (``HTTPS_PROXY``, ``ALL_PROXY``), or None
    (none set, or ``NO_PROXY`` names the host). One without a scheme is read as http://, as
    httpx, under the SDK, reads it (a probe that could not parse it left the SDK's retries
    to wait in silence: sweep 50 A-W10)."""
    proxies = urllib.request.getproxies()
    proxy = proxies.get(scheme) or proxies.get("all")
    if not proxy or urllib.request.proxy_bypass(host):
        return None
    return proxy if "://" in proxy else f"http://{proxy}"


def _proxy_variable(proxy: str) -> str:
    """The environment variable that sets ``proxy`` (``HTTPS_PROXY``, ``all_proxy``, ...),
    to name in a line about it."""
    return next((name for name, value in sorted(os.environ.items())
                 if name.lower().endswith("_proxy") and proxy in (value, f"http://{value}")),
                "the proxy")
