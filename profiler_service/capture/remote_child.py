"""Child process of RemoteCapturer: one call of XProf's capture client, result on stdout.

It runs beside the job being traced, often on the same cores, so it imports only XProf's client
(no pydantic models: 0.05 s of CPU instead of 0.2 s) and runs at a lower priority than the job.
"""

from __future__ import annotations

import json
import sys

from profiler_service.child_process import die_with_parent, lower_priority, report

RESULT_MARKER = "PROFILER_SERVICE_RESULT "


def main() -> None:
    request = json.loads(sys.argv[1])
    die_with_parent(int(sys.argv[2]))
    lower_priority()  # it only waits on gRPC: yield the CPU to the training threads
    try:
        from xprof.convert import _pywrap_profiler_plugin

        _pywrap_profiler_plugin.trace(
            request["service_addr"],
            request["logdir"],
            request["worker_list"],
            request["include_dataset_ops"],
            request["duration_ms"],
            request["num_tracing_attempts"],
            request["options"],
        )
        result = {"ok": True}
    except Exception as exc:  # every failure is reported to the parent, which classifies it
        result = {"ok": False, "error": f"{type(exc).__name__}: {exc}"}
    report(RESULT_MARKER, json.dumps(result))


if __name__ == "__main__":
    main()
