"""The README stays a front page: short, the two commands CI and newcomers run, links that lead
somewhere. Everything else lives in docs/ (built by test_site_builds.py)."""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
README = (ROOT / "README.md").read_text()


def test_readme_is_a_front_page():
    assert len(README.splitlines()) <= 200, "the README is a front page: move detail to docs/"


def test_readme_gives_the_demo_and_the_test_command():
    lines = README.splitlines()
    assert any(line.startswith("scripts/demo    #") for line in lines)
    # .ci/run runs this very command
    assert any(line.startswith("scripts/test    #") for line in lines)
    assert "exec scripts/test" in (ROOT / ".ci" / "run").read_text()


def test_readme_links_lead_to_files():
    targets = re.findall(r"\]\(([^)#\s]+)(?:#[^)]*)?\)", README)
    local = [t for t in targets if "://" not in t]
    assert local, "the README links to no page"
    missing = [t for t in local if not (ROOT / t).exists()]
    assert not missing, f"README links to files that do not exist: {missing}"
