"""Training through Tinker (``tinker = Tinker(...)``): the YAML, no local GPU, the backend
choice, and the preflight, with the real Tinker SDK asking a loopback stand-in of the
service the one thing Trinity's validator asks (which models it supports)."""

from __future__ import annotations

import asyncio
import importlib.util
import socket
import sys
import time
import warnings
from pathlib import Path

import pytest
from aiohttp import web

import tunedsl
from tunedsl.api import check, choose_backend
from tunedsl.errors import ConfigError

from .openai_server import OpenAIServer

MATH = "examples.math_agent.experiment:MathAgent"  # model Qwen/Qwen3-0.6B
ON_TINKER = ["tinker.rank=8", "tinker.train_unembed=false"]
needs_sdk = pytest.mark.skipif(importlib.util.find_spec("tinker") is None,
                               reason="the Tinker SDK needs Python 3.11+")


class TinkerService(OpenAIServer):
    """Answers the Tinker SDK's start-up calls and ``get_server_capabilities``."""

    def __init__(self, supported: list[str]) -> None:
        super().__init__()
        self.supported = supported
        self.paths: list[str] = []

    def routes(self, app: web.Application) -> None:
        app.router.add_route("*", "/{tail:.*}", self._service)

    async def _service(self, request: web.Request) -> web.Response:
        self.paths.append(request.path)
        if request.path == "/api/v1/client/config":
            return web.json_response({"use_pyqwest_transport": False})
        if request.path == "/api/v1/get_server_capabilities":
            return web.json_response({"supported_models": [
                {"model_name": name} for name in self.supported]})
        return web.json_response({"detail": "not here"}, status=404)

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"


def test_tinker_settings_reach_trinitys_model_tinker_section():
    """Tinker(...) becomes model.tinker with enable: true; the API key is not a setting."""
    from tunedsl.backends.trinity.config import trinity_config

    graph = tunedsl.load_experiment(MATH, overrides=ON_TINKER)
    assert graph.tinker == tunedsl.Tinker(rank=8, train_unembed=False)
    assert trinity_config(graph)["model"]["tinker"] == {
        "enable": True, "rank": 8, "train_mlp": True, "train_attn": True,
        "train_unembed": False}


def test_auto_picks_trinity_for_tinker_and_local_refuses_it(monkeypatch, tiny_model):
    """Tinker needs no local GPU, so auto chooses Trinity; the local backend cannot train it."""
    pytest.importorskip("trinity.common.config")
    graph = tunedsl.load_experiment(MATH, overrides=ON_TINKER)
    assert choose_backend("auto", graph) == (
        "trinity", "the experiment trains through Tinker (no local GPU needed)")
    assert choose_backend("local", graph) == ("local", "chosen with backend='local'")
    with pytest.raises(ConfigError) as info:
        check(tunedsl.load_experiment(MATH, overrides=[*ON_TINKER,
                                                       f"model.model_path={tiny_model}",
                                                       "model.max_model_len=64",
                                                       "model.max_tokens=8"]),
              backend="local")
    assert str(info.value) == (
        "tinker: the experiment trains through Tinker, which runs on the Trinity backend; use "
        "backend='trinity' (or auto), or remove tinker to train locally")


@pytest.mark.skipif(sys.version_info >= (3, 11), reason="the message for Python 3.10")
def test_on_python_310_the_preflight_says_tinker_needs_311():
    """Trinity's tinker extra needs Python 3.11+: one line says so."""
    pytest.importorskip("trinity.common.config")
    with pytest.raises(ConfigError) as info:
        check(tunedsl.load_experiment(MATH, overrides=ON_TINKER))
    assert str(info.value) == (
        f"tinker: Trinity-RFT's Tinker backend needs Python 3.11 or newer (this is "
        f"3.{sys.version_info.minor}); run on 3.11+, or remove tinker")


@needs_sdk
def test_check_asks_the_tinker_service_and_counts_no_gpu(monkeypatch):
    """The key comes from TINKER_API_KEY; the service's supported models decide; 0 GPUs."""
    pytest.importorskip("trinity.common.config")
    monkeypatch.setenv("TINKER_TELEMETRY", "0")
    with TinkerService(["Qwen/Qwen3-0.6B"]) as service:
        overrides = [*ON_TINKER, f"tinker.base_url={service.url}"]
        monkeypatch.delenv("TINKER_API_KEY", raising=False)
        with pytest.raises(ConfigError) as info:
            check(tunedsl.load_experiment(MATH, overrides=overrides))
        assert str(info.value) == ("tinker: TINKER_API_KEY is not set; export it (the key is "
                                   "read from the environment only)")
        monkeypatch.setenv("TINKER_API_KEY", "tml-test-key")
        with warnings.catch_warnings(record=True) as seen:
            warnings.simplefilter("always")
            lines = check(tunedsl.load_experiment(MATH, overrides=overrides))
        # the SDK's FutureWarning at Trinity's call, with its file:line (sweep 47 A-W10)
        assert [str(warning.message) for warning in seen
                if issubclass(warning.category, FutureWarning)] == []
        [accepted] = [line for line in lines if line.startswith("trinity: Trinity-RFT accepts")]
        assert accepted.endswith(", 0 GPUs needed as Trinity counts them)")
        assert "/api/v1/get_server_capabilities" in service.paths
    with TinkerService(["Qwen/Qwen3-8B"]) as service:
        with pytest.raises(ConfigError) as info:
            check(tunedsl.load_experiment(MATH, overrides=[
                *ON_TINKER, f"tinker.base_url={service.url}"]))
    assert str(info.value) == ("trinity: Trinity-RFT rejects the generated config: "
                               "Qwen/Qwen3-0.6B is not supported by tinker!")


@needs_sdk
@pytest.mark.parametrize("key, said", [
    ("tk-abc", "does not start with 'tml-', as every Tinker API key does; export the key "
               "Tinker's console gives"),
    ("tml-abc\n", "holds a line break or another control character, and an API key is one "
                  "line of ASCII; export the key alone"),
    # "does not start with 'tml-'" of a key that does, after a blank (sweep 49 A-W8)
    (" tml-abc", "holds blank space around the key (pasted with it); export the key alone"),
    # "does not start with 'tml-'" of a key docker --env-file kept quoted (sweep 50 A-W11)
    ('"tml-abc"', "holds quotes around the key; export the key alone"),
    ("'tml-abc'", "holds quotes around the key; export the key alone"),
])
def test_a_tinker_key_the_sdk_refuses_is_said_as_the_variable_before_the_service_is_asked(
        monkeypatch, key, said):
    """Trinity's validator said "rejects the generated config: The api_key must start with
    the 'tml-' prefix", after the SDK's FutureWarning (sweep 47 A-W10)."""
    pytest.importorskip("trinity.common.config")
    monkeypatch.setenv("TINKER_TELEMETRY", "0")
    monkeypatch.setenv("TINKER_API_KEY", key)
    with TinkerService(["Qwen/Qwen3-0.6B"]) as service, pytest.raises(ConfigError) as info:
        check(tunedsl.load_experiment(MATH, overrides=[*ON_TINKER,
                                                       f"tinker.base_url={service.url}"]))
    assert str(info.value) == f"tinker: TINKER_API_KEY {said}"
    assert service.paths == []


@needs_sdk
def test_a_tinker_service_that_cannot_be_reached_is_said_at_once(monkeypatch):
    """With no route to the service, check waited 310 s of the SDK's retries in silence,
    then said "rejects the generated config: Connection error." (sweep 47 A-W11)."""
    pytest.importorskip("trinity.common.config")
    monkeypatch.setenv("TINKER_API_KEY", "tml-test-key")
    for variable in ("HTTPS_PROXY", "https_proxy", "HTTP_PROXY", "http_proxy", "ALL_PROXY",
                     "all_proxy"):
        monkeypatch.delenv(variable, raising=False)
    with socket.socket() as unused:  # a port nothing listens on
        unused.bind(("127.0.0.1", 0))
        port = unused.getsockname()[1]
    with pytest.raises(ConfigError) as info:
        check(tunedsl.load_experiment(MATH, overrides=[
            *ON_TINKER, f"tinker.base_url=http://127.0.0.1:{port}"]))
    assert str(info.value) == (
        f"tinker: Tinker's service at http://127.0.0.1:{port} cannot be reached (Connection "
        f"refused); check this machine's network (a firewall, or a proxy to set in "
        f"HTTPS_PROXY), or point tinker.base_url at the service")


@needs_sdk
def test_a_proxy_that_cannot_be_reached_is_said_at_once(monkeypatch):
    """Behind a proxy that is down the service was not asked, and the SDK's retries waited
    in silence (sweep 49 A-W10): the proxy, which its requests reach, is asked."""
    pytest.importorskip("trinity.common.config")
    monkeypatch.setenv("TINKER_API_KEY", "tml-test-key")
    with socket.socket() as unused:  # a port nothing listens on
        unused.bind(("127.0.0.1", 0))
        port = unused.getsockname()[1]
    for variable in ("NO_PROXY", "no_proxy", "ALL_PROXY", "all_proxy", "HTTP_PROXY"):
        monkeypatch.delenv(variable, raising=False)
    monkeypatch.setenv("HTTPS_PROXY", f"http://127.0.0.1:{port}")
    monkeypatch.setenv("https_proxy", f"http://127.0.0.1:{port}")
    with pytest.raises(ConfigError) as info:
        check(tunedsl.load_experiment(MATH, overrides=[
            *ON_TINKER, "tinker.base_url=https://tinker.example/api"]))
    assert str(info.value) == (
        f"tinker: Tinker's service at https://tinker.example/api cannot be reached (through "
        f"the proxy http://127.0.0.1:{port}: Connection refused); check this machine's network "
        f"(a firewall, or a proxy to set in HTTPS_PROXY), or point tinker.base_url at the "
        f"service")


@needs_sdk
@pytest.mark.parametrize("proxy, said", [
    # the password was shown (sweep 50 A-S3)
    ("http://alice:S3cretPassw0rd@127.0.0.1:{port}",
     "cannot be reached (through the proxy http://***@127.0.0.1:{port}: Connection refused); "
     "check this machine's network (a firewall, or a proxy to set in HTTPS_PROXY), or point "
     "tinker.base_url at the service"),
    # read as http://, as httpx reads it; the SDK's retries waited in silence (sweep 50 A-W10)
    ("127.0.0.1:{port}",
     "cannot be reached (through the proxy http://127.0.0.1:{port}: Connection refused); "
     "check this machine's network (a firewall, or a proxy to set in HTTPS_PROXY), or point "
     "tinker.base_url at the service"),
])
def test_a_proxy_is_said_without_its_password_and_read_without_a_scheme(monkeypatch, proxy,
                                                                         said):
    pytest.importorskip("trinity.common.config")
    monkeypatch.setenv("TINKER_API_KEY", "tml-test-key")
    with socket.socket() as unused:  # a port nothing listens on
        unused.bind(("127.0.0.1", 0))
        port = unused.getsockname()[1]
    for variable in ("NO_PROXY", "no_proxy", "ALL_PROXY", "all_proxy", "HTTP_PROXY",
                     "https_proxy"):
        monkeypatch.delenv(variable, raising=False)
    monkeypatch.setenv("HTTPS_PROXY", proxy.format(port=port))
    with pytest.raises(ConfigError) as info:
        check(tunedsl.load_experiment(MATH, overrides=[
            *ON_TINKER, "tinker.base_url=https://tinker.example/api"]))
    assert str(info.value) == ("tinker: Tinker's service at https://tinker.example/api "
                               + said.format(port=port))


@needs_sdk
def test_a_proxy_whose_port_is_out_of_range_is_refused_naming_its_variable(monkeypatch):
    """The probe could not parse it, and the SDK's retries waited in silence (sweep 50
    A-W10)."""
    pytest.importorskip("trinity.common.config")
    monkeypatch.setenv("TINKER_API_KEY", "tml-test-key")
    for variable in ("NO_PROXY", "no_proxy", "ALL_PROXY", "all_proxy", "HTTP_PROXY",
                     "HTTPS_PROXY"):
        monkeypatch.delenv(variable, raising=False)
    monkeypatch.setenv("https_proxy", "http://bob:pw@127.0.0.1:99999")
    with pytest.raises(ConfigError) as info:
        check(tunedsl.load_experiment(MATH, overrides=[
            *ON_TINKER, "tinker.base_url=https://tinker.example/api"]))
    assert str(info.value) == (
        "tinker: https_proxy=http://***@127.0.0.1:99999 has a port that is not a number from 1 "
        "to 65535; write the proxy's URL as http://HOST:PORT")


class FailingService(TinkerService):
    """Tinker's address, where a server answers 500, closes the connection, or never
    answers."""

    def __init__(self, failure: str) -> None:
        super().__init__([])
        self.failure, self.stopping = failure, False

    async def _service(self, request: web.Request) -> web.Response:
        self.paths.append(request.path)
        if self.failure == "close":
            assert request.transport is not None
            request.transport.close()
        while self.failure == "silent" and not self.stopping:
            await asyncio.sleep(0.05)
        return web.json_response({"detail": "internal"}, status=500)

    async def stop(self) -> None:
        self.stopping = True  # (the silent answer ends, so the server can stop)
        await super().stop()


@needs_sdk
@pytest.mark.parametrize("failure, said", [
    ("500", "answered HTTP 500 (Internal Server Error) to POST /api/v1/client/config, the "
            "SDK's first request"),
    ("close", "closed the connection without answering (POST /api/v1/client/config, the "
              "SDK's first request)"),
    ("silent", "did not answer within 1 s (POST /api/v1/client/config, the SDK's first "
               "request)"),
])
def test_a_tinker_service_that_fails_its_first_request_is_said_at_once(monkeypatch, failure,
                                                                       said):
    """Past the TCP probe, the SDK retried for minutes in silence, then "Trinity-RFT rejects
    the generated config: Error code: 500" (sweep 50 A-W10): asked once, without retries."""
    from tunedsl.backends.trinity import tinker_service

    pytest.importorskip("trinity.common.config")
    monkeypatch.setattr(tinker_service, "ANSWER_SECONDS", 1.0)
    monkeypatch.setenv("TINKER_API_KEY", "tml-test-key")
    for variable in ("HTTPS_PROXY", "https_proxy", "HTTP_PROXY", "http_proxy", "ALL_PROXY",
                     "all_proxy"):
        monkeypatch.delenv(variable, raising=False)
    started = time.monotonic()
    with FailingService(failure) as service, pytest.raises(ConfigError) as info:
        check(tunedsl.load_experiment(MATH, overrides=[*ON_TINKER,
                                                       f"tinker.base_url={service.url}"]))
    assert str(info.value) == (
        f"tinker: Tinker's service at {service.url} {said}; try again later if the service is "
        f"down, or point tinker.base_url at the service")
    assert service.paths == ["/api/v1/client/config"]
    assert time.monotonic() - started < 15


class AnsweringService(TinkerService):
    """Tinker's address, where a server answers the SDK's first request with ``status`` and
    ``body`` (a web page when it starts with ``<``, else JSON; ``KEY``: the key it got)."""

    def __init__(self, status: int, body: str) -> None:
        super().__init__([])
        self.status, self.body = status, body

    async def _service(self, request: web.Request) -> web.Response:
        self.paths.append(request.path)
        return web.Response(status=self.status, text=self.body.replace(
            "KEY", request.headers.get("X-API-Key", "")),
            content_type="text/html" if self.body.startswith("<") else "application/json")


NOT_TINKER = "; point tinker.base_url at Tinker's service, or unset it (and TINKER_BASE_URL)"


@needs_sdk
@pytest.mark.parametrize("status, body, said", [
    (401, '{"detail": "Invalid API key"}',
     "{service} refused the key in TINKER_API_KEY (HTTP 401 Unauthorized to POST "
     "/api/v1/client/config, the SDK's first request: Invalid API key); export a key "
     "Tinker's console gives, or point tinker.base_url at the service the key is for"),
    # a server that quotes the key it got back: never shown
    (403, '{"detail": "no access for KEY"}',
     "{service} refused the key in TINKER_API_KEY (HTTP 403 Forbidden to POST "
     "/api/v1/client/config, the SDK's first request: no access for <the key, not shown>); "
     "export a key Tinker's console gives, or point tinker.base_url at the service the key "
     "is for"),
    (404, '{"detail": "Not Found"}',
     "{url} answered, but not as Tinker's service does (HTTP 404 Not Found to POST "
     "/api/v1/client/config, the SDK's first request: Not Found)" + NOT_TINKER),
    (400, '{"error": {"message": "unknown field sdk_version"}}',
     "{url} answered, but not as Tinker's service does (HTTP 400 Bad Request to POST "
     "/api/v1/client/config, the SDK's first request: unknown field sdk_version)"
     + NOT_TINKER),
    (200, '{"a":',
     "{url} answered, but not as Tinker's service does (HTTP 200 OK to POST "
     "/api/v1/client/config, the SDK's first request, with a body that is not JSON "
     "(Expecting value: line 1 column 6 (char 5)))" + NOT_TINKER),
    (200, "<html><body>Welcome</body></html>",
     "{url} answered, but not as Tinker's service does (HTTP 200 OK to POST "
     "/api/v1/client/config, the SDK's first request, with a web page)" + NOT_TINKER),
    # the SDK waited on each in silence (stopped at 60 s: sweep 51 A-W9; 402: up to an hour)
    (429, '{"detail": "rate limited"}',
     "{service} is limiting the rate of requests (HTTP 429 Too Many Requests to POST "
     "/api/v1/client/config, the SDK's first request: rate limited); try again later"),
    (402, '{"detail": "no credit left"}',
     "{service} asks payment for the account of the key in TINKER_API_KEY (HTTP 402 Payment "
     "Required to POST /api/v1/client/config, the SDK's first request: no credit left); "
     "settle its billing in Tinker's console, then try again"),
])
def test_a_tinker_service_that_refuses_its_first_request_is_said_as_the_service_s(
        monkeypatch, status, body, said):
    """A 401 "Invalid API key" (403, 404, 400, a body no JSON) was said as "trinity:
    Trinity-RFT rejects the generated config: Error code: 401 - {'detail': 'Invalid API
    key'}", blaming the config (sweep 51 A-W8); a 429 waited in silence (A-W9)."""
    pytest.importorskip("trinity.common.config")
    monkeypatch.setenv("TINKER_API_KEY", "tml-test-key-0123456789")
    for variable in ("HTTPS_PROXY", "https_proxy", "HTTP_PROXY", "http_proxy", "ALL_PROXY",
                     "all_proxy"):
        monkeypatch.delenv(variable, raising=False)
    started = time.monotonic()
    with AnsweringService(status, body) as service, pytest.raises(ConfigError) as info:
        check(tunedsl.load_experiment(MATH, overrides=[*ON_TINKER,
                                                       f"tinker.base_url={service.url}"]))
    assert str(info.value) == "tinker: " + said.format(
        service=f"Tinker's service at {service.url}", url=service.url)
    assert service.paths == ["/api/v1/client/config"]  # (asked once: no retries)
    assert time.monotonic() - started < 15


class NotTinker(TinkerService):
    """A server at the address that answers, but not as Tinker's service does."""

    async def _service(self, request: web.Request) -> web.Response:
        self.paths.append(request.path)
        if request.path == "/api/v1/client/config":
            return web.json_response({"use_pyqwest_transport": False})
        return web.json_response({"object": "list", "data": []})


@needs_sdk
def test_an_address_that_answers_as_no_tinker_service_is_said_so(monkeypatch):
    """tinker.base_url at another server: "Trinity-RFT rejects the generated config: Data
    returned by API invalid for expected schema." (sweep 49 A-W9)."""
    pytest.importorskip("trinity.common.config")
    monkeypatch.setenv("TINKER_TELEMETRY", "0")
    monkeypatch.setenv("TINKER_API_KEY", "tml-test-key")
    with NotTinker([]) as service, pytest.raises(ConfigError) as info:
        check(tunedsl.load_experiment(MATH, overrides=[*ON_TINKER,
                                                       f"tinker.base_url={service.url}"]))
    assert str(info.value).startswith(f"tinker: {service.url} answered, but not as Tinker's "
                                      f"service does (")
    assert str(info.value).endswith("); point tinker.base_url at Tinker's service, or unset "
                                    "it (and TINKER_BASE_URL)")


@needs_sdk
def test_only_the_sdk_s_connection_failure_is_said_as_an_unreachable_service():
    """The SDK's connection error after its retries is the network's, not the config's."""
    import httpx
    from tinker import APIConnectionError, APITimeoutError

    from tunedsl.backends.trinity.tinker_service import is_connection_failure

    request = httpx.Request("GET", "http://127.0.0.1:9/api/v1/get_server_capabilities")
    assert is_connection_failure(APIConnectionError(request=request))
    assert is_connection_failure(APITimeoutError(request=request))
    assert not is_connection_failure(ValueError("Qwen/Qwen3-0.6B is not supported by tinker!"))


def test_a_tinker_workflow_whose_calls_send_tools_is_refused_in_one_line(monkeypatch):
    """Trinity 0.6.0's Tinker client applies the chat template to the messages only: the
    ReAct agent's tools would never reach the model, nor its tool calls the agent."""
    pytest.importorskip("trinity.common.config")
    monkeypatch.setenv("TINKER_API_KEY", "tml-test-key")
    with pytest.raises(ConfigError) as info:
        check(tunedsl.load_experiment("examples.react_agent.experiment:ReActMath",
                                      overrides=ON_TINKER))
    assert info.value.problems == (
        "@workflow solve (examples/react_agent/experiment.py:61): its call 1 of the trained "
        "model on the first task sends tools, which Trinity-RFT 0.6.0's Tinker "
        "client drops (it applies the chat template to the messages only and parses no tool "
        "calls); call the model without tools, or train without tinker",)


STREAMING = "tests.fixtures.agentscope_tutorial:Streaming"  # as_agentscope(model, stream=True)
NOT_STREAMING = "tests.fixtures.agentscope_tutorial:Tutorial"  # a ChatModelBase parameter


def test_a_tinker_workflow_whose_agentscope_agent_streams_is_refused_naming_the_fix(
        monkeypatch):
    """AgentScope's models stream by default; Trinity 0.6.0's Tinker client ignores stream
    and answers with a whole ChatCompletion, which the agent's stream parser cannot read.
    The in-process server answers the stream, so the preflight ran; the refusal comes from
    the recorded call."""
    pytest.importorskip("trinity.common.config")
    pytest.importorskip("agentscope")
    monkeypatch.setenv("TINKER_TELEMETRY", "0")
    monkeypatch.setenv("TINKER_API_KEY", "tml-test-key")
    with TinkerService(["tiny-model"]) as service, pytest.raises(ConfigError) as info:
        check(tunedsl.load_experiment(STREAMING, overrides=[
            *ON_TINKER, f"tinker.base_url={service.url}"]))
    assert info.value.problems == (
        "@workflow streaming_agent (tests/fixtures/agentscope_tutorial.py:54): its call 1 of "
        "the trained model on the first task streams (stream=True), which Trinity-RFT "
        "0.6.0's Tinker client ignores (it answers with a whole chat completion, never "
        "chunks, so a streaming client fails to read it); do not stream: build the "
        "AgentScope model with tunedsl.as_agentscope(model, stream=False) (an AgentScope "
        "ChatModelBase parameter gets one that does not stream), or call the model without "
        "stream=True, or train without tinker",)


@pytest.mark.skipif(sys.version_info < (3, 11), reason="Trinity's Tinker backend needs 3.11+")
@pytest.mark.parametrize("target, model, needs", [
    (MATH, "Qwen/Qwen3-0.6B", None),  # a plain workflow
    (NOT_STREAMING, "tiny-model", "agentscope"),  # an AgentScope agent that does not stream
])
def test_a_tinker_workflow_without_tools_or_streaming_passes_the_preflight(
        monkeypatch, target, model, needs):
    pytest.importorskip("trinity.common.config")
    if needs:
        pytest.importorskip(needs)
    monkeypatch.setenv("TINKER_TELEMETRY", "0")
    monkeypatch.setenv("TINKER_API_KEY", "tml-test-key")
    with TinkerService([model]) as service:
        lines = check(tunedsl.load_experiment(target, overrides=[
            *ON_TINKER, f"tinker.base_url={service.url}"]))
    assert any(line.startswith("rollout: workflow and judge ran") for line in lines)


def test_an_sft_warmup_on_tinker_is_refused_before_anything_starts(monkeypatch):
    """Trinity 0.6.0's Tinker trainer reads ref_logprob for every micro-batch and computes
    it only for algorithms with a reference model: SFT fails at its first step
    (KeyError: 'ref_logprob'), so the run is refused in the preflight."""
    pytest.importorskip("trinity.common.config")
    monkeypatch.setenv("TINKER_API_KEY", "tml-test-key")
    conversations = Path(__file__).resolve().parents[1] / "examples/arith/conversations"
    with pytest.raises(ConfigError) as info:
        check(tunedsl.load_experiment(MATH, overrides=[
            *ON_TINKER, "warmup.algorithm_type=sft", "warmup.batch_size=8",
            "warmup.learning_rate=1e-5", f"warmup_dataset.path={conversations}"]))
    assert ("warmup: Trinity-RFT 0.6.0 cannot train an SFT warm-up through Tinker (its "
            "Tinker trainer fails at the first step, and the RL stage would need a checkpoint "
            "Tinker does not write); remove warmup, or remove tinker to train on GPUs"
            ) in info.value.problems


@pytest.mark.parametrize("target, kind, also", [
    ("examples.arith.experiment:ArithSFT", "sft", ""),
    # measured on the CPU Trinity path: dapo's first step fails with KeyError 'ref_logprob'
    ("examples.arith.experiment:Arith", "dapo",
     ", or take grpo with std_threshold = 0 (dapo's group filter)"),
])
def test_an_algorithm_without_a_reference_on_tinker_is_refused_before_anything_starts(
        monkeypatch, target, kind, also):
    pytest.importorskip("trinity.common.config")
    monkeypatch.setenv("TINKER_API_KEY", "tml-test-key")
    overrides = [*ON_TINKER] + ([] if kind == "sft" else [f"algorithm.algorithm_type={kind}"])
    with pytest.raises(ConfigError) as info:
        check(tunedsl.load_experiment(target, overrides=overrides))
    assert (f"algorithm.algorithm_type = '{kind}': Trinity-RFT 0.6.0 cannot train it through "
            f"Tinker (its Tinker trainer reads the reference model's log-probs at every step, "
            f"which an algorithm without a reference model never computes, so the first step "
            f"fails with KeyError 'ref_logprob'); remove tinker to train it on GPUs or with "
            f"backend='local'{also}") in info.value.problems


def test_a_checkpoint_every_step_on_tinker_is_refused(monkeypatch):
    """Trinity 0.6.0's trainer skips the weight sync at a step it saves a checkpoint (the
    checkpoint stands for it with verl), and a Tinker checkpoint holds no sampler weights:
    with a checkpoint every step the explorer never got trained weights (seen on the CPU
    end-to-end run: model version 0 at every step)."""
    pytest.importorskip("trinity.common.config")
    monkeypatch.setenv("TINKER_API_KEY", "tml-test-key")
    with pytest.raises(ConfigError) as info:
        check(tunedsl.load_experiment(MATH, overrides=[*ON_TINKER,
                                                       "algorithm.save_interval_steps=1"]))
    assert info.value.problems == (
        "algorithm.save_interval_steps = 1: on Tinker, Trinity-RFT 0.6.0 syncs no weights to "
        "the explorer at a step it saves a checkpoint (its trainer lets the checkpoint stand "
        "for the sync, and a Tinker checkpoint holds no sampler weights), so with a "
        "checkpoint every step the explorer would sample the starting model all run; save "
        "every 2 steps or more",)


@pytest.mark.skipif(sys.version_info < (3, 11), reason="Trinity's Tinker backend needs 3.11+")
def test_verl_overrides_on_tinker_are_refused_as_ignored(monkeypatch):
    """A run through Tinker trains without verl: its trainer_config would be read by
    nobody."""
    pytest.importorskip("trinity.common.config")
    monkeypatch.setenv("TINKER_TELEMETRY", "0")
    monkeypatch.setenv("TINKER_API_KEY", "tml-test-key")
    with TinkerService(["Qwen/Qwen3-0.6B"]) as service:
        with pytest.raises(ConfigError) as info:
            check(tunedsl.load_experiment(MATH, overrides=[
                *ON_TINKER, f"tinker.base_url={service.url}",
                "trinity.trainer.trainer_config.actor.ppo_epochs=2"]))
    assert info.value.problems == (
        "trinity: trainer.trainer_config: the experiment trains through Tinker, which reads no "
        "verl config, so it would be ignored; remove it",)
