"""The reference pages under docs/reference/, generated from the code (issue 16).

    python -m profiler_service.docs_reference          # (re)writes docs/reference/*.md
    python -m profiler_service.docs_reference --check  # exits 1 naming the pages that differ

Each page is a pure function of the code: the settings' descriptions (config.py), the rules'
docstrings and thresholds (analysis/findings/), the codes and outcomes where they are defined, the
metrics of a real scrape, and the service's own /openapi.json. tests/docs/ fails when a committed
page differs from what this renders.
"""
