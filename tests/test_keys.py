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
    st.builds(lambda prefix, text: prefix + text, st.sampled_from(_KEY_PREFIXES), _TOKEN_TEXT),
    st.builds(lambda text: "aB1" + text,
              st.text(string.ascii_letters + string.digits, min_size=29, max_size=60)))
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
