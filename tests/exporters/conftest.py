"""Fixtures of the exporter tests: a real service on a temporary store, and snapshots in it."""

from __future__ import annotations

import functools
from collections.abc import Callable

import pytest
from exporter_helpers import add_snapshot

from profiler_service.models import Snapshot
from profiler_service.service import Service


@pytest.fixture
def service(make_service) -> Service:
    """A real service (store, controller, metrics) over a fresh store; nothing is captured."""
    return make_service()


@pytest.fixture
def add(service) -> Callable[..., Snapshot]:
    """add(snapshot_id, **kwargs): a snapshot in the service's store (see add_snapshot)."""
    return functools.partial(add_snapshot, service.store)
