"""The in-process agent: the service's HTTP API on a daemon thread inside the training job.

    from profiler_service import agent
    agent.start(port=8080, env_gate="PROFILER_ENABLE")   # does nothing unless PROFILER_ENABLE=1

Captures use TensorFlow's profiler in this process; analysis runs in a separate, lower-priority
process, so the training step never waits for XProf. Started before TensorFlow is imported, it
also turns on the CPU allocator's memory events (`TF_CPU_ALLOCATOR_USE_BFC=true`), which
TensorFlow records by default only on some CPUs (analysis/readers/memory_events.py).
"""

from __future__ import annotations

import logging
import os
import sys
import threading
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import uvicorn

from profiler_service.analysis.readers.memory_events import RECORDING_VARIABLE
from profiler_service.api.app import create_app
from profiler_service.capture.in_process import InProcessCapturer
from profiler_service.config import Settings
from profiler_service.errors import StoreOwned
from profiler_service.service import Service, build_service
from profiler_service.targets import TargetKind, in_process_target

log = logging.getLogger(__name__)

_TRUTHY = {"1", "true", "yes", "on"}


@dataclass
class Agent:
    service: Service
    server: uvicorn.Server
    thread: threading.Thread
    capturer: InProcessCapturer
    memory_events: str = ""  # what start() did about them: see record_memory_events

    @property
    def port(self) -> int:
        return self.server.servers[0].sockets[0].getsockname()[1]

    @property
    def url(self) -> str:
        host = self.service.settings.server.host
        host = f"[{host}]" if ":" in host else host
        return f"http://{host}:{self.port}"

    def stop(self, timeout_s: float = 10.0) -> None:
        self.capturer.cancel()
        self.server.should_exit = True
        self.thread.join(timeout_s)


def start(
    port: int = 8080,
    *,
    host: str = "127.0.0.1",
    store: str | Path = "./profiles",
    target_name: str = "local",
    env_gate: str | None = None,
    memory_events: bool = True,
    **settings: Any,
) -> Agent | None:
    """Serve the API from this process; returns None when `env_gate` names an unset variable,
    or when another live process owns `store` (each worker needs a store of its own).

    `memory_events`: turn on the CPU allocator's memory events when TensorFlow is not imported
    yet (`record_memory_events`). Other settings (token, bounds, retention) come from
    `PROFILER_*` variables or keyword arguments.
    """
    if env_gate is not None and os.environ.get(env_gate, "").strip().lower() not in _TRUTHY:
        log.info("profiler agent not started: %s is not set to 1", env_gate)
        return None
    recording = (
        record_memory_events() if memory_events else "left as they are (memory_events=False)"
    )
    config = Settings(
        host=host,
        port=port,
        store=Path(store),
        targets=[in_process_target(target_name)],
        **settings,
    )
    config.server.check_bind_is_safe()
    capturer = InProcessCapturer(config.capture.python_stacks_hz)
    try:
        service = build_service(config, {TargetKind.IN_PROCESS: capturer})
    except StoreOwned as exc:  # another worker's agent on this store: the job trains on
        log.error("profiler agent not started: %s", exc.detail)
        return None
    server = uvicorn.Server(
        uvicorn.Config(
            create_app(service), host=host, port=port, log_level="warning", access_log=False
        )
    )
    thread = threading.Thread(target=server.run, name="profiler-agent", daemon=True)
    thread.start()
    deadline = time.monotonic() + 30
    while not server.started:
        if not thread.is_alive() or time.monotonic() > deadline:
            service.stop()
            raise RuntimeError(f"profiler agent could not listen on {host}:{port}")
        time.sleep(0.02)
    agent = Agent(service, server, thread, capturer, recording)
    log.info("profiler agent serving on %s (store %s)", agent.url, service.store.root)
    return agent


def record_memory_events() -> str:
    """Set `TF_CPU_ALLOCATOR_USE_BFC=true` for this process if TensorFlow is not imported yet
    and the job did not choose its CPU allocator; say what was done, and warn when it is too
    late. oneDNN's allocator (`TF_ENABLE_ONEDNN_OPTS=1`) is no substitute: it records none for
    some jobs (a small MLP, a Python-decoding input pipeline)."""
    if os.environ.get(RECORDING_VARIABLE) is not None:
        return f"left as the job set them ({RECORDING_VARIABLE}={os.environ[RECORDING_VARIABLE]})"
    if "tensorflow" in sys.modules:
        log.warning(
            "TensorFlow was imported before the profiler agent started: its CPU allocator may "
            "record no memory events (then snapshots say so). Start the agent before importing "
            "TensorFlow, or set %s=true in the job's environment.",
            RECORDING_VARIABLE,
        )
        return "too late: TensorFlow was imported first"
    os.environ[RECORDING_VARIABLE] = "true"
    log.info("profiler agent: %s=true, so the CPU allocator records memory events",
             RECORDING_VARIABLE)  # fmt: skip
    return f"turned on ({RECORDING_VARIABLE}=true)"
