"""Rewrite README.md's settings table from the settings table in the code.

Run it after adding or changing a setting (``tests/test_settings_table.py`` fails until
README's copy matches): ``.venv/bin/python scripts/update_settings_table.py``.
"""

from __future__ import annotations

import re
import sys
from pathlib import Path

README = Path(__file__).resolve().parents[1] / "README.md"
BLOCK = re.compile(r"(<!-- settings-table: start -->\n).*?(<!-- settings-table: end -->)", re.S)


def main() -> int:
    sys.path.insert(0, str(README.parent))
    from tunedsl.dsl.settings_table import markdown_table

    text = README.read_text(encoding="utf-8")
    if not BLOCK.search(text):
        print(f"{README}: no settings-table markers found", file=sys.stderr)
        return 1
    updated = BLOCK.sub(lambda match: match.group(1) + markdown_table() + match.group(2), text)
    README.write_text(updated, encoding="utf-8")
    print(f"{README}: settings table {'updated' if updated != text else 'already current'}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
