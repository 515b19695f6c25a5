"""A stand-in for `pynvml` (nvidia-ml-py) with one GPU, first on a service process's PYTHONPATH.

tests/deploy/test_metric_names.py uses it so the real service exports its per-GPU series on a
machine without a GPU; the collector itself is tested against NVML in tests/exporters.
"""

NVML_TEMPERATURE_GPU = 0


class NVMLError(Exception):
    pass


class _Utilization:
    gpu = 37
    memory = 12


class _Memory:
    used = 3 * 2**30
    total = 16 * 2**30


def nvmlInit():
    return None


def nvmlShutdown():
    return None


def nvmlDeviceGetCount():
    return 1


def nvmlDeviceGetHandleByIndex(index):
    return index


def nvmlDeviceGetUUID(handle):
    return "GPU-00000000-0000-0000-0000-000000000000"


def nvmlDeviceGetName(handle):
    return "Stand-in GPU"


def nvmlDeviceGetUtilizationRates(handle):
    return _Utilization()


def nvmlDeviceGetMemoryInfo(handle):
    return _Memory()


def nvmlDeviceGetPowerUsage(handle):
    return 123_000


def nvmlDeviceGetTemperature(handle, sensor):
    return 55


def nvmlDeviceGetComputeRunningProcesses(handle):
    return []  # nvmlProcessInfo_t list (pid, usedGpuMemory): no process on the stand-in GPU
