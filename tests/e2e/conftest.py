"""Fixtures of the end-to-end tests: real headless Chromium (Debian's package) via Playwright."""

from __future__ import annotations

import shutil

import pytest
from playwright.sync_api import sync_playwright

CHROMIUM_FLAGS = [
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
]


@pytest.fixture(scope="session")
def browser():
    executable = shutil.which("chromium")
    assert executable, "Debian's chromium is missing: scripts/install-system-packages installs it"
    with sync_playwright() as p:
        b = p.chromium.launch(executable_path=executable, args=CHROMIUM_FLAGS, headless=True)
        yield b
        b.close()
