"""``python -m tunedsl``: hand over to the CLI."""

import os
import sys

try:
    from .config.importer import check_no_shadowing  # (imported with tunedsl already)
    from .errors import ExperimentImportError

    try:
        # Python put the working folder first on the import path: a module there named like
        # one tunedsl imports later (random.py, json.py) would be imported in its place.
        check_no_shadowing(os.path.abspath(sys.path[0] or os.curdir))
    except ExperimentImportError as error:
        print(f"Error: {error}", file=sys.stderr)
        raise SystemExit(2) from None
    from .cli import entry
except KeyboardInterrupt:  # Ctrl-C while tunedsl itself is being imported: nothing began
    print("Error: interrupted", file=sys.stderr)
    raise SystemExit(130) from None

raise SystemExit(entry())
