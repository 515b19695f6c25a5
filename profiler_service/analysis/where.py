"""A finding's `where`: the user's code its cause is in, read from the job's Python stacks
(summary.python_stacks, python_stacks.py), and its recommendation then speaking of that code.

- input_bound: the user's functions that tf.data ran in Python (py_function, numpy_function,
  from_generator), each entered from tf.data, by share of the pipeline's Python samples;
- eager_execution, host_overhead, between_steps: the user's innermost lines where the training
  loop's Python ran by itself (not a tf.function's graph, not Keras' own loop), by share of the
  samples of the threads that run the user's code;
- retracing, xla_recompilation: the user's lines that called the tf.function while it traced
  (what changes at that call is what retraces it), by share of the tracing samples, the function
  the finding names first.

Other rules' causes are not in the user's Python (or not read from it: memory growth, whose
allocations TensorFlow records by op, not by Python line): their `where` stays empty, as does
every finding of a capture without stacks. A site is named only where it holds `MIN_SHARE` of
its samples or more.
"""

from __future__ import annotations

from pathlib import PurePath

from profiler_service.analysis.models import CodeSite, Finding, Summary
from profiler_service.analysis.rule import Rule

__all__ = [
    "LOOP_RULES",
    "MIN_SHARE",
    "PIPELINE_RULES",
    "SITES",
    "TRACING_RULES",
    "attribute",
    "locate",
]

SITES = 3  # sites named at most, most samples first
MIN_SHARE = 0.05  # a site holding less of its samples is not named
PIPELINE_RULES = frozenset({Rule.INPUT_BOUND})
LOOP_RULES = frozenset({Rule.EAGER_EXECUTION, Rule.HOST_OVERHEAD, Rule.BETWEEN_STEPS})
TRACING_RULES = frozenset({Rule.RETRACING, Rule.XLA_RECOMPILATION})


def locate(finding: Finding, summary: Summary) -> list[CodeSite]:
    """The user's code `finding`'s cause is in, most samples first; [] where unknown."""
    stacks = summary.python_stacks
    if stacks is None:
        return []
    if finding.rule in PIPELINE_RULES:
        sites = stacks.pipeline_functions
    elif finding.rule in LOOP_RULES:
        sites = stacks.loop_lines
    elif finding.rule in TRACING_RULES:
        sites = _calls_of(stacks.tracing_calls, finding.evidence.get("function"))
    else:
        return []
    return [s for s in sites if s.share >= MIN_SHARE][:SITES]


def _calls_of(sites: list[CodeSite], function: str | None) -> list[CodeSite]:
    """The calls that traced `function` (its Python name, as TensorFlow's events give it), or,
    where the stacks name no function traced, every call that traced one."""
    if function:
        named = [s for s in sites if s.traces == function]
        if named:
            return named
    return [s for s in sites if s.traces is None]


def attribute(finding: Finding, summary: Summary) -> Finding:
    """`finding` with its `where`, its recommendation opened by a sentence naming that code."""
    finding.where = locate(finding, summary)
    if not finding.where:
        return finding
    if finding.rule in PIPELINE_RULES:
        first = finding.where[0]
        wired = ""
        if first.wired_at is not None:
            at = first.wired_at
            wired = f", wired into it at {PurePath(at.file).name}:{at.line} (`{at.code}`)"
        lead = (
            f"In your code: {_named(first)} is the Python your tf.data pipeline runs "
            f"({first.share:.0%} of its samples there){wired}."
        )
    elif finding.rule in TRACING_RULES:
        first = finding.where[0]
        traced = f"`{first.traces}`" if first.traces else "the function"
        lead = (
            f"In your code: {_named(first)} calls {traced} with what makes it trace again "
            f"({first.share:.0%} of the tracing samples there): what changes at that call "
            "from one call to the next is the cause."
        )
    else:
        named = ", ".join(f"{_named(s)}, {s.share:.0%}" for s in finding.where)
        lead = f"In your code, the loop's Python is mostly at: {named}."
    finding.recommendation = f"{lead} {finding.recommendation}".strip()
    return finding


def _named(site: CodeSite) -> str:
    return f"`{site.function}` ({PurePath(site.file).name}:{site.line})"
