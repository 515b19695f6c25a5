"""A finding's advice in the job's own framework, for its GPUs' vendor: `Advice`, declared on
each rule (`@rule(..., advice=Advice(jax=...))`) in its area's module.

The rules write their advice for TensorFlow and Keras on NVIDIA GPUs, the product's first users.
A capture says what ran it (readers/framework.py) and whose GPUs (gpu_models.py): a JAX job told
to wrap its step in `@tf.function` or to use `MirroredStrategy` would stop reading. A finding of a
JAX job (or Keras 3 on JAX) gets its rule's JAX advice where the TensorFlow one does not apply,
and a job on AMD GPUs gets ROCm's names for the same knobs (`ROCM_NAMES`); the registry applies
them (`registry.speak`). The findings' evidence and impact stay as the rules made them.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from profiler_service.analysis.models import Finding, Summary

__all__ = ["JAX_INPUT", "JAX_STEP", "JAX_SYNC", "ROCM_NAMES", "Advice"]


@dataclass(frozen=True)
class Advice:
    """What a rule's finding says in another framework's or vendor's words; None keeps the
    rule's own. `jax`: the recommendation for a JAX job (or a function of the finding, None to
    keep the rule's); `keras3_jax`: for Keras 3 on JAX, before `jax`; `jax_title`: the title
    for a JAX job, from the finding and the summary; `rocm`: the recommendation on AMD GPUs."""

    jax: str | Callable[[Finding], str | None] | None = None
    keras3_jax: str | None = None
    jax_title: Callable[[Finding, Summary], str] | None = None
    rocm: str | None = None


JAX_STEP = (
    "put the whole training step (loss, gradients, update) under one `jax.jit`, donate the "
    "state it replaces (`jax.jit(step, donate_argnums=0)`)"
)
JAX_INPUT = (
    "read ahead of the device: a `tf.data` pipeline with `.prefetch(tf.data.AUTOTUNE)` and a "
    "parallel `map`, or Grain (`grain.DataLoader(..., worker_count=N)`), and put the next batch "
    "on the device while this step runs (`jax.device_put` one batch ahead)"
)
JAX_SYNC = (
    "keep the loop free of host synchronisation: `float(loss)`, `.item()`, `np.asarray(x)` or "
    "`.block_until_ready()` every step make the host wait for the device; log every N steps"
)

# On AMD GPUs (ROCm), the same knobs under their names there, in every finding's advice.
ROCM_NAMES = (
    ("CUDA_VISIBLE_DEVICES", "HIP_VISIBLE_DEVICES"),
    ("nvidia.com/gpu", "amd.com/gpu"),
    ("Tensor Cores", "Matrix Cores"),
    ("NCCL/RCCL", "RCCL"),
    ("or use NCCL for all-reduce", "or use RCCL for all-reduce"),
)
