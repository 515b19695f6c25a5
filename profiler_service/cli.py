"""`profiler-service`: serve (the sidecar), hub (the fleet's), capture (one-off), demo (the
README's first command)."""

from __future__ import annotations

import argparse
import logging
import sys
import time
from pathlib import Path
from typing import Any

from pydantic import ValidationError

from profiler_service import __version__
from profiler_service.api.access_log import log_config
from profiler_service.cli_analysis import cmd_analyze, cmd_compare, get, print_snapshot
from profiler_service.config import AppSettings, Settings
from profiler_service.errors import ServiceError


def _settings(args: argparse.Namespace, cls: type[AppSettings] = Settings, **extra: Any) -> Any:
    """Environment first (`PROFILER_*`), then the flags that were given."""
    given = {k: v for k, v in vars(args).items() if k in cls.owners and v is not None}
    return cls(**given, **extra)


def _add_common(p: argparse.ArgumentParser) -> None:
    p.add_argument("--store", type=Path, help="snapshot store directory (PROFILER_STORE)")
    p.add_argument(
        "--target",
        dest="targets",
        action="append",
        metavar="[NAME=]grpc://HOST:PORT[,...]",
        help="a job's profiler server; repeat for several targets, comma-separate a target's "
        "workers (PROFILER_TARGETS)",
    )


def cmd_serve(args: argparse.Namespace) -> int:
    from profiler_service.api.app import create_app
    from profiler_service.service import build_service

    settings = _settings(args)
    settings.server.check_bind_is_safe()
    if not settings.capture.targets:
        logging.warning("no --target configured: POST /profile will answer 422 until one is")
    return _serve(create_app(build_service(settings)), settings.server, args)


def cmd_hub(args: argparse.Namespace) -> int:
    from profiler_service.config import HubSettings
    from profiler_service.hub.app import create_hub_app
    from profiler_service.hub.fleet import build_hub

    settings = _settings(args, HubSettings)
    settings.server.check_bind_is_safe()
    return _serve(create_hub_app(build_hub(settings)), settings.server, args)


def _serve(app, server, args: argparse.Namespace) -> int:
    """Run `app` with uvicorn where `server` (its settings group) says, logging as asked."""
    import uvicorn

    uvicorn.run(
        app,
        host=server.host,
        port=server.port,
        log_level=args.log_level.lower(),
        log_config=log_config(),
    )
    return 0


def cmd_ledger(args: argparse.Namespace) -> int:
    """The hub's fleet ledger over a window, as a table (or its JSON)."""
    from profiler_service.hub.ledger import Ledger
    from profiler_service.hub.ledger_text import format_ledger

    response = get(args.hub, "/fleet/ledger", args.token, args.timeout, window=args.window)
    if args.json:
        print(response.text)
    else:
        print(format_ledger(Ledger.model_validate_json(response.content), top=args.top))
    return 0


def cmd_capture(args: argparse.Namespace) -> int:
    from tqdm import tqdm

    from profiler_service.capture.controller import CaptureRequest
    from profiler_service.durations import parse_duration
    from profiler_service.models import SnapshotStatus, Trigger, TriggerKind
    from profiler_service.service import build_service

    settings = _settings(args)
    seconds = parse_duration(
        args.duration,
        default_s=settings.bounds.duration_default_s,
        min_s=settings.bounds.duration_min_s,
        max_s=settings.bounds.duration_max_s,
    )
    service = build_service(settings, serves_api=False)
    try:
        service.start(serving=False)  # the mirror, the annotator: no sampler, no schedules
        snapshot = service.controller.start(
            CaptureRequest(
                duration_s=seconds,
                target=args.name,
                trigger=Trigger(kind=TriggerKind.CLI, source="profiler-service capture"),
            )
        )
        total_ms = round(seconds * 1000)
        # A bar redraws in place on a terminal; in a log each redraw is a line of its own.
        interactive = sys.stderr.isatty()
        if not interactive:
            print(
                f"capturing {snapshot.target} for {seconds:g} s: snapshot {snapshot.id}",
                file=sys.stderr,
                flush=True,
            )
        bar_options = {"unit": "ms", "desc": "capturing", "disable": not interactive}
        with tqdm(total=total_ms, file=sys.stderr, **bar_options) as bar:
            started = time.monotonic()
            while not service.controller.wait(snapshot.id, 0.1):
                status = service.store.get(snapshot.id).status
                elapsed = min(total_ms, round((time.monotonic() - started) * 1000))
                bar.set_description(status.value)
                bar.update(elapsed - bar.n)
            bar.update(total_ms - bar.n)
        snapshot = service.store.get(snapshot.id)
    finally:
        service.stop()
    print_snapshot(snapshot, service.store.root)
    return 0 if snapshot.status is SnapshotStatus.READY else 1


def cmd_demo(args: argparse.Namespace) -> int:
    from profiler_service.demo.run import run_demo

    return run_demo(store=args.store or Path("./profiles"), duration=args.duration or "3s")


def _add_bind(parser: argparse.ArgumentParser) -> None:
    """Where an HTTP server listens: the service and the hub alike."""
    parser.add_argument("--host", help="bind address (PROFILER_HOST, default 127.0.0.1)")
    parser.add_argument("--port", type=int, help="port (PROFILER_PORT, default 8080)")
    parser.add_argument(
        "--insecure",
        action="store_true",
        default=None,
        help="allow a non-loopback bind without PROFILER_API_TOKEN",
    )


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="profiler-service", description=__doc__)
    parser.add_argument("--version", action="version", version=__version__)
    parser.add_argument(
        "--log-level", default="INFO", choices=["DEBUG", "INFO", "WARNING", "ERROR"]
    )
    sub = parser.add_subparsers(dest="command", required=True)

    serve = sub.add_parser("serve", help="run the HTTP service beside a job (sidecar)")
    _add_common(serve)
    _add_bind(serve)
    serve.add_argument("--tensorboard-url", help="TensorBoard/XProf URL for snapshot links")
    serve.set_defaults(func=cmd_serve)

    hub = sub.add_parser(
        "hub", help="run the fleet hub: sidecars' registry, one webhook, the bucket's index"
    )
    hub.add_argument("--store", type=Path, help="where the fleet index lives (PROFILER_STORE)")
    hub.add_argument("--store-url", help="the fleet's bucket (PROFILER_STORE_URL)")
    _add_bind(hub)
    hub.set_defaults(func=cmd_hub)

    ledger = sub.add_parser(
        "ledger", help="the fleet's GPU-hours by job and idle cause, from a hub (GET /fleet/ledger)"
    )
    ledger.add_argument("--hub", required=True, help="the hub, e.g. http://127.0.0.1:8080")
    ledger.add_argument("--window", default="24h", help="how far back: 24h, 7d, 2w (default 24h)")
    ledger.add_argument("--token", help="bearer token (a tenant's sees its namespaces only)")
    ledger.add_argument("--top", type=int, default=20, help="jobs to print, most recoverable first")
    ledger.add_argument("--json", action="store_true", help="print the hub's JSON as it is")
    ledger.add_argument("--timeout", type=float, default=60, help="seconds to wait for the hub")
    ledger.set_defaults(func=cmd_ledger)

    capture = sub.add_parser("capture", help="take one capture into the store and analyse it")
    _add_common(capture)
    capture.add_argument("--name", help="which configured target (default: the first)")
    capture.add_argument("--duration", help="500ms, 5s, 2m or seconds (default 5s)")
    capture.set_defaults(func=cmd_capture)

    analyze = sub.add_parser(
        "analyze",
        help="analyse an existing capture and print findings; over many runs, one row each",
    )
    analyze.add_argument(
        "path",
        type=Path,
        help="a .xplane.pb, a run directory, or a folder of runs (a logdir or a tree of them)",
    )
    analyze.add_argument(
        "--run", help="analyse only this run of a logdir (named by its folder; else every run)"
    )
    analyze.add_argument(
        "--json", action="store_true", help="print the analysis (many runs: a list) as JSON"
    )
    analyze.add_argument("--timeout", type=float, default=600, help="seconds before giving up")
    analyze.set_defaults(func=cmd_analyze)

    comp = sub.add_parser("compare", help="compare two snapshots; exit 1 on a regression (CI gate)")
    comp.add_argument("base", help="baseline: snapshot id (with --url or --store) or path")
    comp.add_argument("head", help="the snapshot to judge: id or path")
    comp.add_argument("--max-regression", default="10%", help="allowed growth (default 10%%)")
    comp.add_argument(
        "--metric",
        default="step_time",
        choices=["step_time", "input_share", "device_idle", "memory_peak"],
    )
    comp.add_argument("--url", help="a running service, e.g. http://127.0.0.1:8080")
    comp.add_argument("--token", help="bearer token for --url (reads need none by default)")
    comp.add_argument("--store", type=Path, help="a snapshot store directory")
    comp.set_defaults(func=cmd_compare)

    demo = sub.add_parser("demo", help="train a small Keras job with the agent and profile it")
    demo.add_argument("--store", type=Path, help="where to keep the snapshot (default ./profiles)")
    demo.add_argument("--duration", help="capture length (default 3s)")
    demo.set_defaults(func=cmd_demo)
    return parser


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    logging.basicConfig(
        level=args.log_level, format="%(asctime)s %(levelname)s %(name)s: %(message)s"
    )
    logging.getLogger("httpx").setLevel(logging.WARNING)
    # The hub's index migrations log each step at INFO: not a user's concern at each start.
    logging.getLogger("alembic").setLevel("DEBUG" if args.log_level == "DEBUG" else "WARNING")
    try:
        return args.func(args)
    except (ValidationError, ValueError) as exc:
        print(f"profiler-service: configuration error: {exc}", file=sys.stderr)
        return 2
    except ServiceError as exc:
        print(f"profiler-service: {exc.code}: {exc.detail}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
