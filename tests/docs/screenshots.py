"""Screenshots of the docs site for docs/img/ (issue 26): the home page, the tutorial and the CLI
reference, taken with the headless Debian chromium + chromium-driver the browser tests use.

    .venv/bin/python tests/docs/screenshots.py     # builds the site into a temp dir, serves it, shoots
"""

from __future__ import annotations

import functools
import shutil
import subprocess
import sys
import tempfile
import threading
from http.server import SimpleHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

from selenium import webdriver
from selenium.webdriver.chrome.service import Service

ROOT = Path(__file__).resolve().parents[2]
SHOTS = {"docs-home.png": "", "docs-tutorial.png": "tutorial/", "docs-reference-cli.png": "reference/cli/"}


def _binary(*names: str) -> str:
    for name in names:
        if found := shutil.which(name):
            return found
    raise SystemExit(f"none of {names} found: apt-get install chromium chromium-driver")


def main() -> None:
    with tempfile.TemporaryDirectory() as site:
        subprocess.run([sys.executable, "-m", "mkdocs", "build", "-q", "-d", site], cwd=ROOT, check=True)
        handler = functools.partial(SimpleHTTPRequestHandler, directory=site)
        server = ThreadingHTTPServer(("127.0.0.1", 0), handler)
        threading.Thread(target=server.serve_forever, daemon=True).start()
        options = webdriver.ChromeOptions()
        options.binary_location = _binary("chromium", "chromium-browser")
        for flag in ("--headless=new", "--no-sandbox", "--disable-dev-shm-usage", "--disable-gpu",
                     "--window-size=1280,900"):
            options.add_argument(flag)
        driver = webdriver.Chrome(options=options, service=Service(_binary("chromedriver")))
        try:
            for name, path in SHOTS.items():
                driver.get(f"http://127.0.0.1:{server.server_address[1]}/{path}")
                driver.save_screenshot(str(ROOT / "docs" / "img" / name))
                print("wrote", ROOT / "docs" / "img" / name)
        finally:
            driver.quit()
            server.shutdown()


if __name__ == "__main__":
    main()
