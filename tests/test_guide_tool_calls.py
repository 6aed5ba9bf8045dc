"""The unit-testing guide's example of a scripted tool call runs as written: the code block
is read from docs/guides/unit-testing.md and its test function called, so the example cannot go stale (it had to be read in
the source: issue 33's porting friction)."""

from __future__ import annotations

import re
from pathlib import Path

GUIDE = Path(__file__).resolve().parents[1] / "docs" / "guides" / "unit-testing.md"


def test_the_guides_tool_call_example_passes():
    blocks = re.findall(r"```python\n(.*?)```", GUIDE.read_text(encoding="utf-8"), re.S)
    [block] = [block for block in blocks if "ToolCall(" in block]
    namespace: dict = {"__name__": "readme_tool_calls"}
    exec(compile(block, str(GUIDE), "exec"), namespace)  # noqa: S102 - the guide's own code
    namespace["test_the_agent_uses_the_tool"]()
