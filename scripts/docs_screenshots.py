"""Render pages of the documentation site in a real browser (Debian's Chromium, through
Playwright, as ``tests/test_view_browser.py`` does) and save them as PNG files:
``.venv/bin/python scripts/docs_screenshots.py [OUT_DIR]`` (default
``screenshots/``, git-ignored). It builds the site strictly into a temporary folder and
serves it on a loopback port while the browser reads it.
"""

from __future__ import annotations

import functools
import http.server
import shutil
import subprocess
import sys
import tempfile
import threading
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
#: File name -> the page's path in the site.
PAGES = {"first-experiment.png": "getting-started/first-experiment/",
         "error-catalogue.png": "reference/error-catalogue/",
         "metrics.png": "reference/metrics/"}


class _Quiet(http.server.SimpleHTTPRequestHandler):
    def log_message(self, format: str, *args: object) -> None:  # noqa: A002 - the base's name
        """No line per request."""


def main() -> int:
    from playwright.sync_api import sync_playwright

    out = Path(sys.argv[1]) if len(sys.argv) > 1 else ROOT / "screenshots"
    out.mkdir(parents=True, exist_ok=True)
    chromium = shutil.which("chromium") or shutil.which("chromium-browser")
    if chromium is None:
        print("no Chromium on PATH: apt-get install chromium", file=sys.stderr)
        return 1
    with tempfile.TemporaryDirectory() as scratch:
        subprocess.run([sys.executable, "-m", "mkdocs", "build", "--strict", "--quiet", "-d",
                        scratch], cwd=ROOT, check=True)
        handler = functools.partial(_Quiet, directory=scratch)
        server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
        threading.Thread(target=server.serve_forever, daemon=True).start()
        try:
            with sync_playwright() as playwright:
                browser = playwright.chromium.launch(executable_path=chromium)
                page = browser.new_page(viewport={"width": 1280, "height": 900})
                for name, path in PAGES.items():
                    page.goto(f"http://127.0.0.1:{server.server_port}/{path}")
                    page.wait_for_load_state("networkidle")
                    page.screenshot(path=str(out / name))
                    print(f"{out / name}: {page.title()}")
                browser.close()
        finally:
            server.shutdown()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
