"""The command line's readers of captures and snapshots: `analyze` (XProf over xplane files, or
a corpus of runs), `compare` (two snapshots from a store or a service), and what `capture` and
`ledger` share with them (a snapshot printed, a service's answer)."""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

from profiler_service.errors import ServiceError

__all__ = ["cmd_analyze", "cmd_compare", "find_xplanes", "get", "load_snapshot", "print_snapshot"]


def get(base: str, path: str, token: str | None, timeout: float, **params: str):
    """A service's or hub's answer to `GET base/path`; a ServiceError saying why otherwise."""
    import httpx

    headers = {"Authorization": f"Bearer {token}"} if token else {}
    url = f"{base.rstrip('/')}{path}"
    try:
        response = httpx.get(url, params=params, headers=headers, timeout=timeout)
    except httpx.HTTPError as exc:
        raise ServiceError(f"{base} did not answer: {exc}") from None
    if response.status_code != 200:
        raise ServiceError(f"{base} answered {response.status_code} for {path}: "
                           f"{response.text[:300]}")  # fmt: skip
    return response


def print_snapshot(snapshot, store_root: Path) -> None:
    from profiler_service.exporters.text_report import format_snapshot

    print(format_snapshot(snapshot))
    if snapshot.files:
        print(f"  stored in {store_root / 'plugins' / 'profile' / snapshot.id}")
        print(f"  open it:  xprof --logdir {store_root} --port 8791   (run {snapshot.id})")


def cmd_analyze(args: argparse.Namespace) -> int:
    import shutil
    import tempfile

    from profiler_service.analysis.runner.analyzer import AnalysisFailed, XprofAnalyzer
    from profiler_service.exporters.text_report import format_findings, format_summary

    if args.run is None and args.path.is_dir() and not any(args.path.glob("*.xplane.pb")):
        from profiler_service.analysis.runner.corpus import find_runs

        runs = find_runs(args.path)
        if len(runs) > 1:
            return analyze_runs(args, runs)
        xplanes = sorted(runs[0].glob("*.xplane.pb")) if runs else []
    else:
        xplanes = find_xplanes(args.path, args.run)
        if not xplanes and args.run is not None and args.path.is_dir():
            xplanes = _named_run(args.path, args.run)
    if not xplanes:
        print(f"profiler-service: no .xplane.pb found at {args.path}", file=sys.stderr)
        return 2
    # XProf writes cache files beside the capture: work on a copy, the input may be read-only.
    # The job's Python stacks go with it: the findings' `where` reads them.
    from profiler_service.probes.python_stacks import SAMPLES_FILE, STACKS_FILE

    beside = [xplanes[0].parent / name for name in (STACKS_FILE, SAMPLES_FILE)]
    with tempfile.TemporaryDirectory(prefix="profiler-analyze-") as tmp:
        for path in [*xplanes, *(p for p in beside if p.is_file())]:
            shutil.copy(path, Path(tmp) / path.name)
        analyzer = XprofAnalyzer(timeout_s=args.timeout)
        try:
            result = analyzer.analyze(Path(tmp))
        except AnalysisFailed as exc:
            print(f"profiler-service: {exc.code}: {exc.detail}", file=sys.stderr)
            return 1
        finally:
            analyzer.close()
    if args.json:
        print(result.model_dump_json(indent=2))
    else:
        print(f"{len(xplanes)} capture file(s) from {xplanes[0].parent}")
        print("\n".join(format_summary(result.summary) + format_findings(result.findings)))
    return 0


def analyze_runs(args: argparse.Namespace, runs: list[Path]) -> int:
    """One row a run; exit 1 when any run failed to analyse. One analyzer serves them all: its
    warm worker imports XProf once, not once a run."""
    from profiler_service.analysis.runner.analyzer import XprofAnalyzer
    from profiler_service.analysis.runner.corpus import (
        RunRow,
        analyse_runs,
        format_table,
        format_totals,
    )

    started = time.monotonic()
    analyzer = XprofAnalyzer(timeout_s=args.timeout)
    count = 0

    def progress(row: RunRow) -> None:
        """On a terminal, each run as it is done: a large corpus takes minutes."""
        nonlocal count
        count += 1
        if sys.stderr.isatty():
            print(f"[{count}/{len(runs)}] {row.run}", file=sys.stderr)

    try:
        rows = analyse_runs(args.path, runs, analyzer, progress)
    finally:
        analyzer.close()
    if args.json:
        print(json.dumps([row.model_dump(mode="json") for row in rows], indent=2))
    else:
        print(f"{len(runs)} runs under {args.path}")
        print("\n".join(format_table(rows)))
        print(format_totals(rows, time.monotonic() - started))
    return 1 if any(row.error for row in rows) else 0


def cmd_compare(args: argparse.Namespace) -> int:
    """Exit 0: within the threshold; 1: regressed; 2: cannot tell (missing, not analysed)."""
    from profiler_service.across.compare import GateMetric, compare, parse_threshold
    from profiler_service.exporters.text_report import format_comparison

    metric = GateMetric(args.metric)
    threshold = parse_threshold(args.max_regression)
    base, head = (load_snapshot(ref, args) for ref in (args.base, args.head))
    comparison = compare(base, head)
    print(f"{base.id} -> {head.id} ({metric.value}, max regression {threshold:.0%})")
    print("\n".join(format_comparison(comparison, metric, threshold)))
    regressed = comparison.is_regression(metric, threshold)
    if regressed is None:
        print(f"cannot gate: {metric.value} is missing from one side", file=sys.stderr)
        return 2
    ratio, name = comparison.ratio(metric), metric.value
    change = comparison.step_change
    if metric is GateMetric.STEP_TIME and change and change.examples_per_step:
        ratio, name = 1 + (change.change_share or 0.0), f"{name} per example"  # batch changed
    verdict = "REGRESSION" if regressed else "ok"
    line = f"{verdict}: {name} is {ratio:.1%} of the baseline (limit {1 + threshold:.0%})"
    if metric is GateMetric.STEP_TIME and change and change.change_interval_95:
        lo, hi = change.change_interval_95
        line += f"; 95% interval of the change {lo:+.1%} to {hi:+.1%}"
        if change.between_captures_sd is not None:
            line += f", with {change.between_captures_sd:.1%} between captures"
        line += "; a regression when past the limit and the interval above 0"
    print(line)
    return 1 if regressed else 0


def load_snapshot(ref: str, args: argparse.Namespace):
    """A snapshot from a path (snapshot.json or its directory), a service (--url), or --store."""
    from profiler_service.models import Snapshot

    path = Path(ref)
    if path.is_dir():
        path = path / "snapshot.json"
    if path.is_file():
        return Snapshot.model_validate_json(path.read_bytes())
    if args.url:
        return Snapshot.model_validate(get(args.url, f"/profiles/{ref}", args.token, 30).json())
    if args.store:  # read as files: a live service's store is left as it is
        from profiler_service.store.file_reads import read_finished_snapshot

        return read_finished_snapshot(args.store, ref)
    raise ServiceError(f"{ref!r} is neither a snapshot path nor an id with --url or --store")


def find_xplanes(path: Path, run: str | None = None) -> list[Path]:
    """`.xplane.pb` files of a file, a run directory, or a logdir (its newest run, or `run`)."""
    if path.is_file():
        return [path] if path.name.endswith(".xplane.pb") else []
    direct = sorted(path.glob("*.xplane.pb"))
    if direct:
        return direct
    runs = sorted(
        (
            d
            for d in path.glob("**/plugins/profile/*")
            if d.is_dir()
            and any(d.glob("*.xplane.pb"))
            and not any(part.startswith(".") for part in d.relative_to(path).parts)
        ),  # a store's `.staging` holds captures still being written
        key=lambda d: d.stat().st_mtime,
    )
    if run is not None:
        runs = [d for d in runs if d.name == run]
    return sorted(runs[-1].glob("*.xplane.pb")) if runs else []


def _named_run(root: Path, run: str) -> list[Path]:
    """`--run` outside the plugins/profile layout: a run folder named `run`, or at the short
    path the table of many runs shows."""
    from profiler_service.analysis.runner.corpus import find_runs, short_name

    named = [d for d in find_runs(root) if run in (d.name, short_name(d, root))]
    return sorted(named[0].glob("*.xplane.pb")) if len(named) == 1 else []
