"""API keys: text given where an environment variable's name belongs that is most likely
the key itself, which tunedsl never shows again (in an error, a config or a report)."""

from __future__ import annotations

import re

#: How API keys and tokens begin (OpenAI's and others', Hugging Face's, GitHub's, AWS's,
#: Google's, Slack's, GitLab's, Groq's, Perplexity's, Cerebras's, Fireworks', NVIDIA's,
#: Replicate's).
_KEY_PREFIXES = ("sk-", "sk_", "hf_", "ghp_", "gho_", "ghs_", "ghu_", "github_pat_", "xai-",
                 "AKIA", "ASIA", "AIza", "xoxb-", "xoxp-", "glpat-", "gsk_", "pplx-", "csk-",
                 "fw_", "nvapi-", "r8_", "pk-")


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


def is_a_key_itself(text: str) -> bool:
    """Whether ``text``, given where a model's name or a URL's path segment belongs, is an
    API key: a token's prefix followed by 16 or more characters of a token, or 32 or more
    letters and digits with upper case, lower case and digits mixed and nothing between
    them. Narrower than `looks_like_a_key`: models are named like ``Meta-Llama-3.1-70B-
    Instruct-Turbo`` or ``gemini-2.0-flash-thinking-exp-01-21``, long, lower case and
    digits, which a variable's name never is."""
    prefix = next((p for p in _KEY_PREFIXES if text.startswith(p)), None)
    if prefix is not None:
        return bool(_KEY_TAIL.fullmatch(text[len(prefix):]))
    return bool(len(text) >= 32 and text.isalnum() and text.isascii()
                and any(c.islower() for c in text) and any(c.isupper() for c in text)
                and any(c.isdigit() for c in text))


#: What follows a key's prefix: a token's characters, 16 or more (AWS's key ids have 16).
_KEY_TAIL = re.compile(r"[A-Za-z0-9_\-]{16,}")


#: A run of text a key is made of (between the marks around it: ``[``, ``"``, ``/``).
_TOKEN = re.compile(r"[A-Za-z0-9_\-]+")


def without_keys(text: str) -> str:
    """``text`` with each run of it that looks like a key (`looks_like_a_key`) left out, as
    an error quoting what was given shows it."""
    return _TOKEN.sub(lambda found: "<a key, not shown>" if looks_like_a_key(found[0])
                      and not found[0].isdigit() else found[0], text)  # (a number is none)
