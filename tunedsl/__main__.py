"""``python -m tunedsl``: hand over to the CLI."""

import sys

try:
    from .cli import entry
except KeyboardInterrupt:  # Ctrl-C while tunedsl itself is being imported: nothing began
    print("Error: interrupted", file=sys.stderr)
    raise SystemExit(130) from None

raise SystemExit(entry())
