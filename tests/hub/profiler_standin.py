"""A loopback stand-in for a GPU training job's TF profiler server (a plain module, like
helpers.py): no GPU here, so it answers TF 2.21's continuous-profiling RPCs, which a sidecar's
look-back trace calls (`PROFILER_LOOKBACK_TRACE_S`, capture/continuous.py), with the XSpace of a
real GPU capture recorded elsewhere (tests/fixtures/gpu-captures). The sidecar then writes,
analyses, mirrors and serves that capture as its own, and the hub's ledger reads its idle
causes like any other capture's.
"""

from __future__ import annotations

from concurrent import futures
from pathlib import Path

import grpc

from profiler_service.capture.continuous import SERVICE, _messages

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "gpu-captures"
# An H200 JAX job starved of input (its README names the source): idle 99.7 % of the time.
GPU_CAPTURE = FIXTURES / "jax-h200" / "input_starved" / "h200.xplane.pb"


class RecordedProfiler:
    """Serves `xplane` (bytes of an `.xplane.pb`) as every continuous session's snapshot."""

    def __init__(self, xplane: bytes):
        self.snapshots_total = 0
        answer = _messages()["ProfileResponse"](xspace=xplane).SerializeToString()

        def snapshot(request: bytes, context: grpc.ServicerContext) -> bytes:
            self.snapshots_total += 1
            return answer

        def nothing(request: bytes, context: grpc.ServicerContext) -> bytes:
            return b""

        methods = {
            "StartContinuousProfiling": nothing,
            "GetSnapshot": snapshot,
            "StopContinuousProfiling": nothing,
        }
        handler = grpc.method_handlers_generic_handler(
            SERVICE.strip("/"),
            {name: grpc.unary_unary_rpc_method_handler(fn) for name, fn in methods.items()},
        )
        self.server = grpc.server(futures.ThreadPoolExecutor(max_workers=4))
        self.server.add_generic_rpc_handlers((handler,))
        self.port = self.server.add_insecure_port("127.0.0.1:0")
        self.server.start()

    @property
    def address(self) -> str:
        return f"127.0.0.1:{self.port}"

    def stop(self) -> None:
        self.server.stop(grace=1).wait()
