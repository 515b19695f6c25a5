"""A real service (store, controller, alert log) whose capturer is a stand-in the test releases."""

from __future__ import annotations

from collections.abc import Callable, Iterator

import pytest
from fakes import HeldCapturer

from profiler_service.service import Service

UNUSED = "grpc://127.0.0.1:9"  # discard port: the stand-in capturer never dials it


@pytest.fixture
def held() -> Iterator[HeldCapturer]:
    capturer = HeldCapturer()
    yield capturer
    capturer.release()


@pytest.fixture
def make_service(
    make_service: Callable[..., Service], held: HeldCapturer
) -> Iterator[Callable[..., Service]]:
    """The suite's service (tests/conftest.py) with targets trainer and serving, and the held
    capturer, released before the services stop."""

    def make(capturer=None, **settings) -> Service:
        settings.setdefault("targets", f"trainer={UNUSED} serving={UNUSED}")
        return make_service(capturer or held, **settings)

    yield make
    held.release()
