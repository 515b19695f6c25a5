"""Whether a capture holds allocator events, and what to tell the user when it holds none.

TensorFlow records a `MemoryAllocation` / `MemoryDeallocation` event for each allocation only
from its BFC allocators: a GPU's always, the CPU's when `TF_CPU_ALLOCATOR_USE_BFC=true`, or when
oneDNN is on (TF 2.21 turns it on by default only on CPUs with AVX-512 VNNI/BF16 or AMX: not on
an AMD EPYC or an older Intel), and even then not for every job (a small MLP or a Python-decoding
input pipeline records none). Without them XProf's memory profile, `memory_growth`,
`step_temporaries` and what each op allocates have nothing to read: the snapshot says so, and
how to turn them on, rather than saying nothing about memory.
"""

from __future__ import annotations

from profiler_service.analysis.models import MemoryUnrecorded

# What the job sets, before TensorFlow is imported, to record them on any CPU.
RECORDING_VARIABLE = "TF_CPU_ALLOCATOR_USE_BFC"
# Measured by bench/bench_allocator_events.py on a 2-core Xeon (oneDNN off, as without AVX-512):
# the BFC allocator's step time against the default allocator's, over Keras MLPs of widths
# 64-1024, and its peak resident memory against the default's (docs/findings.md).
MEASURED_COST = (
    "Measured on Keras MLPs with oneDNN off, the BFC allocator's steps took 0.91-1.02x the "
    "default allocator's time, its peak resident memory no higher."
)


def unrecorded(hosts: list[str], *, on_gpu: bool) -> MemoryUnrecorded:
    """The sentence for `hosts`, whose capture files hold no allocator event."""
    where = "the GPU's and the host's allocators" if on_gpu else "the job's CPU allocator"
    why = (
        f"{where} recorded no memory events in this capture, so memory growth, step "
        "temporaries and the memory profile cannot be read. TensorFlow records them on the "
        "CPU only from its BFC allocator: by default only where oneDNN is on (TF 2.21: CPUs "
        "with AVX-512 VNNI/BF16 or AMX), and not for every job even there"
    )
    if on_gpu:
        why += "; a GPU's allocator records them unless the host tracer level is below 2"
    return MemoryUnrecorded(
        hosts=hosts,
        why=why + ".",
        remedy=(
            f"Set {RECORDING_VARIABLE}=true (or TF_ENABLE_ONEDNN_OPTS=1) in the job's "
            "environment before TensorFlow is imported (the agent sets it when it is started "
            "first), and capture at host tracer level 2 or more (the default)."
        ),
        cost=MEASURED_COST,
    )
