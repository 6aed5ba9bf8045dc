"""Auxiliary models served by an OpenAI-compatible endpoint (``Model(base_url=...)``): no
local engine and no GPU on any backend, the key read from the environment only, checked
in the preflight, and called by tunedsl's own workflow class on Trinity (whose runner gets
auxiliary models only from Ray actors, which an external engine never has)."""

from __future__ import annotations

import json

import pytest

import tunedsl
from tunedsl.api import check
from tunedsl.errors import ConfigError

from .openai_server import OpenAIServer

JUDGED = "examples.llm_judge.experiment:LLMJudged"
KEY = "TUNEDSL_TEST_JUDGE_KEY"


def on_endpoint(server, *more):
    return [f"auxiliary_models.grader.base_url={server.base_url}",
            "auxiliary_models.grader.model_path=served", f"auxiliary_models.grader.api_key_env={KEY}",
            *more]


def test_an_endpoint_model_is_no_engine_and_no_gpu_and_its_key_no_file(monkeypatch, tmp_path):
    """The YAML lists no engine for it, workflow_args name it (URL from the environment
    stays a reference), and Trinity counts one GPU less."""
    pytest.importorskip("trinity.common.config")
    from tunedsl.backends.trinity.config import to_yaml, trinity_config
    from tunedsl.backends.trinity.validate import gpus_needed

    monkeypatch.setenv(KEY, "secret-key-123")
    monkeypatch.setenv("TUNEDSL_TEST_JUDGE_URL", "https://judge.example/v1")
    graph = tunedsl.load_experiment(JUDGED, overrides=[
        'auxiliary_models.grader.base_url="${env:TUNEDSL_TEST_JUDGE_URL}"',
        f"auxiliary_models.grader.api_key_env={KEY}"])
    config = trinity_config(graph)
    text = to_yaml(config)
    assert "auxiliary_models" not in config["explorer"]
    assert config["buffer"]["explorer_input"]["taskset"]["workflow_args"]["endpoints"] == {
        "grader": {"model": "Qwen/Qwen3-8B", "base_url": "https://judge.example/v1",
                   "api_key_env": KEY, "sampling": {"temperature": 0.0, "top_p": 1.0,
                                                    "max_tokens": 32}}}
    assert "base_url: ${oc.env:TUNEDSL_TEST_JUDGE_URL}" in text
    assert "secret-key-123" not in text and "judge.example" not in text
    assert gpus_needed(config) == 2  # the policy's engine and the trainer; not 3


def test_the_trained_model_cannot_be_an_endpoint():
    """Training updates the policy's weights, so it needs a local engine."""
    with pytest.raises(ConfigError) as info:
        tunedsl.load_experiment(JUDGED, overrides=["model.base_url=https://x.example/v1"])
    assert str(info.value).endswith(
        ": model.base_url: the trained model runs on a local engine, which training updates; "
        "an endpoint can serve auxiliary models only")


def test_a_key_for_the_trained_model_is_named_as_the_field_given():
    """``Model(..., api_key_env=...)`` on the trained model was blamed on model.base_url,
    which was not given (sweep 43 A-W11)."""
    with pytest.raises(ConfigError) as info:
        tunedsl.load_experiment(JUDGED, overrides=[f"model.api_key_env={KEY}"])
    assert str(info.value).endswith(
        ": model.api_key_env: the trained model runs on a local engine, which training "
        "updates and which takes no key; remove it (an endpoint and its key can serve "
        "auxiliary models only)")


def test_check_asks_the_endpoint_with_the_key_and_says_what_it_serves(monkeypatch,
                                                                      tiny_model):
    """The preflight reaches GET /models with the key from the environment."""
    with OpenAIServer(api_key="right") as server:
        variable = f"auxiliary_models.grader.api_key_env {KEY}: that environment variable"
        for key, refusal in [
                (None, f"{variable} is not set; export it (the key is never read from a file)"),
                (" ", f"{variable} is empty; put the key in it (the key is never read from a "
                      f"file)"),
                ("wrong", f"auxiliary_models.grader: {server.base_url} refuses the key in "
                          f"{KEY} (HTTP 401)")]:
            if key is None:
                monkeypatch.delenv(KEY, raising=False)
            else:
                monkeypatch.setenv(KEY, key)
            with pytest.raises(ConfigError) as info:
                check(tunedsl.load_experiment(JUDGED, overrides=[
                    *on_endpoint(server), f"model.model_path={tiny_model}", "model.max_model_len=64",
                    "model.max_tokens=8"]))
            assert str(info.value) == refusal, key
        monkeypatch.setenv(KEY, "right")
        lines = check(tunedsl.load_experiment(JUDGED, overrides=[
            *on_endpoint(server), f"model.model_path={tiny_model}", "model.max_model_len=64",
            "model.max_tokens=8"]))
        with pytest.raises(ConfigError) as keyless:  # the endpoint asks for a key; none named
            check(tunedsl.load_experiment(JUDGED, overrides=[
                f"auxiliary_models.grader.base_url={server.base_url}",
                "auxiliary_models.grader.model_path=served", f"model.model_path={tiny_model}",
                "model.max_model_len=64", "model.max_tokens=8"]))
    assert f"auxiliary_models.grader: {server.base_url} answers and serves served" in lines
    assert str(keyless.value) == (
        f"auxiliary_models.grader: {server.base_url} asks for an API key (HTTP 401) and none "
        f"is given; name the environment variable holding it: "
        f"auxiliary_models.grader.api_key_env = \"VAR\"")


def test_check_refuses_an_endpoint_url_that_no_rollout_could_call(monkeypatch, tiny_model):
    """A base URL without its /v1, or one answering neither GET /models nor a chat, passed
    check as "answers (it lists no models)"; every judge call then got a 404 (sweep 37
    A-S2). One that chats though it lists no models still passes."""
    class ChatsButListsNoModels(OpenAIServer):
        def routes(self, app):
            app.router.add_post("/v1/chat/completions", self._handle)

    class Nothing(OpenAIServer):
        def routes(self, app):
            pass

    monkeypatch.setenv(KEY, "right")

    def checked(url):
        return check(tunedsl.load_experiment(JUDGED, overrides=[
            f"auxiliary_models.grader.base_url={url}", "auxiliary_models.grader.model_path=served",
            f"auxiliary_models.grader.api_key_env={KEY}", f"model.model_path={tiny_model}",
            "model.max_model_len=64", "model.max_tokens=8"]))

    with OpenAIServer(lambda m: "Score: 8") as server:
        root = server.base_url.removesuffix("/v1")
        with pytest.raises(ConfigError) as short:
            checked(root)
    with Nothing() as nothing, pytest.raises(ConfigError) as empty:
        checked(nothing.base_url)
    with ChatsButListsNoModels(lambda m: "Score: 8") as chats:
        lines = checked(chats.base_url)
    assert str(short.value) == (
        f"auxiliary_models.grader.base_url: {root} answers GET /models with HTTP 404, and "
        f"{root}/v1 serves the API; give {root}/v1")
    assert str(empty.value) == (
        f"auxiliary_models.grader.base_url: {nothing.base_url} answers neither GET /models nor "
        f"POST /chat/completions (HTTP 404): no OpenAI-compatible API is there; check the URL "
        f"(such endpoints usually end in /v1)")
    assert f"auxiliary_models.grader: {chats.base_url} answers (it lists no models)" in lines


def test_check_asks_the_endpoint_a_chat_as_the_rollouts_will(monkeypatch, tiny_model):
    """An endpoint listing the model that does not chat (a vLLM embedding server's 400), one
    redirecting to a login page, and one listing models by number passed check, or ended it
    in an internal error; every rollout then failed (sweep 38 A-S1, A-S2, A-T1)."""
    from aiohttp import web

    class Embeds(OpenAIServer):
        async def _handle(self, request):
            return web.json_response({"error": {"message": "The model does not support Chat "
                                                           "Completions API"}}, status=400)

    class LogsIn(OpenAIServer):
        def routes(self, app):
            async def login(request):
                raise web.HTTPFound("/login")
            app.router.add_get("/v1/models", login)
            app.router.add_post("/v1/chat/completions", login)

    class ByNumber(OpenAIServer):
        async def _models(self, request):
            return web.json_response({"object": "list", "data": [{"id": 7}, {"id": None}]})

    monkeypatch.setenv(KEY, "right")

    def checked(server):
        return check(tunedsl.load_experiment(JUDGED, overrides=[
            *on_endpoint(server), f"model.model_path={tiny_model}", "model.max_model_len=64",
            "model.max_tokens=8"]))

    with Embeds() as embeds, pytest.raises(ConfigError) as refused:
        checked(embeds)
    with LogsIn() as logs_in, pytest.raises(ConfigError) as redirected:
        checked(logs_in)
    with ByNumber(lambda m: "Score: 8") as by_number:
        lines = checked(by_number)
    assert str(refused.value) == (
        f"auxiliary_models.grader: {embeds.base_url} refuses a chat request for 'served' (HTTP "
        f"400: The model does not support Chat Completions API), as it would every rollout's; "
        f"check the model and the URL (a chat model's endpoint, usually ending in /v1)")
    assert str(redirected.value) == (
        f"auxiliary_models.grader.base_url: {logs_in.base_url} answers GET /models with a "
        f"redirect (HTTP 302) to /login, a login page or another address; give the "
        f"endpoint's own URL")
    assert (f"auxiliary_models.grader: {by_number.base_url} answers, but does not list "
            f"'served' (it lists: 7, None)") in lines


def test_check_never_shows_a_key_the_endpoint_quotes_back(monkeypatch, tiny_model):
    """A chat probe's 404 that quotes the Authorization header: check printed the key,
    which has no key's shape (eval hid it by its value, check by shapes only; sweep 44)."""
    from aiohttp import web

    class Quotes(OpenAIServer):
        async def _handle(self, request):
            said = f"no model for key {request.headers.get('Authorization')}"
            return web.json_response({"error": {"message": said}}, status=404)

    monkeypatch.setenv(KEY, "token-abc123")
    with Quotes() as quotes, pytest.raises(ConfigError) as refused:
        check(tunedsl.load_experiment(JUDGED, overrides=[
            *on_endpoint(quotes), f"model.model_path={tiny_model}", "model.max_model_len=64",
            "model.max_tokens=8"]))
    assert "token-abc123" not in str(refused.value)
    assert "(HTTP 404: no model for key Bearer <the key, not shown>)" in str(refused.value), \
        str(refused.value)


def test_trinitys_runner_with_a_judge_on_an_endpoint(monkeypatch, tmp_path):
    """Through Trinity's own runner: the policy on the (loopback) engine, the grader called
    by tunedsl's workflow class at its endpoint with the key; every rollout scored."""
    pytest.importorskip("trinity.common.config")
    from .trinity_runner import VLLMServer, knows, run_training_batch, serve_models
    from .trinity_support import validate

    monkeypatch.setenv(KEY, "right")
    with OpenAIServer(lambda messages: "Score: 8", api_key="right") as grader:
        graph = tunedsl.load_experiment(JUDGED, overrides=on_endpoint(
            grader, "algorithm.batch_size=2", "algorithm.group_size=2"))
        config = validate(graph, tmp_path)
        assert config.explorer.auxiliary_models == []
        policy = VLLMServer(knows("examples/llm_judge/data", "{answer}.")).__enter__()
        try:
            serve_models(monkeypatch, {"rollout": policy})
            outcome = run_training_batch(config)
        finally:
            policy.__exit__(None, None, None)
        graded = list(grader.requests)
    assert all(status.ok for status in outcome.statuses)
    assert {e.reward for e in outcome.experiences} == {0.8} and len(outcome.experiences) == 4
    assert len(graded) == 4 and {r["model"] for r in graded} == {"served"}
    assert {r["temperature"] for r in graded} == {0.0}


def test_eval_calls_an_endpoint_model_without_aux_flags(monkeypatch, tmp_path):
    """eval needs no --aux for an auxiliary model that names its endpoint."""
    from .cli_support import cli

    out = tmp_path / "results.jsonl"
    monkeypatch.setenv(KEY, "right")
    with OpenAIServer(lambda m: "Paris") as policy, \
            OpenAIServer(lambda m: "Score: 10", api_key="right") as grader:
        done = cli("eval", JUDGED, "--base-url", policy.base_url, "--model", "served", "-n", "2",
                   "-o", out, "--no-progress",
                   *[arg for item in on_endpoint(grader) for arg in ("--set", item)])
    assert done.returncode == 0, done.stderr
    rewards = [json.loads(line)["reward"] for line in out.read_text().splitlines()]
    assert rewards == [1.0, 1.0] and len(grader.requests) == 2


def test_vllms_reasoning_field_is_read_from_replies_and_streams():
    """vLLM 0.10 and newer return a reply's parsed reasoning as ``reasoning`` (0.23's
    ChatMessage and DeltaMessage have no ``reasoning_content``): a real openai client's
    replies, streamed or not, keep it as the call's ``reasoning_content``."""
    import asyncio

    from tunedsl.models.endpoint import OpenAIChatModel, endpoint_client

    from .trinity_runner import VLLMServer

    async def ask(url):
        model = OpenAIChatModel(endpoint_client(url), "served")
        reply = await model.chat([{"role": "user", "content": "1+1"}])
        stream = await model.openai_client.chat.completions.create(
            model="served", messages=[{"role": "user", "content": "1+1"}], stream=True)
        async for _ in stream:
            pass
        return reply, model.calls

    with VLLMServer(lambda m: {"content": "2", "reasoning": "one and one"}) as server:
        reply, calls = asyncio.run(ask(server.base_url))
    assert reply.reasoning_content == "one and one"
    assert [call.response.reasoning_content for call in calls] == ["one and one"] * 2


def test_an_endpoint_behind_a_dead_proxy_names_the_proxy(tmp_path, monkeypatch):
    """A proxy from the environment that does not answer: the message names it and how to
    go around it (it named only the proxy's host and port, which the user never gave)."""
    from .cli_support import cli

    for variable in ("no_proxy", "NO_PROXY", "HTTP_PROXY", "all_proxy", "ALL_PROXY"):
        monkeypatch.delenv(variable, raising=False)
    monkeypatch.setenv("http_proxy", "http://127.0.0.1:9")
    with OpenAIServer() as server:
        done = cli("eval", "examples.arith.experiment:Arith", "--base-url", server.base_url,
                   "--model", "m", "-n", "1", "-o", str(tmp_path / "r.jsonl"), "--no-progress")
        requests = len(server.requests)
    assert requests == 0
    assert done.returncode == 1
    last = done.stderr.splitlines()[-1]
    assert f"cannot reach the model endpoint {server.base_url}/ (through the proxy " \
           f"http://127.0.0.1:9 that http_proxy or all_proxy sets; to reach it directly, add " \
           f"127.0.0.1 to no_proxy): " in last, last


@pytest.mark.parametrize("key, what", [
    ("abc\ndef", "a line break or another control character"),
    ("sk-abc\r", "a line break or another control character"),
    ("kéy", "a character that is not ASCII")])
def test_a_key_no_http_header_can_carry_is_refused_before_any_rollout(monkeypatch, key, what):
    """Every rollout failed, each blaming the workflow ("Forbidden control character
    detected in headers"): refused up front, as an empty key is."""
    from .cli_support import cli

    monkeypatch.setenv("TUNEDSL_ODD_KEY", key)
    done = cli("eval", "examples.arith.experiment:Arith", "--base-url", "http://127.0.0.1:9/v1",
               "--model", "m", "--api-key-env", "TUNEDSL_ODD_KEY")
    assert (done.returncode, done.stderr.strip()) == (2, (
        f"Error: --api-key-env TUNEDSL_ODD_KEY: that environment variable holds {what}, and "
        f"an API key is one line of ASCII; export the key alone"))



#: Replies of 200 that are no chat completion a rollout reads, and how check says each.
NO_COMPLETION = {
    "no choices": (lambda completion: {**completion, "choices": []},
                   "a completion with no choices, not an OpenAI chat completion"),
    "an error": (lambda completion: {"error": {"message": "quota exceeded"}},
                 "an error ('quota exceeded') with status 200, not an OpenAI chat completion"),
    "no object": (lambda completion: {"result": "ok"},
                  "a completion with no choices, not an OpenAI chat completion"),
    # an internal error of check's (sweep 40 A-T2)
    "a key the openai package takes as its own": (
        lambda completion: {**completion, "_fields_set": 5},
        "a reply the openai package cannot read (AttributeError: 'int' object has no attribute "
        "'add'), not an OpenAI chat completion"),
}


@pytest.mark.parametrize("reply", sorted(NO_COMPLETION))
def test_check_refuses_an_endpoint_answering_a_chat_with_no_completion(monkeypatch, tiny_model,
                                                                       reply):
    """check's chat request read only the status: a 200 that is no completion passed as
    "answers and serves", and every rollout's judge call then failed (sweep 39 A-S1). The
    reply is read by the functions every rollout's is; a whole completion passes."""
    rewrite, said = NO_COMPLETION[reply]
    monkeypatch.setenv(KEY, "right")

    def checked(server):
        return check(tunedsl.load_experiment(JUDGED, overrides=[
            *on_endpoint(server), f"model.model_path={tiny_model}", "model.max_model_len=64",
            "model.max_tokens=8"]))

    with OpenAIServer(lambda m: "Score: 8", api_key="right", answer=rewrite) as odd, \
            pytest.raises(ConfigError) as refused:
        checked(odd)
    assert str(refused.value) == (
        f"auxiliary_models.grader: {odd.base_url} answers a chat request with {said}, as it "
        f"would every rollout; check the URL (an OpenAI-compatible server's ends in /v1)")
    with OpenAIServer(lambda m: "Score: 8", api_key="right") as whole:
        assert (f"auxiliary_models.grader: {whole.base_url} answers and serves served"
                in checked(whole))


@pytest.mark.parametrize("passing", [[500], [409], [408, 503, 503]])
def test_check_asks_a_chat_again_after_a_server_error_as_the_rollouts_client_does(
        monkeypatch, tiny_model, passing):
    """One 500 to check's chat request refused the endpoint, which the rollouts' client asks
    again (sweep 39 A-W6), and so did a 408 or 409 (sweep 40 A-W1): a flaky gateway failed
    check at random. Asked again as often as the client asks, four in a row refuse."""
    monkeypatch.setenv(KEY, "right")

    def checked(server):
        return check(tunedsl.load_experiment(JUDGED, overrides=[
            *on_endpoint(server), f"model.model_path={tiny_model}", "model.max_model_len=64",
            "model.max_tokens=8"]))

    with OpenAIServer(lambda m: "Score: 8", api_key="right", failures=passing) as flaky:
        assert f"auxiliary_models.grader: {flaky.base_url} answers and serves served" in \
            checked(flaky)
    with OpenAIServer(lambda m: "Score: 8", api_key="right", failures=[500] * 4) as down, \
            pytest.raises(ConfigError) as refused:
        checked(down)
    assert str(refused.value) == (
        f"auxiliary_models.grader.base_url: {down.base_url} answers POST /chat/completions "
        f"with HTTP 500, a server error; check that the server behind it is healthy")


def test_check_waits_as_the_server_asks_and_follows_its_redirects(monkeypatch, tiny_model,
                                                                   capsys):
    """check's chat request ignored Retry-After (a server asking for 1.5 s got 0.5, 1 and 2 s
    and was refused), refused a 307 or 308 redirect the openai client follows, and said
    nothing while it asked again (sweep 41 A-W1, A-W2)."""
    monkeypatch.setenv(KEY, "right")

    def checked(server):
        return check(tunedsl.load_experiment(JUDGED, overrides=[
            *on_endpoint(server), f"model.model_path={tiny_model}", "model.max_model_len=64",
            "model.max_tokens=8"]))

    waits = [(503, {"retry-after-ms": "300"})] * 3
    with OpenAIServer(lambda m: "Score: 8", api_key="right", failures=waits) as slow:
        assert f"auxiliary_models.grader: {slow.base_url} answers and serves served" in \
            checked(slow)
    said = capsys.readouterr().err.splitlines()
    assert [line for line in said if line.startswith("note: auxiliary_models.grader")] == [
        f"note: auxiliary_models.grader: {slow.base_url} answered HTTP 503 to a chat request; "
        f"asking again in 0.3s, as the rollouts' client would"] * 3
    for status in (307, 308):
        moved = [(status, {"location": "/v1/chat/completions"})]
        with OpenAIServer(lambda m: "Score: 8", api_key="right", failures=moved) as server:
            assert f"auxiliary_models.grader: {server.base_url} answers and serves served" \
                in checked(server)


@pytest.mark.parametrize("where", ["GET /models", "chat"])
def test_check_says_an_endpoint_that_limits_its_requests(monkeypatch, tiny_model, capsys,
                                                          where):
    """A 429 with Retry-After: 3600 (a quota spent) was read as an endpoint that "lists no
    models", or left to the rollouts without a word (sweep 44 A)."""
    from aiohttp import web

    class Limited(OpenAIServer):
        async def _models(self, request):
            if where == "GET /models":
                return web.json_response({"error": {"message": "quota"}}, status=429,
                                         headers={"retry-after": "3600"})
            return await super()._models(request)

    monkeypatch.setenv(KEY, "right")
    failures = [(429, {"retry-after": "3600"})] if where == "chat" else []
    with Limited(lambda m: "Score: 8", api_key="right", failures=failures) as limited:
        lines = check(tunedsl.load_experiment(JUDGED, overrides=[
            *on_endpoint(limited), f"model.model_path={tiny_model}", "model.max_model_len=64",
            "model.max_tokens=8"]))
    notes = [line for line in capsys.readouterr().err.splitlines()
             if line.startswith("note: auxiliary_models.grader")]
    assert notes == [
        f"note: auxiliary_models.grader: {limited.base_url} answered HTTP 429 (too many "
        f"requests, or a quota spent, asking to wait 3600s); the rollouts' calls would wait, "
        f"or fail, until it lifts"]
    expected = (f"auxiliary_models.grader: {limited.base_url} answers, but limits the requests "
                f"now (HTTP 429)" if where == "GET /models" else
                f"auxiliary_models.grader: {limited.base_url} answers and serves served")
    assert expected in lines


@pytest.mark.parametrize("where", ["redirect", "model list", "quoted redirect",
                                   "lower-case quoted redirect", "twice quoted redirect",
                                   "base 64 redirect"])
def test_check_never_shows_the_key_it_sent_wherever_the_endpoint_puts_it(monkeypatch,
                                                                          tiny_model, where):
    """A login redirect to ``/login?key=KEY``, or a model's id holding it: check printed the
    key, which has no key's shape (sweep 45 A-S2); a key of ``/`` and ``+`` the redirect
    quotes (``tok%2Fabc``) was printed so (sweep 46 A-S3), and so was one quoted in lower
    case, twice, or in base 64 (sweep 47 A-S2)."""
    import base64
    import re
    from urllib.parse import quote

    from aiohttp import web

    class Puts(OpenAIServer):
        async def _models(self, request):
            sent = request.headers.get("Authorization", "").removeprefix("Bearer ")
            if where == "lower-case quoted redirect":  # (as .NET writes it)
                raise web.HTTPFound("/login?key=" + re.sub(
                    "%[0-9A-F]{2}", lambda hexed: hexed[0].lower(), quote(sent, safe="")))
            if where == "twice quoted redirect":
                raise web.HTTPFound(f"/login?key={quote(quote(sent, safe=''), safe='')}")
            if where == "base 64 redirect":
                raise web.HTTPFound(f"/login?key={base64.b64encode(sent.encode()).decode()}")
            if where != "model list":
                raise web.HTTPFound(f"/login?key={quote(sent, safe='')}")
            return web.json_response({"object": "list", "data": [{"id": f"key-{sent}"}]})

    key = "tok/abc+DEF=123xyz456" if "redirect" in where and where != "redirect" else \
        "token-abc123xyz"
    monkeypatch.setenv(KEY, key)
    with Puts(lambda m: "Score: 8") as puts:
        try:
            said = "\n".join(check(tunedsl.load_experiment(JUDGED, overrides=[
                *on_endpoint(puts), f"model.model_path={tiny_model}", "model.max_model_len=64",
                "model.max_tokens=8"])))
        except ConfigError as refused:
            said = str(refused)
    assert key not in said and quote(key, safe="") not in said
    assert base64.b64encode(key.encode()).decode() not in said
    assert quote(key, safe="").lower() not in said.lower()
    assert ("/login?key=<the key, not shown>" if where != "model list" else
            "(it lists: key-<the key, not shown>)") in said, said
