"""Probes: what the job and its GPUs read now (NVML, TensorFlow's device memory, training steps).

The look-back sampler (lookback/) samples them each second; the `/metrics` collectors
(exporters/) expose them at scrape time. Both import them from here, and neither from the other.
"""
