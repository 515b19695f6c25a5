"""`python -m profiler_service.docs_reference [--check]` (scripts/gen-docs)."""

from __future__ import annotations

import sys

from profiler_service.docs_reference.pages import COMMAND, REFERENCE_DIR, stale_pages, write


def main(argv: list[str]) -> int:
    if "--check" in argv:
        stale = stale_pages()
        for name in stale:
            print(f"docs/reference/{name} differs from the code: run {COMMAND}")
        return 1 if stale else 0
    for path in write():
        print(f"wrote {path.relative_to(REFERENCE_DIR.parents[1])}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
