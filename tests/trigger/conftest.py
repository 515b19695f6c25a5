"""A real service (store, controller, alert log) whose capturer is a stand-in the test releases."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from fakes import HeldCapturer

from profiler_service.config import Settings
from profiler_service.service import Service, build_service
from profiler_service.targets import TargetKind

UNUSED = "grpc://127.0.0.1:9"  # discard port: the stand-in capturer never dials it


@pytest.fixture
def held() -> Iterator[HeldCapturer]:
    capturer = HeldCapturer()
    yield capturer
    capturer.release()


@pytest.fixture
def make_service(tmp_path: Path, held: HeldCapturer) -> Iterator[Callable[..., Service]]:
    """build_service with targets trainer and serving, and the held capturer."""
    built: list[Service] = []

    def make(**settings) -> Service:
        settings.setdefault("targets", f"trainer={UNUSED} serving={UNUSED}")
        settings.setdefault("store", tmp_path / "store")
        service = build_service(Settings(**settings), capturers={TargetKind.GRPC: held})
        built.append(service)
        return service

    yield make
    held.release()
    for service in built:
        for snapshot in service.controller.in_flight():
            service.controller.wait(snapshot.id, 10)
        service.close()
