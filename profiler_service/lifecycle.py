"""One lifecycle for what runs in the background: the look-back sampler, the scheduler, the
bucket mirror, the fleet sync, the hub registration, the Grafana annotator, the look-back trace,
the warm analysis workers.

Each is a `Component`: built without starting anything, then `start()`ed by its owner and
`stop(timeout_s)`ped by it. A loop's thread is a `BackgroundLoop`: one stop event, set by
`stop()`, which then joins the thread for at most `timeout_s`. The owner (`Service`,
`HubService`) starts its parts in order through a `Lifecycle` and stops them in reverse, the
way `contextlib.ExitStack` unwinds: so a part is never stopped before what depends on it.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable, Iterable
from typing import Protocol

log = logging.getLogger(__name__)

STOP_TIMEOUT_S = 5.0


class Component(Protocol):
    """Something with a life: nothing runs before `start()`, nothing after `stop()`."""

    def start(self) -> None: ...

    def stop(self, timeout_s: float | None = None) -> None:
        """Stop, waiting at most `timeout_s` (None: the part's own limit)."""
        ...


class BackgroundLoop:
    """One daemon thread running `body(stopping)` until `stopping` is set.

    `body` waits on `stopping` (`stopping.wait(interval)`) between rounds; a loop that waits on
    events of its own names them in `wakes`, which `stop()` sets too. Start and stop are
    idempotent; a stopped loop may be started again (a new thread).
    """

    def __init__(
        self,
        name: str,
        body: Callable[[threading.Event], None],
        *,
        wakes: Iterable[threading.Event] = (),
        join_s: float = STOP_TIMEOUT_S,
    ):
        self.name = name
        self.stopping = threading.Event()
        self.join_s = join_s
        self._body = body
        self._wakes = tuple(wakes)
        self._thread: threading.Thread | None = None
        self._lock = threading.Lock()

    @property
    def running(self) -> bool:
        return self._thread is not None and self._thread.is_alive()

    def start(self) -> None:
        with self._lock:
            if self._thread is not None:
                return
            self.stopping.clear()
            self._thread = threading.Thread(
                target=self._body, args=(self.stopping,), name=self.name, daemon=True
            )
            self._thread.start()

    def stop(self, timeout_s: float | None = None) -> None:
        """Set the stop event (and the wakes), then wait for the thread: `join_s` by default."""
        with self._lock:
            thread, self._thread = self._thread, None
            self.stopping.set()
            for wake in self._wakes:
                wake.set()
        if thread is not None and thread is not threading.current_thread():
            thread.join(self.join_s if timeout_s is None else timeout_s)
            if thread.is_alive():
                log.warning("%s did not stop within its timeout; left as a daemon", self.name)


class _Closing:
    """A part with nothing to start and something to close at the end (a file, a pool)."""

    def __init__(self, close: Callable[[], None]):
        self._close = close

    def start(self) -> None:
        pass

    def stop(self, timeout_s: float | None = None) -> None:
        self._close()


class Lifecycle:
    """Starts parts in the order given, each once; stops those started, in reverse."""

    def __init__(self) -> None:
        self._started: list[Component] = []

    def closing(self, close: Callable[[], None]) -> None:
        """Call `close` at stop, in its place in the reverse order, started or not: what is
        open once built (the store, the alert log, the analysis workers)."""
        self._started.append(_Closing(close))

    def start(self, parts: Iterable[Component | None]) -> None:
        """Start each part not started yet; if one fails, stop those started and raise."""
        for part in parts:
            if part is None or any(part is p for p in self._started):
                continue
            try:
                part.start()
            except BaseException:
                self.stop()
                raise
            self._started.append(part)

    def stop(self) -> None:
        """Stop every started part, last first; one that fails is logged, the rest still stop."""
        while self._started:
            part = self._started.pop()
            try:
                part.stop()
            except Exception:
                log.exception("stopping %r failed", part)
