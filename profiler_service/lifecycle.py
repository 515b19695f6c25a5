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
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Protocol, runtime_checkable

log = logging.getLogger(__name__)

STOP_TIMEOUT_S = 5.0


@runtime_checkable
class Component(Protocol):
    """Something with a life: nothing runs before `start()`, nothing after `stop()`. A part
    that runs nothing of its own (the alert trigger, the memory watch) has neither method, and
    its owner starts only what is one (`isinstance(part, Component)`)."""

    def start(self) -> None: ...

    def stop(self, timeout_s: float | None = None) -> None:
        """Stop, waiting at most `timeout_s` (None: the part's own limit)."""
        ...


# A loop whose rounds failed this many times in a row is reported unhealthy (`/readyz`).
FAILING_AFTER_ROUNDS = 3
# The wait after a failed round, doubled while it keeps failing, up to the most.
RETRY_S = 1.0
RETRY_MAX_S = 60.0


@dataclass
class LoopHealth:
    """What a loop's rounds came to: every failure counted (exported per loop), the current
    run of failures and its first error, so `/readyz` can name a loop that keeps failing."""

    name: str
    running: bool = False
    died: bool = False  # its thread ended without stop(): a BaseException out of a round
    rounds_total: int = 0
    failures_total: int = 0
    failing_rounds: int = 0  # in a row, up to the last round
    failing_since: float | None = None  # time.time() of the first failure of this run
    last_error: str | None = None

    @property
    def keeps_failing(self) -> bool:
        return self.failing_rounds >= FAILING_AFTER_ROUNDS

    def problem(self) -> str | None:
        """A sentence on what is wrong, or None when the loop is fine."""
        if self.died:
            return f"its thread ended without being stopped (the last error: {self.last_error})"
        if self.keeps_failing:
            return (
                f"its last {self.failing_rounds} rounds failed (the first at "
                f"{_when(self.failing_since)}): {self.last_error}"
            )
        return None


def public_error(exc: BaseException) -> str:
    """A failed round's error as `/readyz` may say it: a database driver's text names its host,
    port and user (the log has it whole); others, their first line."""
    if type(exc).__module__.startswith(("sqlalchemy", "psycopg")):
        return "the database did not answer (its error is in the log)"
    text = str(exc).strip().splitlines()
    return f"{type(exc).__name__}: {text[0] if text else ''}"[:300]


def _when(epoch_s: float | None) -> str:
    if epoch_s is None:
        return "?"
    return datetime.fromtimestamp(epoch_s, UTC).isoformat(timespec="seconds")


class BackgroundLoop:
    """One daemon thread calling `round()` until stopped; a round that raises never ends it.

    `round()` does one round's work and returns how long to wait before the next (None: until
    woken). The wait is on `wake` where the loop has an event of its own (a queue's, the
    registry's), else on the stop event; `stop()` sets both. The round clears its own wake.
    An exception from a round is the guard's: logged once with its traceback while the rounds
    keep failing, counted (`health`), the next round tried after `RETRY_S`, doubled up to
    `RETRY_MAX_S`; the first round that succeeds again logs the recovery. Start and stop are
    idempotent; a stopped loop may be started again (a new thread). `wait_first`: the owner
    did a first round itself before starting the loop.
    """

    def __init__(
        self,
        name: str,
        round: Callable[[], float | None],
        *,
        wake: threading.Event | None = None,
        wait_first: float | None = None,
        join_s: float = STOP_TIMEOUT_S,
    ):
        self.name = name
        self.stopping = threading.Event()
        self.join_s = join_s
        self.health = LoopHealth(name)
        self._round = round
        self._wake = wake
        self._wait_first = wait_first
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
            self._thread = threading.Thread(target=self._run, name=self.name, daemon=True)
            self.health.running, self.health.died = True, False
            self._thread.start()

    def stop(self, timeout_s: float | None = None) -> None:
        """Set the stop event (and the wake), then wait for the thread: `join_s` by default."""
        with self._lock:
            thread, self._thread = self._thread, None
            self.stopping.set()
            if self._wake is not None:
                self._wake.set()
        if thread is not None and thread is not threading.current_thread():
            thread.join(self.join_s if timeout_s is None else timeout_s)
            if thread.is_alive():
                log.warning("%s did not stop within its timeout; left as a daemon", self.name)
        self.health.running = False

    def run_round(self) -> float | None:
        """One guarded round (the loop's, or a test's): the wait it asks for after it."""
        health = self.health
        health.rounds_total += 1
        try:
            delay = self._round()
        except Exception as exc:
            health.failures_total += 1
            health.failing_rounds += 1
            health.last_error = public_error(exc)
            if health.failing_rounds == 1:
                health.failing_since = time.time()
                log.exception(
                    "%s: a round failed; retrying (logged again once it recovers)", self.name
                )
            return min(RETRY_S * 2 ** (health.failing_rounds - 1), RETRY_MAX_S)
        if health.failing_rounds:
            log.warning(
                "%s recovered after %d failed rounds (the last: %s)",
                self.name,
                health.failing_rounds,
                health.last_error,
            )
            health.failing_rounds, health.failing_since = 0, None
        return delay

    def _run(self) -> None:
        try:
            delay = self._wait_first
            if delay is not None:
                self._wait(delay)
            while not self.stopping.is_set():
                delay = self.run_round()
                if self.stopping.is_set():
                    break
                self._wait(delay)
        except BaseException as exc:
            self.health.last_error = public_error(exc)
            self.health.died = True
            raise
        finally:
            self.health.running = False

    def _wait(self, delay_s: float | None) -> None:
        event = self._wake if self._wake is not None else self.stopping
        event.wait(None if delay_s is None else max(0.0, delay_s))


class LoopOwner:
    """A part whose life is one `BackgroundLoop` (`self._loop`): it starts and stops with it
    and lists it in `loops` (the `Lifecycle` reports its health). A part that does more at
    either end overrides `start` or `stop` and calls these."""

    _loop: BackgroundLoop

    @property
    def loops(self) -> tuple[BackgroundLoop, ...]:
        return (self._loop,)

    def start(self) -> None:
        self._loop.start()

    def stop(self, timeout_s: float | None = None) -> None:
        self._loop.stop(timeout_s)


class _Closing:
    """A part with nothing to start and something to close at the end (a file, a pool)."""

    def __init__(self, close: Callable[[], None]):
        self._close = close

    def start(self) -> None:
        pass

    def stop(self, timeout_s: float | None = None) -> None:
        self._close()


class Lifecycle:
    """Starts parts in the order given, each once; stops those started, in reverse.

    A part whose work runs on `BackgroundLoop`s lists them in a `loops` attribute: their
    health is the lifecycle's (`loop_health`: `/readyz` and the loops' failure counter)."""

    def __init__(self) -> None:
        self._started: list[Component] = []

    def loop_health(self) -> list[LoopHealth]:
        """The loops running (or dead) of the parts started, in start order: a part may leave
        its loop unstarted (the scheduler without schedules)."""
        return [
            loop.health
            for part in self._started
            for loop in getattr(part, "loops", ())
            if loop.health.running or loop.health.died
        ]

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
