"""profiler-service: bounded on-demand captures of TensorFlow jobs, analysed with XProf."""

__version__ = "0.2.0"

__all__ = ["__version__"]
