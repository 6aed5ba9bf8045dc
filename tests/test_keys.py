"""API keys given where an environment variable's name belongs (keys.py): never echoed, by
``--api-key-env``, a record's ``api_key_env`` or an ``${env:...}``; variables' names of the
usual shape are not taken for keys."""

from __future__ import annotations

import string

import pytest
from hypothesis import given
from hypothesis import strategies as st

from tunedsl.config.environment import env_resolved
from tunedsl.errors import ConfigError
from tunedsl.keys import _KEY_PREFIXES, looks_like_a_key
from tunedsl.models.endpoint import read_api_key

#: Random tokens as providers issue them: a known prefix and 16 or more letters and digits,
#: or 32 or more letters (both cases) and digits with no prefix.
_TOKEN_TEXT = st.text(string.ascii_letters + string.digits, min_size=16, max_size=60)
KEYS = st.one_of(
    st.builds(lambda prefix, text: prefix + text + "Q7", st.sampled_from(_KEY_PREFIXES),
              _TOKEN_TEXT),
    st.builds(lambda text: "aBz1" + text,
              st.text(string.ascii_letters + string.digits, min_size=28, max_size=60))
).filter(lambda key: len(set(key)) >= 12)  # (random, as issued: some 20 characters in 32)
#: Environment variables' names as people write them: upper case words joined by "_" (but
#: AWS's key ids' prefixes, which such a name may begin with: those are taken for keys).
NAMES = st.from_regex(r"\A[A-Z][A-Z0-9]{0,10}(_[A-Z0-9]{1,10}){0,4}\Z").filter(
    lambda name: not name.startswith(("AKIA", "ASIA")))


@given(KEYS)
def test_a_key_is_never_echoed_where_a_variable_is_named(key):
    """Neither ``--api-key-env KEY`` nor ``${env:KEY}`` shows the key in its error."""
    with pytest.raises(ConfigError) as caught:
        read_api_key(key, "--api-key-env")
    assert key not in str(caught.value)
    with pytest.raises(ConfigError) as caught:
        env_resolved(f"${{env:{key}}}", "model.base_url")
    assert key not in str(caught.value)
    assert str(caught.value) == (
        f"model.base_url: an ${{env:...}} names text of {len(key)} characters, not shown: it "
        f"looks like a key, not an environment variable's name; export the key as a variable, "
        f"e.g. OPENAI_API_KEY, and write ${{env:OPENAI_API_KEY}}")


@given(NAMES)
def test_a_variable_name_of_the_usual_shape_is_not_taken_for_a_key(name):
    assert not looks_like_a_key(name)


@given(KEYS, st.sampled_from(["[", '"', "{a=", "'", "[1, "]))
def test_a_key_in_a_malformed_set_value_is_never_echoed(key, start):
    """A key pasted into an override's value that is not TOML (an unclosed list or quote)
    was quoted whole in the error (sweep 37 A-W6); the key is left out, the rest kept."""
    from tunedsl.config.settings import parse_overrides

    item = f"auxiliary_models.judge.api_key_env={start}{key}"
    with pytest.raises(ConfigError) as caught:
        parse_overrides([item])
    assert key not in str(caught.value)
    assert "auxiliary_models.judge.api_key_env=" in str(caught.value)


#: Model names as endpoints serve them (OpenAI's, Together's, Groq's, Google's, Hugging Face
#: repositories, AWQ builds, fine-tunes, a served folder): `looks_like_a_key` takes several
#: of them for keys (long, lower case and digits), which refused real models (sweep 41 B-S3).
SERVED_NAMES = ["gpt-4o-mini-2024-07-18", "meta-llama/Meta-Llama-3.1-70B-Instruct-Turbo",
                "Meta-Llama-3.1-70B-Instruct-Turbo", "Qwen2.5-Coder-32B-Instruct-AWQ",
                "gemini-2.0-flash-thinking-exp-01-21", "claude-3-5-sonnet-20241022",
                "ft:gpt-4o-mini-2024-07-18:my-org:custom-suffix:9pQv7YkT",
                "/srv/models/qwen2.5-0.5b-instruct-checkpoint-1200", "llama-3.3-70b-versatile",
                "deepseek-ai/DeepSeek-R1-Distill-Qwen-32B", "mistral-large-2411",
                "accounts/fireworks/models/llama-v3p1-405b-instruct",
                # words after what may look like a key's prefix (sweep 42 A-W1, B-W2), a
                # name of Cloudflare's (@), a served folder in Hugging Face's cache (hex)
                "pplx-codellama-34b-instruct", "hf_tiny_random_llama_model",
                "hf_qwen2_5_0_5b_instruct_sft", "sk-gpt2-slovak-instruct-base",
                "ASIA-Pacific-Chat-Model-7B-v1", "ASIAN-Llama-3-8B-Instruct-v2",
                "pk-llama-3-8b-instruct-base", "fw_llama_v3p1_8b_instruct_x",
                "r8_model_flux_schnell_lora", "@cf/meta/llama-3.1-8b-instruct",
                "/root/.cache/huggingface/hub/models--Qwen--Qwen2.5-0.5B/snapshots/"
                "7ae557604adf67be50417f59c2c2f167def9a775",
                "models--Qwen--Qwen2.5-0.5B/snapshots/7ae557604adf67be50417f59c2c2f167def9a775",
                # a Replicate version, an MLflow run, Cloudflare's AI Gateway, long names
                # (sweep 43 A-W1, A-W2, A-W3)
                "meta/llama-2-70b-chat:02e509c789964a7ea8736978a43525956ef40397be9033abf9fd2"
                "badfe68c9e3", "runs:/5f3c1a2b3c4d5e6f7a8b9c0d1e2f3a4b/model",
                "workers-ai/@cf/meta/llama-3.1-8b-instruct",
                "deepseek-r1-distill-llama-70b-instruct-v2",
                "DeepSeek-R1-Distill-Qwen-32B-Instruct-Q4_K_M",
                # 40 characters of an AWS secret's alphabet, an org/name of words; Ollama's
                # tags (no endpoint's address)
                "NousResearch/NousHermes2Mixtral8x7BDPOab", "llama3:8b", "qwen2.5:14",
                # CamelCase words run together, taken for a Cloudflare token (sweep 44);
                # served paths of 40 characters, taken for AWS secrets (sweep 45 A-W1)
                "DeepSeekCoderV2Lite-Instruct-16B", "InternLM2ChatMoE-20B-SFT-Base",
                "/home/alice/ckpts/grpo/Qwen3/8B/step1000",
                "/workspace/outputs/Qwen3/8B/GRPO/step200"]
#: Names as model hubs spell them: an organisation, then words and version numbers; a
#: word capitalised, in lower case or an acronym (CamelCase words joined: "DeepSeek"), not
#: letters of random case, which is a key's shape. (60,000 examples of it pass.)
_WORD = r"([A-Z]?[a-z]{3,9}|[A-Z]{2,5})"
NAMES_OF_MODELS = st.from_regex(
    rf"\A([a-z][a-z0-9-]{{1,15}}/)?{_WORD}{{1,2}}[0-9]{{0,3}}(-[0-9]+(\.[0-9]+)?[BbMk]?"
    rf"|-{_WORD}{{1,2}}|\.[0-9]){{1,6}}\Z")


@pytest.mark.parametrize("name", SERVED_NAMES)
def test_a_served_model_name_is_no_key(name):
    from tunedsl.evaluation.select import split_model

    assert split_model(name) == (name, None)
    assert split_model(f"{name}@http://127.0.0.1:8000/v1") == (name, "http://127.0.0.1:8000/v1")


@given(NAMES_OF_MODELS)
def test_a_model_name_of_the_usual_shape_is_no_key(name):
    """Neither as a name nor as a segment of an endpoint's path (a server routing by model)."""
    from tunedsl.dsl.records import query_problem
    from tunedsl.evaluation.select import split_model

    assert split_model(name) == (name, None)
    assert query_problem(f"http://127.0.0.1:8000/{name}/v1") is None


#: Keys as they are pasted where a model's name goes: alone, with blank space or a line's
#: end from a file, quoted, after Bearer, inside a name (sweep 42 A-S1, A-S2, B-S2).
PASTED = ["{}", " {}", "{} ", "{}\r", "{}\n", "Bearer {}", '"{}"', "'{}'", "m@{}", "org/{}",
          "{}/v1", "{}:latest", "OPENAI_API_KEY={}", "{},m"]
#: Other providers' keys: Azure's and Together's (hex), Databricks', a JSON Web Token.
OTHER_KEYS = ["dapi0123456789abcdef0123456789abcdef", "tgp_v1_abcdEFGH1234ijklMNOP5678qrst",
              "eyJhbGciOiJIUzI1NiIsInR5cCI6IkpXVCJ9.eyJzdWIiOiIxMjM0NTY3ODkwIn0.c2lnbmF0dXJl",
              # Google's OAuth token, Zhipu's id.secret, Cloudflare's, Anyscale's, Voyage's,
              # base 36 (sweep 43 A-S1)
              "ya29.a0AfH6SMBx3kLmNoPqRsTuVwXyZ0123456789",
              "3f4e5d6c7b8a9f0e1d2c3b4a59687766.AbCdEfGh12345678",
              "Gx7k2_Ab-Q9rT8sY3uV6wZ1mN4pL7oK0jH5gF2dS", "esecret_ab12cd34ef56gh78ij90kl12mn",
              "pa-Ab12Cd34Ef56Gh78Ij90Kl12", "a1b2c3d4e5f6g7h8i9j0k1l2m3n4o5p6"]
#: Azure's and Together's keys, hex digits: keys when given alone (within a name, hex digits
#: are a version's: a Replicate model's owner/name:HEX).
HEX_KEYS = ["0123456789abcdef0123456789abcdef", "9f86d081884c7d659a2feaa0c55ad015"
            "a3bf4f1b2b0b822cd15d6c15b0f00a08"]
ALONE = ["{}", " {}", "{}\r", "Bearer {}", '"{}"']
PASTED_KEYS = st.one_of(
    st.tuples(st.one_of(KEYS, st.sampled_from(OTHER_KEYS)), st.sampled_from(PASTED)),
    st.tuples(st.sampled_from(HEX_KEYS), st.sampled_from(ALONE)))


@given(PASTED_KEYS)
def test_a_key_given_as_a_model_name_is_refused_unshown(pasted_key):
    """It was sent as the name and written whole into the results (sweep 41 B-S3), or
    quoted whole by the refusal of a line break (sweep 42 A-S2)."""
    from tunedsl.evaluation.select import split_model

    key, pasted = pasted_key
    with pytest.raises(ConfigError) as caught:
        split_model(pasted.format(key))
    assert key not in str(caught.value)
    assert str(caught.value) == (
        f"--model {pasted.format('<a key, not shown>')!r}: the model's name looks like an API "
        "key (not shown: it "
        "would be written into the results); give the model's name, and the key's "
        "environment variable with api_key_env")  # (the command line's spelling: catalogue)


@given(PASTED_KEYS)
def test_a_key_given_as_a_model_record_s_name_is_refused_unshown(pasted_key):
    """``Model(KEY, base_url=...)`` (or ``--set auxiliary_models.g.model_path=KEY``) sent the
    key as the model's name and wrote it into the results (sweep 42 A-S8)."""
    from tunedsl import Model

    key, pasted = pasted_key

    with pytest.raises(ConfigError) as caught:
        Model(pasted.format(key), base_url="http://127.0.0.1:8000/v1")
    assert key not in str(caught.value)
    assert str(caught.value) == (
        f"Model.model_path must be the model's name or folder (got text of "
        f"{len(pasted.format(key))} characters, not shown: it looks like an API key, which "
        f"belongs in the environment, named by api_key_env)")


def _aws_secrets(count: int) -> list[str]:
    """AWS secret access keys as issued: base 64 of 30 random bytes (seeded), those holding
    a ``/`` or ``+`` (the others are letters and digits, which other rules catch)."""
    import base64
    import random

    draw = random.Random(44)
    keys = (base64.b64encode(draw.randbytes(30)).decode() for _ in range(count * 2))
    return [key for key in keys if "/" in key or "+" in key][:count]


def _refused_unshown(key, pasted):
    """``--model`` given ``key`` as ``pasted`` is refused as a key, never shown."""
    from tunedsl.evaluation.select import split_model

    with pytest.raises(ConfigError) as caught:
        split_model(pasted.format(key))
    assert key not in str(caught.value)
    assert str(caught.value).startswith(
        f"--model {pasted.format('<a key, not shown>')!r}: the model's name looks like an API "
        "key (not shown")


@given(st.sampled_from(["wJalrXUtnFEMI/K7MDENG/bPxRfiCYEXAMPLEKEY", *_aws_secrets(50)]),
       st.sampled_from([*ALONE, "m@{}", "OPENAI_API_KEY={}"]))
def test_an_aws_secret_given_as_a_model_name_is_refused_unshown(key, pasted):
    """Its ``/`` and ``+`` parted it into pieces no other key's shape took for one: it was
    sent as the name (sweep 42, left); a ``/`` at its start read as a path's, and a name's
    rule of "no five lower case letters together" let 5.7% of them by (sweep 44 A)."""
    _refused_unshown(key, pasted)


def test_nearly_every_token_of_random_letters_is_taken_for_a_key():
    """Cloudflare-like tokens (40 of letters, digits, ``_`` and ``-``; seeded): some 5% were
    names by the rule of a 16-letter run of mixed case (sweep 44 A-S2), which took
    ``DeepSeekCoderV2Lite`` for a key; letters of jumbled case tell them apart now."""
    import random

    from tunedsl.keys import holds_a_key

    draw = random.Random(44)
    alphabet = string.ascii_letters + string.digits + "_-"
    tokens = ["".join(draw.choice(alphabet) for _ in range(40)) for _ in range(2000)]
    missed = [token for token in tokens if not holds_a_key(token)]
    assert len(missed) <= len(tokens) * 6 // 100, missed[:5]


def test_nearly_every_aws_secret_is_taken_for_a_key():
    """By its shape alone (no variable holds it): 40 characters of base 64 with a ``/`` or
    ``+``, unless three runs of five lower case letters make it read as a name of words
    (``NousResearch/NousHermes2Mixtral8x7BDPOab``), which some 0.7% of random ones hold."""
    from tunedsl.keys import holds_a_key

    secrets = _aws_secrets(2000)
    missed = [key for key in secrets if not holds_a_key(key)]
    assert len(missed) <= len(secrets) // 100, missed[:5]


def test_the_value_of_a_secret_s_variable_is_a_key_whatever_its_shape(monkeypatch):
    """A key of a shape no rule knows (``token-abc123def``) given as the name is refused
    when an environment variable named as a secret's holds it."""
    from tunedsl.evaluation.select import split_model

    assert split_model("token-abc123def") == ("token-abc123def", None)
    monkeypatch.setenv("MY_SERVICE_API_KEY", "token-abc123def")
    with pytest.raises(ConfigError) as caught:
        split_model("token-abc123def")
    assert "token-abc123def" not in str(caught.value)


@pytest.mark.parametrize("name", SERVED_NAMES)
def test_a_served_model_name_is_a_model_record_s_name(name):
    from tunedsl import Model

    assert Model(name, base_url="http://127.0.0.1:8000/v1").model_path == name


@pytest.mark.parametrize("said", [
    "unrecognized arguments: --modle deepseek-r1-distill-llama-70b-instruct-v2",
    "unrecognized arguments: extra_positional_for_my_experiment_2024 hf_model",
    "argument --concurrency: invalid int value: 'sk-lots'",
    "The model `Meta-Llama-3.1-70B-Instruct-Turbo` does not exist"])
def test_words_and_model_names_are_not_hidden_as_keys(said):
    """Quoting a usage error or an endpoint's words, names and words were shown as
    "<a key, not shown>" (sweep 43 A-W3)."""
    from tunedsl.keys import without_keys

    assert without_keys(said) == said


@pytest.mark.parametrize("given, said", [
    ("gpt-4o ", "--model 'gpt-4o ': the name has blank space or quotes around it, which no "
                "endpoint's model name has; give it without them, e.g. --model gpt-4o"),
    ("'gpt-4o'", "--model \"'gpt-4o'\": the name has blank space or quotes around it, which no "
                 "endpoint's model name has; give it without them, e.g. --model gpt-4o"),
    ("http://127.0.0.1:9/v1", "--model 'http://127.0.0.1:9/v1': that is a URL, not a model's "
                              "name; give NAME@URL, e.g. --model "
                              "Qwen/Qwen3-8B@http://127.0.0.1:9/v1"),
    # typographic quotes, backticks, guillemets, blank space around the URL (sweep 44 A)
    *[(quoted, f"--model {quoted!r}: the name has blank space or quotes around it, which no "
               "endpoint's model name has; give it without them, e.g. --model gpt-4o")
      for quoted in ("\u201cgpt-4o\u201d", "`gpt-4o`", "\u00abgpt-4o\u00bb")],
    *[(given, f"--model {given!r}: the URL after @ has blank space around it; give it without, "
              "e.g. --model m@http://127.0.0.1:9/v1")
      for given in ("m@http://127.0.0.1:9/v1 ", "m@ http://127.0.0.1:9/v1")],
    # an endpoint's address without its scheme (sweep 44 A-W1)
    *[(given, f"--model {given!r}: that is an endpoint's address, not a model's name; give "
              f"NAME@URL, e.g. --model Qwen/Qwen3-8B@http://{given}")
      for given in ("localhost:8000/v1", "127.0.0.1:8000", "api.example.com:443/v1")]])
def test_a_model_name_as_no_endpoint_serves_one_is_refused(given, said):
    """Sent as typed, every call was a 404, and a selection ranked one model twice beside
    itself (sweep 43 A-W12, A-W15)."""
    from tunedsl.evaluation.select import split_model

    with pytest.raises(ConfigError) as caught:
        split_model(given)
    assert str(caught.value) == said


@pytest.mark.parametrize("item, said", [
    ("g=http://127.0.0.1:9/v1, m", "the model's name has blank space or quotes around it, "
     "which no endpoint's model name has; give it without them, e.g. --aux "
     "g=http://127.0.0.1:9/v1,m"),
    ("g=http://127.0.0.1:9/v1,\u201cm\u201d", "the model's name has blank space or quotes "
     "around it, which no endpoint's model name has; give it without them, e.g. --aux "
     "g=http://127.0.0.1:9/v1,m"),
    ("g=http://127.0.0.1:9/v1,m@http://127.0.0.1:8/v1", "the model's name holds a URL; --aux "
     "takes the endpoint's URL before the comma and the model's name alone after it, e.g. "
     "--aux g=http://127.0.0.1:9/v1,m"),
    ("g=http://127.0.0.1:9/v1,http://127.0.0.1:8/v1", "the model's name holds a URL; --aux "
     "takes the endpoint's URL before the comma and the model's name alone after it, e.g. "
     "--aux g=http://127.0.0.1:9/v1,Qwen/Qwen3-8B"),
    # blank after @, around NAME or URL (sweep 45 A-W3, A-W4)
    ("g=http://127.0.0.1:9/v1,m@ http://127.0.0.1:8/v1", "the model's name holds a URL; --aux "
     "takes the endpoint's URL before the comma and the model's name alone after it, e.g. "
     "--aux g=http://127.0.0.1:9/v1,m"),
    *[(item, "blank space around its NAME or URL, which neither holds; give it without, e.g. "
             "--aux g=http://127.0.0.1:9/v1,m")
      for item in ("g = http://127.0.0.1:9/v1,m", "g=http://127.0.0.1:9/v1 ,m",
                   " g=http://127.0.0.1:9/v1,m")]])
def test_an_aux_model_name_no_endpoint_serves_is_refused(item, said):
    """Each was sent as typed, and every call answered "no such model", where ``--model``
    refused the same name (sweep 44 A, B-W1)."""
    from tunedsl.cli import _aux_items

    with pytest.raises(ConfigError) as caught:
        _aux_items([item])
    assert str(caught.value) == f"--aux {item!r}: {said}"


def test_an_aux_url_of_a_variable_with_a_default_holding_a_comma_is_read(monkeypatch):
    """``${env:VAR,default}``, the documented form, was refused as an item of two commas."""
    from tunedsl.cli import _aux_items

    monkeypatch.delenv("TUNEDSL_UNSET_JUDGE_URL", raising=False)
    assert _aux_items(["g=${env:TUNEDSL_UNSET_JUDGE_URL,http://127.0.0.1:9/v1},m"]) == {
        "g": ("http://127.0.0.1:9/v1", "m")}


def test_an_aux_item_of_two_commas_is_refused():
    """``--aux g=URL,m,extra`` sent every request to URL,m (sweep 43 A-W14)."""
    from tunedsl.cli import _aux_items

    with pytest.raises(ConfigError) as caught:
        _aux_items(["g=http://127.0.0.1:9/v1,m,extra"])
    assert str(caught.value) == (
        "--aux 'g=http://127.0.0.1:9/v1,m,extra': expected NAME=URL,MODEL, one comma (its URL "
        "would be 'http://127.0.0.1:9/v1,m'); e.g. --aux "
        "grader=http://localhost:8001/v1,Qwen/Qwen3-8B")


def test_a_secret_s_value_with_a_line_end_from_a_crlf_env_file_is_still_its_key(monkeypatch):
    """A CRLF .env leaves ``KEY\\r`` in the variable: the key given as the name was not its
    value, and was sent and written into the results (sweep 45 A-S1)."""
    from tunedsl.evaluation.select import split_model

    monkeypatch.setenv("MYAPI_KEY", "tok-shapeless1\r")
    with pytest.raises(ConfigError) as caught:
        split_model("tok-shapeless1@http://127.0.0.1:9/v1")
    assert "tok-shapeless1" not in str(caught.value)


@pytest.mark.parametrize("variable, value", [
    ("MYAPI_KEY", '"tok.abc-123.xyz"'), ("MYAPI_KEY", "'tok.abc-123.xyz'"),
    ("MY_PASSWD", "tok.abc-123.xyz"), ("DB_PASSPHRASE", "tok.abc-123.xyz"),
    # a password's other names (sweep 47 A-S1)
    *[(name, "tok.abc-123.xyz") for name in (
        "MY_PASS", "SMTP_PWD", "MYSQL_PWD", "PGPASSWORD", "REDIS_PASS", "LDAP_BIND_PW",
        "HF_AUTH", "SESSION_COOKIE")]])
def test_a_secret_s_value_in_quotes_or_a_password_s_is_still_its_key(monkeypatch, variable,
                                                                     value):
    """docker's --env-file keeps the quotes around a value, and a ``*_PASSWD`` is a secret's
    name too: the key given as the name was sent and written into the results (sweep 46
    A-S1)."""
    from tunedsl.evaluation.select import split_model

    monkeypatch.setenv(variable, value)
    with pytest.raises(ConfigError) as caught:
        split_model("tok.abc-123.xyz@http://127.0.0.1:9/v1")
    assert "tok.abc-123.xyz" not in str(caught.value)


def test_nearly_every_aws_secret_after_an_org_word_is_taken_for_a_key():
    """``bedrock/KEY``: the word's ``/`` kept the secret from its 40-character rule, and
    62% of random ones passed as names, sent and written into the results (sweep 46 A-S2);
    an error hides the key and keeps the word."""
    from tunedsl.keys import holds_a_key, without_keys

    secrets = _aws_secrets(2000)
    missed = [key for key in secrets if not holds_a_key(f"bedrock/{key}")]
    assert len(missed) <= len(secrets) // 100, missed[:5]
    shown = [without_keys(f"bedrock/{key}") for key in secrets if key not in missed]
    assert shown == ["bedrock/<a key, not shown>"] * len(shown)


def test_the_working_folder_s_variables_hold_no_secret(monkeypatch, tmp_path):
    """``PWD`` and ``OLDPWD`` end in a password's name, and hold the working folders: a
    model's path under them is no key."""
    from tunedsl.keys import holds_a_key, without_keys

    folder = str(tmp_path / "models" / "qwen3-finetuned")
    monkeypatch.setenv("PWD", folder)
    monkeypatch.setenv("OLDPWD", folder)
    assert not holds_a_key(f"{folder}/step-100")
    assert without_keys(f"{folder}/step-100") == f"{folder}/step-100"


#: Model names as hubs and providers spell them, dots, hex and all: none is a key, none is
#: hidden from an error quoting it (sweep 48 A-S4: the rules of a dot's pieces and a word's
#: hex digits must leave them be).
HUB_NAMES = ["Qwen/Qwen3-0.6B", "meta-llama/Llama-3.1-8B-Instruct", "gpt-4o-2024-08-06",
             "claude-3-5-sonnet-20241022", "deepseek-ai/DeepSeek-R1-Distill-Qwen-1.5B",
             "mistralai/Mixtral-8x7B-Instruct-v0.1",
             "accounts/fireworks/models/llama-v3p1-8b-instruct",
             "us.anthropic.claude-3-5-sonnet-20241022-v2:0",
             "ft:gpt-4o-mini-2024-07-18:org:name:abc123", "models/gemini-1.5-pro-002",
             "Qwen2.5-7B-Instruct.Q4_K_M.gguf", "llama3.1:8b-instruct-q4_0", "BAAI/bge-m3",
             "nvidia/Llama-3.1-Nemotron-70B-Instruct-HF", "meta.llama3-1-70b-instruct-v1:0",
             "eu.anthropic.claude-3-7-sonnet-20250219-v1:0", "amazon.nova-pro-v1:0",
             "hf.co/bartowski/Llama-3.2-3B-Instruct-GGUF:Q4_K_M",
             "Meta-Llama-3.1-8B-Instruct-abliterated.Q4_K_M.gguf",
             "nomic-ai/nomic-embed-text-v1.5", "cognitivecomputations/dolphin-2.9.4-llama3.1-8b",
             "HuggingFaceTB/SmolLM2-1.7B-Instruct", "ft:gpt-4o-2024-08-06:acme-corp:bot:AbC123xY",
             "user/Meta-Llama-3-8B-Instruct-my-demo-finetune-4224205a",
             "Qwen3-30B-A3B-Instruct-2507-FP8", "@cf/meta/llama-3.3-70b-instruct-fp8-fast",
             # an MLflow 3 model's id (m-, one letter), a digest's name (digits in its word),
             # a commit's hash after a word (40 hex digits)
             "models:/m-49e62ea546064bd1b56cff76a8aded2f",
             "sha256-6a0746a1ec1aef3e7ec53868f220ff6e389f6f8ef87a01d77c96807de94ca2aa",
             "rev-7ae557604adf67be50417f59c2c2f167def9a775",
             # Azure OpenAI's fine-tuned models (sweep 49 A-W3)
             "gpt-35-turbo-0613.ft-b044a9d3cf9c4228b5d393567f693b83",
             "gpt-4o-mini-2024-07-18.ft-0123456789abcdef0123456789abcdef",
             "gpt-35-turbo-1106.ft-5a4c7e9f0b1d2c3e4f5a6b7c8d9e0f1a",
             # more of them, a word and hex digits standing alone being a key again (sweep
             # 50 A-S2): a dotted base, an o-series', an older one's, upper case, a suffix
             "gpt-4o-2024-08-06.ft-9e107d9d372bb6826bd81d3542a419d6",
             "gpt-4.1-mini-2025-04-14.ft-e4d909c290d0fb1ca068ffaddf22cbd0",
             "o4-mini-2025-04-16.ft-0cc175b9c0f1b6a831c399e269772661",
             "babbage-002.ft-92eb5ffee6ae2fec3ad71c777531578f",
             "my-deployment.ft-4A8A08F09D37B73795649038408B5F33",
             "gpt-4o-2024-08-06.ft-8277e0910d750195b448797616e091ad-prod"]


@pytest.mark.parametrize("name", HUB_NAMES)
def test_a_hub_s_model_name_is_no_key_nor_hidden(name):
    from tunedsl import Model
    from tunedsl.evaluation.select import split_model
    from tunedsl.keys import without_keys

    assert split_model(name) == (name, None)
    assert split_model(f"{name}@http://127.0.0.1:8000/v1") == (name, "http://127.0.0.1:8000/v1")
    assert Model(name, base_url="http://127.0.0.1:8000/v1").model_path == name
    assert without_keys(f"The model `{name}` does not exist") == (
        f"The model `{name}` does not exist")


def _draw(alphabet: str, count: int, random) -> str:
    return "".join(random.choice(alphabet) for _ in range(count))


_ALNUM, _HEX = string.ascii_letters + string.digits, "0123456789abcdef"
#: Keys of shapes no prefix marks (sweep 48 A-S4): an id, a dot and a secret (Baseten's:
#: 8, 32), 20 and 20 around a dot, three pieces of a key (Chutes': cpk_HEX.HEX.ALNUM), a
#: short word and hex digits (rc_, DigitalOcean's dop_v1_, Mailgun's key-); a word, "-" and
#: hex digits (Firecrawl's fc-, any ab-), LangSmith's lsv2_pt_HEX_HEX and lsv2_sk_HEX_HEX,
#: Mailchimp's HEX-us6, its datacenter after it (sweep 50 A-S2); RunPod's rpa_ and 40 upper
#: case and digits, Hugging Face's org token api_org_ and 34 letters, Modal's ak- and 22
#: letters and digits (sweep 51 A-S3).
KEY_SHAPES = {
    "id.secret": lambda draw: _draw(_ALNUM, 8, draw) + "." + _draw(_ALNUM, 32, draw),
    "20.20": lambda draw: _draw(_ALNUM, 20, draw) + "." + _draw(_ALNUM, 20, draw),
    "cpk_": lambda draw: ("cpk_" + _draw(_HEX, 32, draw) + "." + _draw(_HEX, 32, draw) + "."
                          + _draw(_ALNUM, 32, draw)),
    "rc_": lambda draw: "rc_" + _draw(_HEX, 64, draw),
    "dop_v1_": lambda draw: "dop_v1_" + _draw(_HEX, 64, draw),
    "key-": lambda draw: "key-" + _draw(_HEX, 32, draw),
    "fc-": lambda draw: "fc-" + _draw(_HEX, 32, draw),
    "word-": lambda draw: (_draw(string.ascii_lowercase, draw.randint(2, 8), draw) + "-"
                           + _draw(_HEX, 32, draw)),
    "lsv2_pt_": lambda draw: "lsv2_pt_" + _draw(_HEX, 32, draw) + "_" + _draw(_HEX, 10, draw),
    "lsv2_sk_": lambda draw: "lsv2_sk_" + _draw(_HEX, 32, draw) + "_" + _draw(_HEX, 10, draw),
    "-us6": lambda draw: (_draw(_HEX, 32, draw) + "-" + draw.choice(("us", "eu", "ap"))
                          + str(draw.randint(1, 21))),
    "rpa_": lambda draw: "rpa_" + _draw(string.ascii_uppercase + string.digits, 40, draw),
    "api_org_": lambda draw: "api_org_" + _draw(string.ascii_letters, 34, draw),
    "ak-": lambda draw: "ak-" + _draw(_ALNUM, 22, draw),
    # Modal's token secret, Predibase's, Helicone's, Alibaba Cloud's AccessKey, Scaleway's,
    # E2B's (sweep 52 A-S9)
    "as-": lambda draw: "as-" + _draw(_ALNUM, 22, draw),
    "pb_": lambda draw: "pb_" + _draw(_ALNUM, 22, draw),
    "sk-helicone-": lambda draw: "sk-helicone-" + "-".join(
        _draw(string.ascii_lowercase + string.digits, 7, draw) for _ in range(4)),
    "LTAI": lambda draw: "LTAI" + _draw(_ALNUM, 20, draw),
    "SCW": lambda draw: "SCW" + _draw(string.ascii_uppercase + string.digits, 17, draw),
    "e2b_": lambda draw: "e2b_" + _draw(_HEX, 40, draw)}


def _keys_of_the_shape(shape: str, count: int) -> list[str]:
    import random

    draw = random.Random(48)
    return [KEY_SHAPES[shape](draw) for _ in range(count)]


@pytest.mark.parametrize("shape", KEY_SHAPES)
def test_nearly_every_key_of_a_shape_no_prefix_marks_is_taken_for_one(shape):
    """No variable named as a secret's held them, and each passed as a name, sent and written
    into the results: a dot kept every piece from the rules (the same 40 characters without
    it were refused), and hex digits were a key only alone (sweep 48 A-S4). Some 0.4% of
    the dotted ones have no piece random enough (no digit in 20 letters, say)."""
    from tunedsl.keys import holds_a_key, without_keys

    keys = _keys_of_the_shape(shape, 2000)
    missed = [key for key in keys if not holds_a_key(key)]
    assert len(missed) <= len(keys) // 100, missed[:5]
    shown = {without_keys(f"m@{key}") for key in keys if key not in missed}
    assert shown == {"m@<a key, not shown>"}


@given(st.sampled_from(["u7JztdBo.7P3nABUXMEjdApWWH1QfhZfXLUd3oCKv",
                        *(key for shape in KEY_SHAPES for key in _keys_of_the_shape(shape, 8))]),
       st.sampled_from(PASTED))
def test_a_key_of_a_shape_no_prefix_marks_given_as_a_model_name_is_refused_unshown(key,
                                                                                   pasted):
    _refused_unshown(key, pasted)


@pytest.mark.parametrize("name", [
    # plurals, a password's other words, names run together (sweep 48 A-S1)
    "API_KEYS", "HF_TOKENS", "OPENAI_SECRETS", "DB_CREDS", "DBPASS", "GITHUBTOKEN",
    "MINIO_SECRETKEY", "APP_PASSCODE", "AWSSECRETKEY", "ROOTPASSWD", "DB_CREDENTIALS",
    "MY_ACCESSKEY", "ADMINPASSCODE", "DBCREDS", "OPENAIAPIKEY", "HFTOKENS"])
def test_the_value_of_a_variable_named_as_secrets_or_run_together_is_a_key(monkeypatch, name):
    """A key of no known shape held by them was sent as the model's name and written into
    the results."""
    from tunedsl.evaluation.select import split_model

    monkeypatch.setenv(name, "tok.abc-123.xyz")
    with pytest.raises(ConfigError) as caught:
        split_model("tok.abc-123.xyz@http://127.0.0.1:9/v1")
    assert "tok.abc-123.xyz" not in str(caught.value)


@pytest.mark.parametrize("name", [
    "PWD", "OLDPWD", "PATH", "HOME", "XDG_CONFIG_HOME", "XDG_SESSION_DESKTOP", "MODEL_NAME",
    "OPENAI_MODEL", "HF_HUB_CACHE", "KEYMAP", "PASSTHROUGH",
    # words that end in "pass": a program asking for a password (its path), a proxy's list
    "GIT_ASKPASS", "SSH_ASKPASS", "SUDO_ASKPASS", "PROXY_BYPASS", "BYPASS", "COMPASS",
    "ENCOMPASS", "SURPASS", "TRESPASS", "OVERPASS", "UNDERPASS", "MULTIPASS", "KEEPASS",
    "TWOPASS"])
def test_the_value_of_an_ordinary_variable_is_no_key(monkeypatch, name):
    """A variable's name that only ends in a secret's letters (``GIT_ASKPASS``, ``BYPASS``)
    holds no secret: a model's name that is its value is sent."""
    from tunedsl.evaluation.select import split_model

    monkeypatch.setenv(name, "Qwen/Qwen3-0.6B")
    assert split_model("Qwen/Qwen3-0.6B@http://127.0.0.1:9/v1") == (
        "Qwen/Qwen3-0.6B", "http://127.0.0.1:9/v1")


#: The words of a secret's variable, as a word between "_" or after one run together.
SECRET_WORDS = ["API_KEY", "APIKEY", "TOKEN", "SECRET", "SECRET_KEY", "SECRETKEY", "PASSWORD",
                "PASSWD", "PASSPHRASE", "PASSCODE", "ACCESS_KEY", "CREDENTIAL"]


@given(NAMES.filter(lambda name: len(name) <= 30),
       st.sampled_from([*SECRET_WORDS, "CRED", "PASS", "PWD", "KEY", "PAT", "AUTH", "COOKIE"]),
       st.booleans())
def test_a_secret_s_word_after_a_name_names_a_secret_s_variable(name, word, plural):
    """``NAME_WORD`` and ``NAME_WORDS`` (sweep 48 A-S1)."""
    from unittest import mock

    from tunedsl.keys import holds_a_secret_of_the_environment

    variable = f"{name}_{word}{'S' if plural else ''}"
    with mock.patch.dict("os.environ", {variable: "tok.abc-123.xyz"}):
        assert holds_a_secret_of_the_environment("tok.abc-123.xyz")


@given(st.from_regex(r"\A[A-Z][A-Z0-9]{0,8}[0-9]\Z"), st.sampled_from(SECRET_WORDS),
       st.booleans())
def test_a_secret_s_word_run_together_with_a_name_names_a_secret_s_variable(name, word,
                                                                            plural):
    """``GITHUBTOKEN``, ``AWSSECRETKEY``, ``DB2PASSWORDS`` (sweep 48 A-S1); a name ending in a
    digit, so that no word of it ends in "pass" (``BYPASS``, which the rule leaves)."""
    from unittest import mock

    from tunedsl.keys import holds_a_secret_of_the_environment

    variable = f"{name}{word}{'S' if plural else ''}"
    with mock.patch.dict("os.environ", {variable: "tok.abc-123.xyz"}):
        assert holds_a_secret_of_the_environment("tok.abc-123.xyz")
