"""The prompt-tuning guide's walk-through (docs/guides/prompt-tuning.md), command for command: the math agent from a weak
prompt to a better one with only an API key, then `view` and `eval` with the result.

The commands are read from the guide itself and run against one loopback endpoint (real HTTP,
the OpenAI protocol, a key required) that serves both models, as a provider does: the task
model answers the example's questions chattily ("It is 11132, I am 95% sure.": the judge
reads 95) unless the system prompt asks for the final ``Answer:`` line, and the reflection
model, shown a rollout that scored 0, proposes a prompt that does."""

from __future__ import annotations

import json

import re
import shlex
import sys

from .cli_support import REPO, cli
from .openai_server import OpenAIServer

GUIDE = REPO / "docs" / "guides" / "prompt-tuning.md"

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover
    import tomli as tomllib

PROVIDER = "https://api.openai.com/v1"
KEY = "sk-walkthrough"
PROPOSED = ("Solve the arithmetic question. End with the final number on its own line as "
            "'Answer: <number>'.")
OPERATIONS = {"plus": lambda a, b: a + b, "minus": lambda a, b: a - b,
              "times": lambda a, b: a * b}


def provider(messages):
    """The task model and the reflection model behind one URL, told apart by what they are
    asked (the probe, a reflection prompt showing rewards, or an example's question)."""
    text = str(messages[-1]["content"])
    if text == "Reply with: ok":
        return "ok"
    if "Feedback" in text:  # a reflection prompt: rollouts with their rewards
        return f"```\n{PROPOSED}\n```" if "Reward 0" in text else "```\nKeep it.\n```"
    a, operation, b = re.fullmatch(r"What is (-?\d+) (plus|minus|times) (-?\d+)\?", text).groups()
    answer = OPERATIONS[operation](int(a), int(b))
    system = next((m["content"] for m in messages if m["role"] == "system"), "")
    if "Answer:" in system:
        return f"{a} {operation} {b} is {answer}.\nAnswer: {answer}"
    return f"It is {answer}, I am 95% sure."


def readme_commands() -> list[list[str]]:
    """The walk-through's commands as the guide shows them: the argument lists after
    ``python -m tunedsl``, the ``export`` left to the test's environment."""
    text = GUIDE.read_text()
    block = text.split("tests/test_prompt_tuning_walkthrough.py runs these", 1)[1]
    block = block.split("```bash\n", 1)[1].split("```", 1)[0]
    commands = []
    for line in block.replace("\\\n", " ").splitlines():
        words = shlex.split(line, comments=True)
        if words and words[0] != "export":
            assert words[:3] == ["python", "-m", "tunedsl"], line
            commands.append(words[3:])
    return commands


def test_the_readme_walkthrough_tunes_the_math_agents_prompt(tmp_path, monkeypatch):
    tune, view, evaluate = readme_commands()
    monkeypatch.setenv("OPENAI_API_KEY", KEY)
    with OpenAIServer(provider, api_key=KEY) as server:
        def run(words):
            return cli(*[server.base_url if word == PROVIDER else word for word in words],
                       "--no-progress" if words[0] != "view" else "--no-browser",
                       cwd=tmp_path)

        tuned = run(tune)
        assert tuned.returncode == 0, tuned.stderr
        lines = tuned.stdout.splitlines()
        ran = re.fullmatch(r"candidates   prompts/math\.jsonl \(2 scored; (\d+) rollouts run, "
                           r"0 from the file, 0 failed\)", lines[0])
        assert ran and int(ran[1]) <= 120  # the budget holds
        assert lines[1:] == ["validation   start 0.0000 -> best 1.0000 (16 tasks)",
                             "settings     prompts/math.toml (apply with --settings "
                             "prompts/math.toml)", "best system_prompt:", f"    {PROPOSED}"]
        assert "```text\n" + tuned.stdout + "```" in GUIDE.read_text()
        best = tomllib.loads((tmp_path / "prompts" / "math.toml").read_text())
        assert best == {"params": {"system_prompt": PROPOSED}}

        shown = run([*view, "--out", "page.html"])
        assert shown.returncode == 0, shown.stderr
        page = (tmp_path / "page.html").read_text()
        embedded = page.split('<script id="tunedsl-data" type="application/json">')[1]
        data = json.dumps(json.loads(embedded.split("</script>")[0]), ensure_ascii=False)
        assert PROPOSED in data  # the tuned prompt's rollouts
        assert "I am 95% sure" in data  # the start's rollouts, with the tuned one's

        evaluated = run(evaluate)
        assert evaluated.returncode == 0, evaluated.stderr
        assert "reward       mean 1.0000" in evaluated.stdout
    # The endpoint answered only requests with the key (401 otherwise), read from the
    # environment; the eval kept tunedsl.toml's settings beside the tuned text: its
    # max_tokens (4096) reached the endpoint.
    last = server.requests[-1]
    assert last["messages"][0] == {"role": "system", "content": PROPOSED}
    assert last["max_tokens"] == 4096
