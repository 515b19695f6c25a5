"""profiler-service: bounded on-demand captures of TensorFlow jobs, analysed with XProf."""

__version__ = "0.1.0"

__all__ = ["__version__"]
