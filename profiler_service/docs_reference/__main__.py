"""`python -m profiler_service.docs_reference [--check]` (scripts/gen-docs)."""

from __future__ import annotations

import sys

from profiler_service.docs_reference import chart_schema
from profiler_service.docs_reference.pages import COMMAND, REFERENCE_DIR, stale_pages, write


def main(argv: list[str]) -> int:
    root = REFERENCE_DIR.parents[1]
    if "--check" in argv:
        stale = [f"docs/reference/{name}" for name in stale_pages()]
        if chart_schema.stale():
            stale.append(str(chart_schema.SCHEMA.relative_to(root)))
        for name in stale:
            print(f"{name} differs from the code: run {COMMAND}")
        return 1 if stale else 0
    for path in [*write(), chart_schema.write()]:
        print(f"wrote {path.relative_to(root)}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
