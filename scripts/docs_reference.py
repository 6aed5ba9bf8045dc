"""Write the documentation site's generated references from the code: the settings table
(``docs/reference/settings.md``) and every command's ``--help`` (``docs/reference/commands.md``).

Run it after changing a setting or an option (``tests/test_docs.py`` fails until the files
match): ``.venv/bin/python scripts/docs_reference.py``.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
REFERENCE = ROOT / "docs" / "reference"


def pages() -> dict[Path, str]:
    """Each generated page's path and text."""
    sys.path.insert(0, str(ROOT))
    from tunedsl.cli import build_parser
    from tunedsl.dsl.settings_table import markdown_table

    settings = ("# Settings\n\nEvery setting of an experiment: its default, where it goes in "
                "the Trinity-RFT config, and what it does. Set each on the `@experiment` "
                "class, in `tunedsl.toml` (or `[tool.tunedsl]`), or with "
                "`--set key=value`, each layer over the one before.\n\n" + markdown_table())
    parser = build_parser()
    commands = next(action for action in parser._actions if action.dest == "command")
    parts = ["# Commands\n\nEvery command of `python -m tunedsl`, as its `--help` shows it.\n"]
    columns = os.environ.get("COLUMNS")
    os.environ["COLUMNS"] = "100"  # argparse wraps to the terminal: one width for all
    try:
        for name, command in commands.choices.items():
            parts.append(f"## {name}\n\n```text\n{command.format_help().rstrip()}\n```\n")
    finally:
        if columns is None:
            del os.environ["COLUMNS"]
        else:
            os.environ["COLUMNS"] = columns
    return {REFERENCE / "settings.md": settings, REFERENCE / "commands.md": "\n".join(parts)}


def main() -> int:
    for path, text in pages().items():
        changed = not path.exists() or path.read_text(encoding="utf-8") != text
        path.write_text(text, encoding="utf-8")
        print(f"{path.relative_to(ROOT)}: {'updated' if changed else 'already current'}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
