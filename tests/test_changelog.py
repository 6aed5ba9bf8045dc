"""CHANGELOG.md stays a Keep a Changelog file a person reads: a scripted edit once wrote
its entry between every character (2.4 million lines) and every test still passed."""

from __future__ import annotations

import re
from pathlib import Path

CHANGELOG = Path(__file__).resolve().parents[1] / "CHANGELOG.md"
SECTIONS = {"Added", "Changed", "Deprecated", "Removed", "Fixed", "Security"}


def test_the_changelog_is_keep_a_changelog_and_of_a_readable_size():
    text = CHANGELOG.read_text(encoding="utf-8")
    lines = text.splitlines()
    assert lines[0] == "# Changelog" and "## [Unreleased]" in lines
    assert len(text) < 1_000_000 and max(map(len, lines)) <= 160
    kinds = set(re.findall(r"^### (\w+)$", text, re.MULTILINE))
    assert kinds and kinds <= SECTIONS, kinds
    unreleased = text.split("## [Unreleased]", 1)[1].split("\n## [", 1)[0]
    headings = re.findall(r"^### (\w+)$", unreleased, re.MULTILINE)
    assert len(headings) == len(set(headings)), headings  # each section once
