"""Every bench bench/README.md documents still imports: a bench is run by hand, rarely, so a
name one moves out from under it (bench_verification imported a `capture` that
bench_calibration no longer had) is found here, not on the day someone needs its figures.
Each is imported from bench/, as `python bench/<name>.py` would, without running its `main`."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

BENCH = Path(__file__).resolve().parents[2] / "bench"
BENCHES = sorted(p.stem for p in BENCH.glob("bench_*.py") if p.stem != "bench_common")


def test_the_readme_names_every_bench():
    readme = (BENCH / "README.md").read_text()
    assert [b for b in BENCHES if f"bench/{b}.py" not in readme] == []


def test_every_bench_imports():
    # One process for all (TensorFlow is imported once), each import tried on its own.
    script = (
        "import importlib, sys, traceback\n"
        f"for name in {BENCHES!r}:\n"
        "    try:\n"
        "        importlib.import_module(name)\n"
        "    except Exception:\n"
        "        print(name, traceback.format_exc(limit=1))\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", script], cwd=BENCH, capture_output=True, text=True, timeout=600
    )
    assert done.returncode == 0, done.stderr[-2000:]
    assert done.stdout == "", done.stdout
