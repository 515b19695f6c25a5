"""Which GPU a capture's plane is, and what its kernels' names say, for NVIDIA and AMD.

A device plane carries the GPU's figures (compute capability, SMs or compute units, memory)
and, on ROCm, `device_vendor: AMD`; the kernels' names say what ran on the matrix units and in
which precision. NVIDIA's libraries name their MMA shapes (cuBLAS `s16816`, CUTLASS `tensorop`,
cuBLASLt `nvjet`); AMD's name the MFMA instruction and the data types: rocBLAS and hipBLASLt's
Tensile kernels `Cijk_Ailk_Bljk_BBS_BH_MT256x128x32_MI16x16x16x1_...` (`MI16x16x16`: a matrix
core instruction; `BBS`: bf16 inputs, fp32 accumulation; `HHS` fp16, `S` fp32), Composable
Kernel's `..._xdl_...` and `wmma`, MIOpen's `igemm`/`xdlops` convolutions. Real MI300X captures
(tests/fixtures/gpu-captures/amd-tracelens-mi300x) carry these names.
"""

from __future__ import annotations

import re
from collections import Counter
from enum import StrEnum
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from profiler_service.analysis.models import Summary

__all__ = [
    "COPY_DIRECTION",
    "COPY_EVENT",
    "GEMM_KERNEL",
    "KNOWN_AMD_GPUS",
    "KNOWN_GPUS",
    "SIXTEEN_BIT_KERNEL",
    "TENSOR_CORE_KERNEL",
    "TENSOR_CORE_OPS",
    "Vendor",
    "compute_capability",
    "describe_devices",
    "model_name",
    "sixteen_bit_time",
    "vendor_of",
]


class Vendor(StrEnum):
    NVIDIA = "nvidia"
    AMD = "amd"

    @property
    def matrix_units(self) -> str:
        """What the vendor calls the units that multiply matrices in 16 bits."""
        return "Matrix Cores" if self is Vendor.AMD else "Tensor Cores"


def vendor_of(figures: dict[str, Any]) -> Vendor:
    vendor = str(figures.get("device_vendor") or "").lower()
    return Vendor.AMD if "amd" in vendor or "advanced micro" in vendor else Vendor.NVIDIA


TENSOR_CORE_OPS = re.compile(
    r"(MatMul|Conv\d?D|Conv2DBackprop|Conv3DBackprop|Einsum|CudnnRNN|dot|convolution|gemm|Gemm)"
)
# Kernels that run on the matrix units: cuBLAS/cuDNN/CUTLASS name their MMA shape or path;
# AMD's Tensile (rocBLAS, hipBLASLt) the MFMA instruction (`_MI16x16x16x1_`), Composable Kernel
# and MIOpen their XDL (MFMA) or WMMA path.
TENSOR_CORE_KERNEL = re.compile(
    r"(884|1688|16816|hmma|HMMA|tensorop|xmma|wmma|_tc_|s16816|h16816|bf16816|tf32|cutlass.*mma"
    r"|sm\d\d_xmma|gmma|nvjet"
    r"|_MI\d+x\d+x\d+|[_-]xdl|xdlops|mfma|MFMA)"
)
# Matmul and convolution kernels by their own names, where the plane maps them to no op: also
# AMD's Tensile GEMMs (`Cijk_`), MIOpen's implicit-GEMM and im2col convolutions. XLA's
# `loop_convert_fusion` (a dtype conversion) is not a convolution.
GEMM_KERNEL = re.compile(
    r"(gemm|Gemm|GEMM|sgemm|[cC]onv(?!ert)|winograd|dot_general|Cijk_|igemm|Im\dd2Col|im2col)"
)
# Kernels that compute in 16 bits say so: cuBLAS/cuDNN/CUTLASS (fp16, bf16, h884, h1688,
# h16816, hmma), cuBLASLt's nvjet kernels (`_h_` for half-width inputs), Composable Kernel's
# `half_t`/`bhalf_t`, and Tensile's data-type code (its first letter H or B: `_HHS_`, `_BBS_`).
SIXTEEN_BIT_KERNEL = re.compile(
    r"(bf16|fp16|f16|half|h884|h1688|h16816|hmma|HMMA|_h_|Cijk_A[a-z]+_B[a-z]+_[HB])"
)
# Copies: CUPTI's `MemcpyH2D`..., ROCm's `CopyHostToDevice`... (rocprofiler's names).
COPY_EVENT = re.compile(
    r"^(?:Memcpy|Copy)(H2D|D2H|D2D|P2P|DtoD|HtoD|DtoH|PtoP|HostToDevice|DeviceToHost"
    r"|DeviceToDevice|PeerToPeer)?"
)
COPY_DIRECTION = {
    "H2D": "h2d", "HtoD": "h2d", "HostToDevice": "h2d",
    "D2H": "d2h", "DtoH": "d2h", "DeviceToHost": "d2h",
}  # fmt: skip  # anything else: within the GPU or peer to peer

# Known NVIDIA GPUs: (name, compute capability, SMs, nominal memory in GiB). The plane gives the
# usable memory, a little under the nominal size; a name is given only where one GPU matches.
KNOWN_GPUS: tuple[tuple[str, str, int, int], ...] = (
    ("Tesla K80", "3.7", 13, 12),
    ("Tesla P4", "6.1", 20, 8),
    ("GeForce GTX 1080", "6.1", 20, 8),
    ("GeForce GTX 1080 Ti", "6.1", 28, 11),
    ("Tesla P100-16GB", "6.0", 56, 16),
    ("Tesla P100-12GB", "6.0", 56, 12),
    ("Tesla V100-16GB", "7.0", 80, 16),
    ("Tesla V100-32GB", "7.0", 80, 32),
    ("Titan V", "7.0", 80, 12),
    ("Tesla T4", "7.5", 40, 16),
    ("GeForce RTX 2060", "7.5", 30, 6),
    ("GeForce RTX 2070", "7.5", 36, 8),
    ("GeForce RTX 2080", "7.5", 46, 8),
    ("GeForce RTX 2080 Ti", "7.5", 68, 11),
    ("Quadro RTX 6000", "7.5", 72, 24),
    ("Quadro RTX 8000", "7.5", 72, 48),
    ("A100-40GB", "8.0", 108, 40),
    ("A100-80GB", "8.0", 108, 80),
    ("A30", "8.0", 56, 24),
    ("A10", "8.6", 72, 24),
    ("A40", "8.6", 84, 48),
    ("GeForce RTX 3080", "8.6", 68, 10),
    ("GeForce RTX 3090", "8.6", 82, 24),
    ("L4", "8.9", 58, 24),
    ("L40S", "8.9", 142, 48),
    ("GeForce RTX 4090", "8.9", 128, 24),
    ("H100 SXM", "9.0", 132, 80),
    ("H100 PCIe", "9.0", 114, 80),
    ("H200", "9.0", 132, 141),
)
MEMORY_USABLE_SHARE = 0.85  # usable memory is at least this share of the nominal size

# AMD Instinct and Radeon GPUs: (name, compute capability as XLA reports the gfx target, compute
# units, nominal memory in GiB). gfx942 (MI300 series) reads 9.4, gfx950 (MI350 series) 9.5.
# GPUs the figures cannot tell apart share one entry.
KNOWN_AMD_GPUS: tuple[tuple[str, str, int, int], ...] = (
    ("Instinct MI100", "9.0", 120, 32),
    ("Instinct MI210 or MI250 (one die)", "9.0", 104, 64),
    ("Instinct MI250X (one die)", "9.0", 110, 64),
    ("Instinct MI300X", "9.4", 304, 192),
    ("Instinct MI325X", "9.4", 304, 256),
    ("Instinct MI300A", "9.4", 228, 128),
    ("Instinct MI350X or MI355X", "9.5", 256, 288),
    ("Radeon RX 7900 XTX", "11.0", 96, 24),
    ("Radeon PRO W7900", "11.0", 96, 48),
)


def model_name(
    cc: str | None, sms: int | None, memory: int | None, figures: dict[str, Any]
) -> str | None:
    """The plane's own name for the GPU, else the one known GPU its figures match."""
    for key in ("device_name", "gpu_name", "device_model"):
        if isinstance(figures.get(key), str) and figures[key]:
            return figures[key]
    if cc is None or sms is None or memory is None:
        return None
    gib = memory / 2**30
    known = KNOWN_AMD_GPUS if vendor_of(figures) is Vendor.AMD else KNOWN_GPUS
    matches = [
        name
        for name, known_cc, known_sms, nominal in known
        if (known_cc, known_sms) == (cc, sms) and nominal * MEMORY_USABLE_SHARE <= gib <= nominal
    ]
    return matches[0] if len(matches) == 1 else None


# How long a matmul or convolution compute-bound in 16 bits takes against 32 bits, by
# architecture: the ratio of the vendor's dense peak figures, 32-bit over 16-bit (bf16/fp16),
# for 32-bit kernels on the matrix units (NVIDIA's TF32, which TensorFlow and JAX use by
# default from Ampere on; AMD's FP32 MFMA) and off them (CUDA cores, vector FP32). Keys:
# (vendor, compute capability at least), the last one that applies wins.
_SIXTEEN_BIT_TIME: tuple[tuple[Vendor, tuple[int, int], float, float, str], ...] = (
    (Vendor.NVIDIA, (7, 0), 0.125, 0.125, "V100: FP32 15.7 vs FP16 Tensor Core 125 TFLOPS"),
    (Vendor.NVIDIA, (7, 5), 0.125, 0.125, "T4: FP32 8.1 vs FP16 Tensor Core 65 TFLOPS"),
    (Vendor.NVIDIA, (8, 0), 0.5, 0.0625, "A100: TF32 156, FP32 19.5 vs BF16 312 TFLOPS"),
    (Vendor.NVIDIA, (8, 6), 0.5, 0.25, "A10/L4: TF32 62.5, FP32 31.2 vs BF16 125 TFLOPS"),
    (Vendor.NVIDIA, (9, 0), 0.5, 0.068, "H100/H200: TF32 495, FP32 67 vs BF16 989 TFLOPS"),
    (Vendor.NVIDIA, (10, 0), 0.5, 0.036, "B200: TF32 1100, FP32 80 vs BF16 2250 TFLOPS"),
    (Vendor.AMD, (9, 0), 0.25, 0.125, "MI250X: FP32 matrix 95.7, vector 47.9 vs BF16 383 TFLOPS"),
    (Vendor.AMD, (9, 4), 0.125, 0.0625, "MI300X: FP32 matrix 163.4 vs BF16 1307 TFLOPS"),
    (Vendor.AMD, (9, 5), 0.0625, 0.0625, "MI355X: FP32 157.3 vs BF16 2516 TFLOPS"),
    (Vendor.AMD, (11, 0), 0.5, 0.5, "RX 7900 XTX: FP32 61 vs FP16 123 TFLOPS"),
)


def compute_capability(text: str | None) -> tuple[int, int] | None:
    """`"9.0"` -> (9, 0); None where the plane gives none, or not as major.minor."""
    major, _, minor = (text or "").partition(".")
    return (int(major), int(minor or 0)) if major.isdigit() and (minor or "0").isdigit() else None


def sixteen_bit_time(vendor: Vendor, cc: tuple[int, int]) -> tuple[float, float, str] | None:
    """(on the matrix units, off them, the figures): a compute-bound 32-bit matmul's time in
    16 bits, as a share of its time now; None for a GPU without 16-bit matrix units."""
    found = None
    for known_vendor, since, on_units, off_units, figures in _SIXTEEN_BIT_TIME:
        if known_vendor is vendor and cc >= since:
            found = (on_units, off_units, figures)
    return found


# Model names as the summary gives them, shortened for a table's cell ("GeForce RTX 2060").
_VENDOR_PREFIXES = ("GeForce ", "Tesla ", "NVIDIA ")
_TIMES = "\N{MULTIPLICATION SIGN}"


def describe_devices(summary: Summary) -> str:
    """`1×GPU RTX 2060 (7.5)`, `8×GPU V100-16GB (7.0), 2 active`, or the hardware type."""  # noqa: RUF002
    gpus = summary.gpu.devices if summary.gpu else []
    if not gpus:
        kind = summary.utilisation.hardware_type or ""
        return {"CPU_ONLY": "CPU", "": "?"}.get(kind, kind)
    groups = Counter((_short_model(d.model), d.compute_capability) for d in gpus)
    active = sum(1 for d in gpus if d.kernels.count)
    parts = []
    for (model, capability), count in groups.items():
        name = f"{count}{_TIMES}GPU" + (f" {model}" if model else "")
        parts.append(name + (f" ({capability})" if capability else ""))
    text = " + ".join(parts)
    if active < len(gpus):
        text += f", {active} active"
    return text


def _short_model(model: str | None) -> str | None:
    for prefix in _VENDOR_PREFIXES:
        if model and model.startswith(prefix):
            return model.removeprefix(prefix)
    return model
