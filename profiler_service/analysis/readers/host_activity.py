"""What the host was doing, event by event: input, copies to the GPU, TF ops, Python, tf.data.

The GPU reading (gpu_activity.py) splits each GPU's idle time by what the host did meanwhile. The
host's events are classified in the same pass over them that collects tf.function calls and
iterators (host_events.py), so a capture's host plane is walked once; the class of an event name
is decided once per name.
"""

from __future__ import annotations

import re
from collections import defaultdict
from typing import Any

import numpy as np

from profiler_service.analysis.models import HostActivity

Intervals = tuple[np.ndarray, np.ndarray]  # (starts, ends) in ns, int64

# The step asking tf.data for its next element; what runs inside it is the input's too.
_GET_NEXT = re.compile(r"IteratorGetNext|MultiDeviceIteratorGetNext")
# tf.data's own work, on its threads or named by its iterators.
_TF_DATA = re.compile(
    r"^(Iterator::|ParallelMap|Prefetch|MapAndBatch|ParallelInterleave|ParallelBatch"
    r"|InstantiatedCapturedFunction)"
)
# Events that only enclose others while the thread waits for them: a tf.function call, a
# step marker, the executor's loop, a synchronisation with the device.
_ENCLOSING_NAMES = re.compile(
    r"^(TFE_Py_Execute|EagerExecute|EagerLocalExecute|EagerKernelExecute|FunctionRun"
    r"|ExecutorState::Process|TraceContext|cuStreamSynchronize|cudaStreamSynchronize"
    r"|cuCtxSynchronize|cuEventSynchronize|TensorHandle::.*WaitReady|.*::Wait$)"
)
# The host copying to or from the GPU itself, not just launching an asynchronous copy:
# PjRt's staging of host buffers (JAX, TF with XLA), CUDA's synchronous copies, and converting a
# device array to NumPy.
_TRANSFER = re.compile(
    r"^(H2D Dispatch|D2H Copy|.*Staging Buffer|cuMemcpy(HtoD|DtoH)(_v\d)?$|cudaMemcpy$"
    r"|np\.asarray\(jax\.Array\)|TransferToDevice|TransferFromDevice|CopyToDevice|CopyFromDevice"
    r"|EagerCopyToDevice|.*TransferLiteral(To|From)Device)"
)
_STEP_NAMES = frozenset(
    {"train", "test", "predict", "train_function", "test_function", "predict_function"}
)
_OP_EVENT = re.compile(r"^[^\s:]+:[A-Za-z_][\w]*$")  # "model/dense/MatMul:MatMul"
_OP = "op"  # an op's own event: TF ops, or Python when it ran eagerly (read per event)


def _classify(name: str) -> HostActivity | str | None:
    """A host event's activity by its name; None for one that only encloses others while it
    waits (a tf.function call, a step, a sync)."""
    if _GET_NEXT.search(name):
        return HostActivity.INPUT
    if _TF_DATA.match(name):
        return HostActivity.TF_DATA
    if name.startswith("$"):  # the Python tracer
        return HostActivity.PYTHON
    if _TRANSFER.match(name):
        return HostActivity.TRANSFER
    if _ENCLOSING_NAMES.match(name) or name in _STEP_NAMES:
        return None
    if _OP_EVENT.match(name):
        return _OP
    return HostActivity.TF_OPS


class HostActivityCollector:
    """The host's traced events by activity, fed one event at a time. Where events of two
    activities overlap (nested on one thread, or side by side on two), the GPU reading's order
    of priority decides, so an op run inside the step's get-next counts as input, and Python
    around an op as the op."""

    def __init__(self, event_names: dict[int, str], stat_names: dict[int, str]):
        self._kind_of = {mid: _classify(name) for mid, name in event_names.items()}
        self._flag_ids = {k: v for k, v in stat_names.items() if v in ("step_num", "is_eager")}
        self._spans: dict[Any, tuple[list[int], list[int]]] = defaultdict(lambda: ([], []))

    def add(self, event: Any, base_ps: int, on_tf_data: bool) -> None:
        if event.duration_ps <= 0:
            return
        act = self._kind_of.get(event.metadata_id, HostActivity.TF_OPS)
        if act is None:
            return
        if on_tf_data and act is not HostActivity.INPUT:
            act = HostActivity.TF_DATA
        elif act is _OP or act is HostActivity.TF_OPS:
            flag_ids = self._flag_ids
            flags = {flag_ids[s.metadata_id] for s in event.stats if s.metadata_id in flag_ids}
            if "step_num" in flags:
                return
            eager = act is _OP and "is_eager" in flags and self._eager(event)
            act = HostActivity.PYTHON if eager else HostActivity.TF_OPS
        begin = (base_ps + event.offset_ps) // 1000
        self._spans[act][0].append(begin)
        self._spans[act][1].append(begin + event.duration_ps // 1000)

    def _eager(self, event: Any) -> bool:
        return any(
            self._flag_ids.get(s.metadata_id) == "is_eager" and (s.int64_value or s.uint64_value)
            for s in event.stats
        )

    def intervals(self) -> dict[HostActivity, Intervals]:
        return {
            act: (np.array(b, np.int64), np.array(e, np.int64))
            for act, (b, e) in self._spans.items()
        }
