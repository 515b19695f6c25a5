"""TensorFlow's own device memory, read in the training process (the embedded agent): what the
look-back sampler samples and the `/metrics` collector exposes (exporters/tf_collector.py).

The collector never imports TensorFlow: it reads the module the job already imported
(`sys.modules["tensorflow"]`) and exports nothing when there is none, so registering it in the
sidecar could not pull TF in either (the sidecar does not register it at all). Nor does it start
TensorFlow's runtime: it reads nothing until the job's import has finished and the job has
started the runtime itself, so an agent started before `import tensorflow` neither races the
import nor keeps the job from configuring its devices (`set_memory_growth`,
`set_logical_device_configuration`: "cannot be modified after being initialized").
"""

from __future__ import annotations

import logging
import sys
import threading
import time
from collections.abc import Callable
from typing import Any

__all__ = ["TFMemoryProbe", "started_tensorflow"]

log = logging.getLogger(__name__)


def started_tensorflow() -> Any | None:
    """The job's `tensorflow` module once its import has finished and its runtime (the eager
    context) has been started by the job; None before. Listing devices or asking their memory
    starts the runtime, after which the job can no longer configure its devices."""
    tf = sys.modules.get("tensorflow")
    if tf is None or getattr(getattr(tf, "__spec__", None), "_initializing", False):
        return None
    eager = sys.modules.get("tensorflow.python.eager.context")
    runtime = eager.context_safe() if eager is not None else None
    return tf if getattr(runtime, "_initialized", False) else None


class TFMemoryProbe:
    """Bytes TensorFlow's allocator holds on each logical device, now and at its peak.

    `tf.config.experimental.get_memory_info(device)` answers `{"current", "peak"}` in bytes.
    Devices whose allocator keeps no statistics (TF's CPU allocator by default) answer a peak of
    0; they are left out rather than exported as a misleading 0. Devices that refuse the call are
    remembered and not asked again.
    """

    def __init__(self, tf_module: Callable[[], Any] | None = None, max_age_s: float = 0.0):
        self._tf_module = tf_module or started_tensorflow
        self.max_age_s = max_age_s  # scrapes reuse a reading this young (the sampler's)
        self._lock = threading.Lock()
        self._cached: tuple[float, list[tuple[str, str, int, int]]] | None = None
        self._devices: list[tuple[str, str]] | None = None  # (name for the API, device type)
        self._refused: set[str] = set()

    def _list_devices(self, tf: Any) -> list[tuple[str, str]]:
        if self._devices is None:
            self._devices = [
                (d.name.removeprefix("/device:"), d.device_type)
                for d in tf.config.list_logical_devices()
            ]
        return self._devices

    def read(self, max_age_s: float = 0.0) -> list[tuple[str, str, int, int]]:
        """[(device, device type, current bytes, peak bytes)] for devices that keep statistics.

        A reading younger than `max_age_s` is reused: the look-back sampler reads every second
        and a scrape then costs no second call into TensorFlow.
        """
        with self._lock:
            if self._cached is not None and time.monotonic() - self._cached[0] <= max_age_s:
                return self._cached[1]
        tf = self._tf_module()
        if tf is None:
            return []
        readings = []
        for name, device_type in self._list_devices(tf):
            if name in self._refused:
                continue
            try:
                info = tf.config.experimental.get_memory_info(name)
            except (ValueError, RuntimeError) as exc:
                log.info("TF device %s gives no memory info (%s); not asking again", name, exc)
                self._refused.add(name)
                continue
            if not info.get("peak"):
                continue
            readings.append((name, device_type, int(info.get("current", 0)), int(info["peak"])))
        with self._lock:
            self._cached = (time.monotonic(), readings)
        return readings
