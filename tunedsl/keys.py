"""API keys: text given where an environment variable's name belongs that is most likely
the key itself, which tunedsl never shows again (in an error, a config or a report)."""

from __future__ import annotations

import os
import re

#: How API keys and tokens begin (OpenAI's and others', Hugging Face's, GitHub's, AWS's,
#: Google's, Slack's, GitLab's, Groq's, Perplexity's, Cerebras's, Fireworks', NVIDIA's,
#: Replicate's, RunPod's, Hugging Face's organisations', Modal's, Predibase's, Alibaba
#: Cloud's, Scaleway's, E2B's).
_KEY_PREFIXES = ("sk-", "sk_", "hf_", "ghp_", "gho_", "ghs_", "ghu_", "github_pat_", "xai-",
                 "AKIA", "ASIA", "AIza", "xoxb-", "xoxp-", "glpat-", "gsk_", "pplx-", "csk-",
                 "fw_", "nvapi-", "r8_", "pk-", "tgp_", "dapi", "ya29.", "esecret_",
                 "secret_", "pa-", "ALTAK-", "bce-v3", "rpa_", "api_org_", "ak-", "as-",
                 "pb_", "LTAI", "SCW", "e2b_")
#: Helicone's keys: four groups of seven lower-case letters and digits after its name.
_HELICONE = re.compile(r"sk-helicone-(?:[a-z0-9]{7}-){3}[a-z0-9]{7}")


def looks_like_a_key(text: str) -> bool:
    """Whether ``text``, given where an environment variable's name belongs, is most likely
    the key itself: a token's prefix, a ``NAME=value``, over 64 characters, 32 or more of
    lower case and digits mixed (random tokens are so, variables' names are not), or 24
    or more of upper case, lower case and digits with no ``_`` between words (Mistral's
    and DeepInfra's keys)."""
    lower, digit = any(c.islower() for c in text), any(c.isdigit() for c in text)
    return (text.startswith(_KEY_PREFIXES) or "=" in text or len(text) > 64
            or (len(text) >= 32 and lower and digit)
            or (len(text) >= 24 and lower and digit and any(c.isupper() for c in text)
                and "_" not in text))


def is_a_key_itself(text: str, *, hex_keys: bool = False) -> bool:
    """Whether ``text``, given where a model's name or a URL's path segment belongs, is an
    API key: a token's prefix followed by 16 or more characters of a token that hold a run
    of 12 or more letters and digits random-looking (digits or capitals in it: no word) or
    of 24 or more, a JSON Web Token (``eyJ...``), or 32 or more letters and digits, both,
    with nothing between them (a name parts its words); with ``hex_keys``, also 32 or more hex
    digits (Azure's and Together's keys; a URL's path may hold an account's hex id; 40 are
    a revision's hash, as in a hub cache's ``snapshots/`` folder); a short word and 32 or
    more hex digits (`_WORD_AND_HEX`: ``dop_v1_HEX``, ``fc-HEX``, ``HEX-us6``); pieces
    around dots one of which is a key or a random run of 16 or more (Baseten's
    ``ID.SECRET``, Chutes' ``cpk_HEX.HEX.SECRET``; a name's pieces are words and numbers:
    ``Qwen2.5-7B.Q4_K_M``; an Azure fine-tuned model's ``.ft-HEX`` after its base's name).
    Narrower than `looks_like_a_key`: models are named like ``pplx-codellama-34b-instruct``,
    ``hf_tiny_random_llama`` or ``gemini-2.0-flash-thinking-exp-01-21``, words after what
    may look like a prefix."""
    if _HELICONE.fullmatch(text):  # (its groups are too short for a random run: sweep 52)
        return True
    prefix = next((p for p in _KEY_PREFIXES if text.startswith(p)), None)
    if prefix is not None:
        tail = text[len(prefix):]
        # (a run of 24 letters or more no word is: SiliconFlow's sk- and 48 lower case)
        return bool(_KEY_TAIL.fullmatch(tail)) and any(_random(run) or len(run) >= 24
                                                        for run in _RUN.findall(tail))
    if text.startswith("eyJ") and len(text) >= 30:  # a JWT's header, base64 of '{"'
        return True
    if _ID_SECRET.fullmatch(text):  # (Zhipu's: an id, a dot, a secret)
        return True
    if hex_keys and _HEX_KEY.fullmatch(text) and not text.isdigit() and len(text) != 40:
        return True  # (40 hex digits: a commit's or a hub revision's hash, a snapshot's name)
    if _a_word_and_hex_digits(text):  # (dop_v1_HEX, rc_HEX, fc-HEX, lsv2_pt_, HEX-us6)
        return True
    if len(text) < 32 or not text.isascii() or _HEX_KEY.fullmatch(text) \
            or len(set(text)) < 12:  # (a random token of 32 holds some 20 characters)
        return False  # (hex digits within a name: a version's, a run's id; see above)
    if text.isalnum():  # letters and digits, 32 or more with no mark between words: no name
        return any(c.isdigit() for c in text) and any(c.isalpha() for c in text)
    if "." in text:  # an id, a dot, a secret (Baseten's), or pieces of a token (Chutes')
        base, _, last = text.rpartition(".")
        pieces = text.split(".")
        if _AZURE_FINE_TUNED.fullmatch(last) and _AZURE_BASE.fullmatch(base):
            pieces.pop()  # (an Azure fine-tuned model's ft-HEX: its base's pieces are looked at)
        return bool(_KEY_TAIL.fullmatch(text)) and any(
            len(piece) >= 16 and (is_a_key_itself(piece) or _a_random_run(piece))
            for piece in pieces)
    # a token of a token's characters with a long run of upper and lower case and digits
    # mixed, or whose letters change case as often as random ones do (Cloudflare's API
    # tokens; a name's words and numbers make shorter runs, and change case at a word's
    # start: a quarter of its letters at most)
    return bool(_KEY_TAIL.fullmatch(text) and len(set(text)) >= 16
                and (_a_random_run(text)
                     or (sum(c.isdigit() for c in text) >= 2
                         and len(_JUMBLED.findall(text)) >= 3)))


def _a_random_run(text: str) -> bool:
    """Whether ``text`` holds a run of 16 or more letters and digits of a random token's
    look: upper and lower case and digits mixed, letters of jumbled case (`_JUMBLED`) or a
    fifth of it digits. A name's CamelCase words and numbers hardly make one
    (``NousHermes2Mixtral8x7BDPO``: no jumbled case, three digits in 25)."""
    return any(len(run) >= 16 and any(c.isupper() for c in run)
               and any(c.islower() for c in run) and any(c.isdigit() for c in run)
               and (_JUMBLED.search(run) is not None
                    or sum(c.isdigit() for c in run) >= len(run) / 5)
               for run in _RUN.findall(text))


#: A short word and 32 or more hex digits: keys a service marks with its word (DigitalOcean's
#: ``dop_v1_``, Mailgun's ``key-``, Firecrawl's ``fc-``): ``[a-z]{1,6}_`` with a version's
#: ``v1_`` maybe, or a word of two letters or more and ``-`` (not a digest's ``sha256-``, an
#: MLflow 3 model's ``m-``); LangSmith's ``lsv2_pt_HEX_HEX`` (``lsv2_sk_``); Mailchimp's
#: ``HEX-us6``, its datacenter after it (sweep 50 A-S2). The whole text: an Azure OpenAI
#: fine-tuned model's ``gpt-35-turbo-0613.ft-HEX`` is a name (`_AZURE_FINE_TUNED`).
_WORD_AND_HEX = re.compile(r"(?:[a-z]{1,6}_(?:v\d_)?|([a-z]{2,}-))([0-9a-fA-F]{32,})"
                           r"|lsv2_(?:pt|sk)_([0-9a-f]{32})_[0-9a-f]{10}"
                           r"|([0-9a-f]{32})-[a-z]{2}\d{1,2}")
#: The piece after a dot an Azure OpenAI fine-tuned model's name ends with, after its base
#: model's (``gpt-35-turbo-0613.ft-HEX``, ``gpt-4.1-mini-2025-04-14.ft-HEX``; sweep 49 A-W3),
#: which `_WORD_AND_HEX` alone would take for a key.
_AZURE_FINE_TUNED = re.compile(r"ft-[0-9a-fA-F]{32}")
#: An Azure OpenAI base model's name (or a deployment's) before its ``.ft-HEX``.
_AZURE_BASE = re.compile(r"[A-Za-z][A-Za-z0-9]*(?:[-.][A-Za-z0-9]+)*")


def _a_word_and_hex_digits(text: str) -> bool:
    """Whether ``text`` is a `_WORD_AND_HEX` key: hex digits of both digits and letters, as
    random ones are (``build-2024...``: a date, no key), and after a ``word-`` not 40 of them
    (a commit's hash named: ``rev-HEX``)."""
    found = _WORD_AND_HEX.fullmatch(text)
    if found is None:
        return False
    dashed, digits = found.group(1), found.group(2) or found.group(3) or found.group(4)
    return (any(c.isdigit() for c in digits) and any(c.isalpha() for c in digits)
            and not (dashed and len(digits) == 40))


#: One or two lower case letters between capitals ("AbC"), or two capitals between lower
#: case ones ("xKQy"): random text holds several in 40 characters; a name's CamelCase words
#: (a capital, then three letters or more: DeepSeekCoder) hardly any (DeepSeekMoE's one).
_JUMBLED = re.compile(r"(?<=[A-Z])[a-z]{1,2}(?=[A-Z])|(?<=[a-z])[A-Z]{2}(?=[a-z])")


def _random(run: str) -> bool:
    """Whether a run of letters and digits looks random, not a word: digits among letters,
    or capitals past its first character among lower case."""
    digits, letters = any(c.isdigit() for c in run), any(c.isalpha() for c in run)
    return (digits and letters) or (not run[1:].islower() and not run.isupper()
                                    and not run.isdigit())


def holds_a_key(name: str) -> bool:
    """Whether a model's name (as given to ``--model``, ``--aux`` or ``--reflection-model``)
    holds an API key anywhere: the value of an environment variable named as a secret's
    (`holds_a_secret_of_the_environment`), whatever its shape; or a key by its shape
    (`is_a_key_itself`, an AWS secret's), alone, quoted, after ``Bearer``, in an
    ``org/KEY``, ``NAME@KEY`` or ``VAR=KEY``. A served folder's path is no key, nor hex
    digits that name a version within a name (a Replicate model's ``owner/name:HEX``, an
    MLflow ``runs:/HEX/model``): Azure's and Together's hex keys are keys given alone."""
    if holds_a_secret_of_the_environment(name):
        return True
    if os.path.exists(name):
        return False
    if any(map(_aws_secret, _AWS_SECRET.findall(name))):  # (its / may begin it: no path)
        return True
    if _aws_secrets_after_a_word(name):  # bedrock/KEY (its / hid it from _AWS_SECRET)
        return True
    if name.strip().startswith(("/", "~", "./", "../")):
        return False
    parts = [part for part in _NAME_PARTS.split(name) if part]
    alone = [part for part in parts if part != "Bearer"]
    return any(is_a_key_itself(part, hex_keys=len(alone) == 1) for part in parts)


#: Environment variables' names that hold a secret: a key, a token, a password, as a word
#: between ``_`` (a plural too: ``API_KEYS``, ``HF_TOKENS``, ``DB_CREDS``), or run
#: together with the word before it at the name's end (``GITHUBTOKEN``, ``DBPASS``,
#: ``AWSSECRETKEY``; not ``KEY``: ``HOTKEY``, ``MONKEY``); not words that end in "pass"
#: (``GIT_ASKPASS``, a program's path; ``PROXY_BYPASS``, ``COMPASS``).
_SECRET_VARIABLE = re.compile(
    r"(^|_)(API_?KEY|KEY|TOKEN|SECRET|SECRET_?KEY|PASSWORD|PASSWD|PASSPHRASE|PASSCODE|PASS|"
    r"PWD|PW|PAT|ACCESS_?KEY|CREDENTIAL|CREDS?|AUTH|COOKIE)S?(_|$)"
    r"|(API_?KEY|ACCESS_?KEY|TOKEN|SECRET|SECRET_?KEY|PASSWORD|PASSWD|PASSPHRASE|PASSCODE|"
    r"CREDENTIAL)S?$|CREDS$"
    r"|(?<!ASK)(?<!BY)(?<!COM)(?<!SUR)(?<!TRES)(?<!OVER)(?<!UNDER)(?<!MULTI)(?<!KEE)"
    r"(?<!ONE)(?<!TWO)(?<!SINGLE)PASS$")
#: Variables of those names that hold no secret: the shell's working folders.
_NOT_SECRET_VARIABLES = frozenset({"PWD", "OLDPWD"})


def names_a_secret(variable: str) -> bool:
    """Whether an environment variable's name says it holds a secret (``OPENAI_API_KEY``,
    ``HF_TOKEN``; not ``PWD``, the working folder)."""
    return bool(_SECRET_VARIABLE.search(variable.upper())) and \
        variable.upper() not in _NOT_SECRET_VARIABLES


def holds_a_secret_of_the_environment(text: str) -> bool:
    """Whether ``text`` holds the value (12 characters or more) of an environment variable
    whose name says it holds a secret (``OPENAI_API_KEY``, ``HF_TOKEN``,
    ``AWS_SECRET_ACCESS_KEY``): a key of a shape no rule knows, pasted where a name goes."""
    return any(value in text for value in _secrets_of_the_environment())


def _secrets_of_the_environment() -> list[str]:
    """The values (12 characters or more, without the blank space around them: a CRLF
    .env's \\r; and without the quotes around them, which docker's --env-file keeps) of
    the environment variables named as a secret's, longest first."""
    values = set()
    for variable, value in os.environ.items():
        if names_a_secret(variable):
            values |= {value.strip(), value.strip().strip("\"'").strip()}
    return sorted((value for value in values if len(value) >= 12), key=len, reverse=True)


def _aws_secret(text: str) -> bool:
    """Whether 40 characters of base 64 (`_AWS_SECRET`) are an AWS secret access key: a
    ``/`` or ``+`` among upper and lower case and digits (without them, the rules of
    `is_a_key_itself` apply), some 20 characters of its alphabet or more, no part between
    its ``/``, and not a path or a name of words: no letters of jumbled case (`_JUMBLED`,
    which 98% of random keys hold) and two ``/`` or two runs of five lower case letters
    (``/home/alice/ckpts/Qwen3/8B/step1000``, ``Org/ModelName2B``)."""
    if not ("/" in text or "+" in text) or len(set(text)) < 20:
        return False
    if _JUMBLED.search(text) is None and (text.count("/") >= 2
                                          or len(re.findall("[a-z]{5,}", text)) >= 2):
        return False  # (a path's or a name's words, no letters of jumbled case among them)
    return (any(c.isupper() for c in text) and any(c.islower() for c in text)
            and any(c.isdigit() for c in text))


#: What follows a key's prefix: a token's characters, 16 or more (AWS's key ids have 16).
_KEY_TAIL = re.compile(r"[A-Za-z0-9_\-.]{16,}")
#: A run of 12 or more letters and digits, as a random token's tail holds.
_RUN = re.compile(r"[A-Za-z0-9]{12,}")
_HEX_KEY = re.compile(r"[0-9a-fA-F]{32,}")
_ID_SECRET = re.compile(r"[0-9a-f]{32}\.[A-Za-z0-9]{16}")
#: What parts a name into the pieces a key may be one of.
_NAME_PARTS = re.compile(r"[\s\"'`@/:,=;]+")


#: An AWS secret access key's shape: 40 characters of base 64, nothing of a token's around.
_AWS_SECRET = re.compile(r"(?<![A-Za-z0-9+/_\-.])[A-Za-z0-9+/]{40}(?![A-Za-z0-9+/_\-.=])")
#: A JSON Web Token: its header (base64 of '{"'), payload and signature.
_JWT = re.compile(r"eyJ[A-Za-z0-9_\-]+\.[A-Za-z0-9_\-]+(\.[A-Za-z0-9_\-]*)?")
#: A run of text a key is made of (between the marks around it: ``[``, ``"``, ``/``).
_TOKEN = re.compile(r"[A-Za-z0-9_\-.]+")


def _aws_secrets_after_a_word(text: str) -> list[str]:
    """The AWS secrets (`_aws_secret`) that follow a word and its ``/`` (``bedrock/KEY``)
    and end the text or a part of it: `_AWS_SECRET` takes none after a ``/``, since a key's
    own ``/`` would then cut another's 40 characters out of a path."""
    found = []
    for start in (index + 1 for index, mark in enumerate(text) if mark == "/"):
        candidate = text[start:start + 40]
        after = text[start + 40:start + 41]
        if len(candidate) == 40 and after in ("", "@", ":", " ", "\"", "'") and \
                _PATH_WORD.fullmatch(text[:start - 1].rsplit("/", 1)[-1].lower()) and \
                _AWS_SECRET.fullmatch(candidate) and _aws_secret(candidate):
            found.append(candidate)
    return found


def _a_key_and_a_path(text: str) -> bool:
    """Whether ``text`` is a key by itself among the words of a path (``KEY/v1``,
    ``org/KEY``), which `_TOKEN` hides alone, keeping the path; not a key whose ``/``
    begins it (``/KEY``: no path to keep)."""
    parts = text.split("/")
    keys = [part for part in parts if is_a_key_itself(part, hex_keys=True)]
    return len(keys) == 1 and len(parts) > 1 and all(
        _PATH_WORD.fullmatch(part) for part in parts if part != keys[0])


#: A word of a path or of an ``org/name`` around a key (``v1``, ``org``, ``openai``).
_PATH_WORD = re.compile(r"[a-z][a-z0-9_-]{1,30}")


def without_keys(text: str) -> str:
    """``text`` with each run of it that is a key left out, as an error quoting what was
    given shows it: by its shape (`is_a_key_itself`, hex digits too, an AWS secret's), or
    the value of a secret's environment variable (`holds_a_secret_of_the_environment`),
    whatever its shape. Not the broader
    `looks_like_a_key`, which hid model names and plain words (``--modle
    deepseek-r1-distill-llama-70b-instruct-v2``, a stray ``hf_model``)."""
    text = _JWT.sub("<a key, not shown>", text)  # (parted by dots, which no other key holds)
    for value in _secrets_of_the_environment():  # a key of any shape, by its value
        text = text.replace(value, "<a key, not shown>")
    # (holding / and +, which _TOKEN does not; a key among a path's words, KEY/v1 or
    # org/KEY, is left to _TOKEN, which hides the key and keeps the path)
    text = _AWS_SECRET.sub(lambda found: "<a key, not shown>" if _aws_secret(found[0])
                           and not _a_key_and_a_path(found[0]) else found[0], text)
    for secret in _aws_secrets_after_a_word(text):  # (bedrock/KEY: the word is kept)
        text = text.replace(secret, "<a key, not shown>")
    return _TOKEN.sub(lambda found: "<a key, not shown>"
                      if is_a_key_itself(found[0].rstrip("."), hex_keys=True) else found[0],
                      text)
