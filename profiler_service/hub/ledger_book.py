"""The ledgers the hub serves, kept built: the page, the API and the metric read them here."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from datetime import UTC, datetime

from profiler_service.config import LedgerSettings
from profiler_service.hub.index.fleet_queries import FleetQueries
from profiler_service.hub.ledger import Ledger, build_ledger
from profiler_service.lifecycle import BackgroundLoop, LoopOwner

__all__ = ["LedgerBook"]


class LedgerBook(LoopOwner):
    """Ledgers by window, each rebuilt once older than `hub_ledger_refresh_s` or once a sync
    changed the index (`version`): the page and the API wait for a build at most once per
    window and change; a loop keeps the metric's window (`hub_ledger_metric_window_s`) built,
    so a scrape never waits on Prometheus."""

    def __init__(
        self,
        index: FleetQueries,
        settings: LedgerSettings,
        link: Callable[[str], str],
        version: Callable[[], object] = lambda: None,
        clock: Callable[[], float] = time.time,
    ):
        self.index, self.settings, self.link, self.clock = index, settings, link, clock
        self.version = version
        self._lock = threading.Lock()  # the built ledgers: held for a lookup, never a build
        self._building = threading.Lock()  # one build at a time
        self._built: dict[float, tuple[float, object, Ledger]] = {}
        # called after each round of the loop: the metrics encode the new ledger's series
        self.after_round: list[Callable[[], None]] = []
        self._loop = BackgroundLoop("fleet-ledger", self._round)

    def _round(self) -> float:
        self.ledger(self.settings.ledger_metric_window_s, max_age_s=0)
        for call in self.after_round:
            call()
        return self.settings.ledger_refresh_s

    def ledger(self, window_s: float, max_age_s: float | None = None) -> Ledger:
        max_age = self.settings.ledger_refresh_s if max_age_s is None else max_age_s
        built = self._fresh(window_s, max_age)
        if built is not None:
            return built
        with self._building:
            built = self._fresh(window_s, max_age)  # another caller may have just built it
            if built is not None:
                return built
            now, version = self.clock(), self.version()
            ledger = self.build(window_s, now)
            with self._lock:
                keep = self.settings.ledger_refresh_s
                self._built = {k: v for k, v in self._built.items() if now - v[0] < keep}
                self._built[window_s] = (now, version, ledger)
            return ledger

    def _fresh(self, window_s: float, max_age: float) -> Ledger | None:
        with self._lock:
            built = self._built.get(window_s)
        if built is None or self.clock() - built[0] >= max_age or built[1] != self.version():
            return None
        return built[2]

    def latest(self, window_s: float) -> Ledger | None:
        """The last ledger built for `window_s`, however old; None before the first."""
        with self._lock:
            built = self._built.get(window_s)
            return built[2] if built else None

    def build(self, window_s: float, now: float) -> Ledger:
        since = now - window_s - self.settings.ledger_capture_horizon_s
        rows = self.index.ledger_rows(datetime.fromtimestamp(since, UTC))
        return build_ledger(rows, self.settings, window_s=window_s, end=now, link=self.link)
