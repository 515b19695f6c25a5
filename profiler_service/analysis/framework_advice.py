"""Each finding's advice in the job's own framework, for its GPUs' vendor.

The rules write their advice for TensorFlow and Keras on NVIDIA GPUs, the product's first users.
A capture says what ran it (framework.py) and whose GPUs (gpu_models.py): a JAX job told to wrap
its step in `@tf.function` or to use `MirroredStrategy` would stop reading. Here a finding of a
JAX job (or Keras 3 on JAX) gets the JAX advice for its rule where the TensorFlow one does not
apply, and a job on AMD GPUs gets ROCm's names for the same knobs. The findings' titles,
evidence and impact stay as the rules made them.
"""

from __future__ import annotations

from profiler_service.analysis.evidence import DeviceIdleEvidence, InputBoundEvidence
from profiler_service.analysis.models import Finding, HostActivity, Summary
from profiler_service.analysis.readers.framework import Framework

__all__ = ["JAX_ADVICE", "speak"]

_JAX_STEP = (
    "put the whole training step (loss, gradients, update) under one `jax.jit`, donate the "
    "state it replaces (`jax.jit(step, donate_argnums=0)`)"
)
_JAX_INPUT = (
    "read ahead of the device: a `tf.data` pipeline with `.prefetch(tf.data.AUTOTUNE)` and a "
    "parallel `map`, or Grain (`grain.DataLoader(..., worker_count=N)`), and put the next batch "
    "on the device while this step runs (`jax.device_put` one batch ahead)"
)
_JAX_SYNC = (
    "keep the loop free of host synchronisation: `float(loss)`, `.item()`, `np.asarray(x)` or "
    "`.block_until_ready()` every step make the host wait for the device; log every N steps"
)

JAX_ADVICE: dict[str, str] = {
    "mixed_precision": "Compute in bfloat16: keep the parameters in float32 and cast them and "
    "the inputs to `jnp.bfloat16` inside the jitted step (Flax: `dtype=jnp.bfloat16`, "
    "`param_dtype=jnp.float32`), and keep matmul and convolution dimensions multiples of 8.",
    "tensor_cores_unused": "Compute the matmuls and convolutions in bfloat16 (cast inside the "
    "jitted step; Flax `dtype=jnp.bfloat16`), and keep their dimensions multiples of 8.",
    "kernel_launch_bound": f"Each kernel costs a launch on the host: {_JAX_STEP}, run several "
    "steps per call with `jax.lax.scan` over a stack of batches, and give each step more work "
    "(a larger batch).",
    "host_overhead": f"The host runs Python between the device's work: {_JAX_STEP}, and "
    f"{_JAX_SYNC}.",
    "between_steps": "Look at what the loop does between the jitted steps: Python data loading "
    f"or conversion ({_JAX_INPUT}), logging, metrics or checkpoints every step; {_JAX_SYNC}. "
    "Short steps: run several per call with `jax.lax.scan`.",
    "eager_execution": f"Ops run one by one from Python: {_JAX_STEP}; outside `jax.jit` every "
    "`jnp` call is dispatched on its own.",
    "host_device_transfer": "Keep arrays on the device between steps: `jax.device_put` the "
    "batch one step ahead (or shard it there), send uint8 images and cast on the device, and "
    "never pull device arrays back in the step (`np.asarray`, `float()`).",
    "communication_bound": "Grow the per-device batch so compute hides the collectives, shard "
    "with `jax.sharding.NamedSharding` so XLA overlaps them with compute, and check the "
    "collective library's (NCCL/RCCL) environment on the node.",
    "gpu_imbalance": "Place work on every device the job holds: shard the batch over a "
    "`jax.sharding.Mesh` of all `jax.devices()` (`NamedSharding`), or limit the job to the "
    "devices it uses (`CUDA_VISIBLE_DEVICES` and the `nvidia.com/gpu` request).",
    "no_step_markers": "Mark each step: `with jax.profiler.StepTraceAnnotation('train', "
    "step_num=i): state = train_step(state, batch)`; capture while the job is training.",
    "op_dominates": "Optimise this op first: check its shapes and dtype (bfloat16), and "
    "whether XLA fuses it with its neighbours (one `jax.jit` over the whole step).",
    "memory_pressure": "One larger batch or model from out-of-memory: reduce the batch, compute "
    "in bfloat16, recompute activations (`jax.checkpoint` around the blocks), donate the state "
    "the step replaces (`donate_argnums`), and mind JAX's preallocation "
    "(`XLA_PYTHON_CLIENT_MEM_FRACTION`) when something else shares the device.",
    "memory_temporaries": "Growing arrays step by step keeps every intermediate alive: "
    "preallocate and write with `.at[i].set(...)` inside the jitted step, or loop with "
    "`jax.lax.scan`, which XLA lays out once.",
    "step_temporaries": "Not a leak: the memory comes back at the end of every step. To lower "
    "the peak, recompute activations (`jax.checkpoint`), donate the buffers the step replaces "
    "(`jax.jit(step, donate_argnums=0)`), and compute in smaller chunks (`jax.lax.map` over "
    "slices, smaller batches).",
    "memory_growth": "Something keeps each step's arrays alive: device arrays appended to a "
    "Python list (losses, outputs, metrics kept as arrays instead of `float()` every N steps), "
    "new shapes compiling new executables that `jax.jit` caches (pad to fixed shapes), and "
    "state not donated to the step that replaces it (`donate_argnums`).",
    "xla_recompilation": "`jax.jit` compiles again for every new input shape, dtype or static "
    "argument: feed it few shapes (fixed batches, sequences padded to a few buckets, the last "
    "partial batch padded or dropped), keep `static_argnums` values few, and watch "
    "`jax.config.update('jax_log_compiles', True)`.",
    "compile_time": "Steps keep compiling: `jax.jit` compiles for every new input shape or "
    "static argument: pad to fixed shapes, keep static arguments few, and cache compilations "
    "across runs (`jax.config.update('jax_compilation_cache_dir', ...)`).",
}
JAX_ADVICE["device_trace_missing"] = (
    "Nothing here says whether the GPUs worked; fix the trace and capture again. The job's log "
    "names the cause at the capture's start: CUPTI not found (install the CUDA wheels JAX "
    'brings, `pip install -U "jax[cuda12]"`, or put CUDA\'s `extras/CUPTI/lib64` on '
    "`LD_LIBRARY_PATH`); `CUPTI_ERROR_INSUFFICIENT_PRIVILEGES` (set "
    '`options nvidia "NVreg_RestrictProfilingToAdminUsers=0"` on the node, or give the '
    "container `SYS_ADMIN`); or a trace started before the GPU backend was initialised."
)
# On AMD GPUs the tracer is ROCm's, not CUPTI.
ROCM_TRACE_MISSING = (
    "Nothing here says whether the GPUs worked; fix the trace and capture again. ROCm's tracer "
    "(roctracer / rocprofiler-sdk, which XLA's ROCm profiler loads) recorded nothing: check "
    "that the ROCm profiler libraries are in the image (`/opt/rocm/lib/libroctracer64.so` or "
    "`librocprofiler-sdk.so`), that the container reaches `/dev/kfd` and `/dev/dri` (the "
    "`video` and `render` groups), and that the capture asked for a device trace "
    "(`device_tracer_level=1`)."
)

# input_bound, where the capture shows no tf.data pipeline to advise on.
_JAX_GENERIC_INPUT = (
    f"The device waits for input: {_JAX_INPUT}; decode and augment in parallel workers, not in "
    "the training loop's Python."
)

# Keras 3 on JAX: the JAX knobs through Keras's own API where it has one.
KERAS3_JAX_ADVICE: dict[str, str] = {
    "mixed_precision": "Compute in bfloat16: `keras.mixed_precision.set_global_policy("
    '"mixed_bfloat16")` before building the model (the variables stay float32), and keep '
    "matmul and convolution dimensions multiples of 8.",
    "no_step_markers": "Pass `profiler_service.steps.ProfilerStepCallback()` to `model.fit`; "
    "capture while the job is training.",
    "kernel_launch_bound": "Each kernel costs a launch on the host: keep `jit_compile=True` "
    "(the JAX backend's default), run several steps per call (`model.compile(..., "
    "steps_per_execution=N)`), and give each step more work (a larger batch).",
    "between_steps": "Run several steps per call, `model.compile(..., steps_per_execution=N)` "
    "with N of 8 to 100, and look for per-step Python in callbacks (logging, metrics, "
    "checkpoints every step).",
}

_JAX_IDLE = {
    HostActivity.INPUT: f"The device waits for input: {_JAX_INPUT}.",
    HostActivity.TF_DATA: f"The input pipeline's threads are busy while the device waits: "
    f"{_JAX_INPUT}.",
    HostActivity.TRANSFER: "The device waits while the host copies to or from it: "
    + JAX_ADVICE["host_device_transfer"],
    HostActivity.TF_OPS: JAX_ADVICE["kernel_launch_bound"],
    HostActivity.PYTHON: f"Python runs between the device's kernels: {_JAX_STEP}, and {_JAX_SYNC}.",
    HostActivity.NOTHING: "Nothing traced on the host covers the gaps: look for Python between "
    f"steps and synchronous file reads; {_JAX_SYNC}.",
}

# What a title says of TensorFlow's host activity, as it reads for a JAX job.
_JAX_TITLES = (
    ("running TF ops and launching kernels", "running JAX's runtime and launching kernels"),
    ("Python or I/O between TF ops", "Python or I/O between the jitted computations"),
)

# On AMD GPUs (ROCm), the same knobs under their names there.
_ROCM_NAMES = (
    ("CUDA_VISIBLE_DEVICES", "HIP_VISIBLE_DEVICES"),
    ("nvidia.com/gpu", "amd.com/gpu"),
    ("Tensor Cores", "Matrix Cores"),
    ("NCCL/RCCL", "RCCL"),
    ("or use NCCL for all-reduce", "or use RCCL for all-reduce"),
)


def speak(finding: Finding, summary: Summary) -> Finding:
    """`finding` with its advice in the job's framework and its GPUs' vendor's names."""
    framework = summary.framework
    if framework in (Framework.JAX, Framework.KERAS3_JAX):
        advice = _jax_advice(finding, summary, keras=framework == Framework.KERAS3_JAX)
        if advice:
            finding.recommendation = advice
        for tensorflow, jax in _JAX_TITLES:
            finding.title = finding.title.replace(tensorflow, jax)
    gpu = summary.gpu
    if gpu is not None and gpu.devices and all(d.vendor == "amd" for d in gpu.devices):
        if finding.rule == "device_trace_missing":
            finding.recommendation = ROCM_TRACE_MISSING
        for nvidia, rocm in _ROCM_NAMES:
            finding.recommendation = finding.recommendation.replace(nvidia, rocm)
    return finding


def _jax_advice(finding: Finding, summary: Summary, keras: bool) -> str | None:
    if keras and finding.rule in KERAS3_JAX_ADVICE:
        return KERAS3_JAX_ADVICE[finding.rule]
    if finding.rule == "input_bound":
        generic = InputBoundEvidence.model_validate(finding.evidence).generic_advice
        return _JAX_GENERIC_INPUT if generic else None
    if finding.rule == "device_idle":
        meanwhile = DeviceIdleEvidence.model_validate(finding.evidence).idle_while_host_pct or {}
        if not meanwhile:
            return None
        cause = HostActivity(max(meanwhile, key=meanwhile.get))
        return _JAX_IDLE[cause]
    return JAX_ADVICE.get(finding.rule)
