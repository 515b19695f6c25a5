"""The summary's reading of the job's Python stacks (python_stacks.py), and a finding's `where`:
the user's code that the samples blame. Re-exported by models.py.

Shares are of the samples named beside them (`_share`, 0-1).
"""

from __future__ import annotations

from pydantic import BaseModel, Field


class CodeLine(BaseModel):
    """One line of the user's source."""

    file: str
    line: int
    code: str  # the line as written, stripped


class CodeSite(BaseModel):
    """One place in the user's code: a function, and the line of it the samples hold most."""

    file: str  # as the job's Python names it (an absolute path, or relative to its start)
    line: int
    function: str  # its qualified name (`Trainer.step`), `<lambda>` for a lambda
    share: float  # of the samples this site is counted among (the reading's, below)
    # For a call that traced a tf.function: the Python function it traced, where the stacks
    # name it (AutoGraph's `tf__<name>`, or the function's own frame).
    traces: str | None = None
    # For a function tf.data runs in Python: the call that wired it into the pipeline
    # (`tf.numpy_function(decode, ...)`), where the user's source was readable.
    wired_at: CodeLine | None = None


class PythonStacks(BaseModel):
    """What the job's Python did while the trace ran, from its sampled stacks: the user's code
    that tf.data ran, and the user's lines that the training loop's Python held most."""

    file: str  # the collapsed stacks in the snapshot (`python.stacks.folded`); "" where none
    samples: int  # thread samples in all (a thread's stack at one tick)
    hz: float | None = None  # the sampler's rate, where it said
    source: str = "agent"  # who sampled: the agent's own thread, or the sidecar's py-spy
    # Where a sidecar's py-spy was on but sampled nothing (not allowed, no such process): why,
    # and how to allow it.
    unavailable: str | None = None
    # Samples of Python called by tf.data (py_function, numpy_function, from_generator): the
    # user's function each entered first, by its share of them.
    pipeline_samples: int = 0
    pipeline_functions: list[CodeSite] = Field(default_factory=list)
    # Of those samples, the share whose innermost frame is a library's (NumPy, TensorFlow's own
    # Python), not the user's line: time in calls that may let the GIL go, which a parallel
    # map can overlap, where the user's own Python lines cannot be.
    pipeline_library_share: float = 0.0
    # Samples of the other threads that run the user's code: the user's innermost line in each,
    # where it was running Python or eager ops itself (not a tf.function's graph, not inside
    # Keras' own fit/evaluate/predict loop), by its share of all those threads' samples.
    loop_samples: int = 0
    loop_lines: list[CodeSite] = Field(default_factory=list)
    # Samples of the loop's threads that were tracing a tf.function (building its graph): the
    # user's line that called it, by its share of them, with the function it traced.
    tracing_samples: int = 0
    tracing_calls: list[CodeSite] = Field(default_factory=list)
