"""The processes that run an analysis: the analyzer (a worker per analysis: timeout, memory
limit), the worker itself, the warm pool, and the analyzer over many runs (corpus.py)."""
