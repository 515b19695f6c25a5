"""The job's Python stacks, sampled while the trace ran (probes/python_stacks.py), read into what
the findings' `where` needs: which of the user's functions tf.data ran, and which of the user's
lines the training loop's Python held.

The stacks are collapsed stacks (`python.stacks.folded`: `thread;frame;...;frame count`, each
frame `function (file:line)`, as py-spy writes them too). A frame is the user's unless its file
lies in the Python installation that ran the job (its standard library, site-packages: the
directories `python.samples.json` names, or any `site-packages`/`dist-packages`/`lib/pythonX.Y`
path where it names none), in the profiler's own package, or in no file (`<frozen ...>`,
AutoGraph's generated code). The profiler's demo jobs (`profiler_service/demo/`) stand for a
user's job and count as the user's.
"""

from __future__ import annotations

import json
import re
from collections import Counter
from dataclasses import dataclass
from pathlib import Path

from profiler_service.analysis.readers.pipeline_source import find_wiring
from profiler_service.analysis.stack_models import CodeSite, PythonStacks
from profiler_service.probes.python_stacks import SAMPLES_FILE, STACKS_FILE

__all__ = ["Frame", "UserCode", "read_library_roots", "read_python_stacks", "read_stacks"]

SITES_KEPT = 5  # sites of each reading kept in the summary, most samples first
_FRAME = re.compile(r"^(?P<function>.*) \((?P<file>.*):(?P<line>\d+)\)$")
# tf.data's Python: TensorFlow's py_function/numpy_function (and from_generator) call into it here.
_PIPELINE_ENTRY = re.compile(r"[/\\]tensorflow[/\\]python[/\\]ops[/\\]script_ops\.py$")
# A tf.function's call: below it runs its graph (or its tracing), not the loop's own Python.
_GRAPH_CALL = re.compile(r"[/\\]tensorflow[/\\]python[/\\]eager[/\\]polymorphic_function[/\\]")
# Tracing a tf.function: TensorFlow builds its graph under these (TF 2.13+ `tracing_compilation`,
# older `tracing_compiler`/`polymorphic_function`), running the traced Python below the last.
_TRACING = re.compile(r"(^|\.)(_maybe_define_function|_create_concrete_function|trace_function)$")
_TRACED_BELOW = re.compile(r"(^|\.)func_graph_from_py_func$")
_AUTOGRAPH_NAME = re.compile(r"(^|\.)tf__(?P<name>\w+)$")
# Keras' own training loop (`Trainer.fit`): a user's line that calls it hands the loop to Keras.
_KERAS = re.compile(r"[/\\](tf_)?keras[/\\]")
_KERAS_LOOPS = {"fit", "evaluate", "predict"}
_LIBRARY_PATH = re.compile(r"[/\\](site-packages|dist-packages|lib[/\\]python\d\.\d+)[/\\]")
_PROFILER = re.compile(r"[/\\]profiler_service[/\\]")
_DEMO = re.compile(r"[/\\]profiler_service[/\\]demo[/\\]")


@dataclass(frozen=True)
class Frame:
    function: str
    file: str
    line: int


def read_python_stacks(run_dir: Path) -> PythonStacks | None:
    """The summary's reading of the stacks in `run_dir`, None where it holds none."""
    path = run_dir / STACKS_FILE
    meta = _read_meta(run_dir / SAMPLES_FILE)
    source = str(meta.get("source", "agent"))
    if not path.is_file():
        if not meta.get("unavailable"):
            return None
        return PythonStacks(
            file="",
            samples=0,
            hz=meta.get("hz"),
            source=source,
            unavailable=str(meta["unavailable"]),
        )
    stacks = read_stacks(path.read_text(encoding="utf-8", errors="replace"))
    roots = _library_roots(meta)
    summary = summarise(stacks, roots, path.name, meta.get("hz"))
    summary.source = source
    user_files = _user_files(stacks, roots)
    for site in summary.pipeline_functions:
        site.wired_at = find_wiring(site.function, [site.file, *user_files])
    return summary


def _user_files(stacks: list[tuple[str, list[Frame], int]], roots: list[str]) -> list[str]:
    """The user's files in the stacks, the most sampled first: where a pipeline is built."""
    is_user = UserCode(roots)
    counts: Counter[str] = Counter()
    for _, frames, count in stacks:
        for file in {f.file for f in frames if is_user(f.file)}:
            counts[file] += count
    return [file for file, _ in counts.most_common()]


def read_library_roots(samples: str) -> list[str]:
    """The job's Python installation's directories, as its `python.samples.json` names them."""
    return _library_roots(_parse_meta(samples))


def _library_roots(meta: dict) -> list[str]:
    return [str(r).rstrip("/\\") for r in meta.get("library_roots", [])]


def read_stacks(text: str) -> list[tuple[str, list[Frame], int]]:
    """(thread, frames outermost first, count) of each line of collapsed stacks; a first part
    that is no frame names the thread."""
    stacks = []
    for raw in text.splitlines():
        head, _, count = raw.rstrip().rpartition(" ")
        if not head or not count.isdigit():
            continue
        parts = head.split(";")
        thread = "" if _FRAME.match(parts[0]) else parts.pop(0)
        frames = []
        for part in parts:
            m = _FRAME.match(part)
            if m:
                frames.append(Frame(m["function"], m["file"], int(m["line"])))
        stacks.append((thread, frames, int(count)))
    return stacks


def summarise(
    stacks: list[tuple[str, list[Frame], int]],
    roots: list[str],
    file: str = STACKS_FILE,
    hz: float | None = None,
) -> PythonStacks:
    """The user's functions tf.data ran, and the user's lines the loop's Python held."""
    is_user = UserCode(roots)
    total = pipeline_total = loop_total = pipeline_in_libraries = 0
    entered: Counter[tuple[str, str]] = Counter()  # (file, function) -> samples
    entered_lines: Counter[Frame] = Counter()
    held: Counter[Frame] = Counter()
    tracing_total = 0
    traced_at: Counter[Frame] = Counter()  # the user's line that called a tracing tf.function
    traced_names: dict[Frame, Counter[str]] = {}  # its samples that name the function traced
    for _, frames, count in stacks:
        total += count
        entry = _pipeline_entry(frames)
        if entry is not None:
            pipeline_total += count
            if frames and not is_user(frames[-1].file):
                pipeline_in_libraries += count
            first = next((f for f in frames[entry:] if is_user(f.file)), None)
            if first is not None:
                entered[(first.file, first.function)] += count
                entered_lines[first] += count
            continue
        users = [i for i, f in enumerate(frames) if is_user(f.file)]
        if not users:
            continue  # a thread of the libraries' own (the profiler's, TensorFlow's)
        loop_total += count
        call = _tracing_call(frames, is_user)
        if call is not None:
            site, traced = call
            tracing_total += count
            traced_at[site] += count
            if traced is not None:
                traced_names.setdefault(site, Counter())[traced] += count
            continue
        innermost = users[-1]
        below = frames[innermost + 1 :]
        if any(_GRAPH_CALL.search(f.file) for f in below):
            continue  # a tf.function's graph ran
        if any(_KERAS.search(f.file) and _loop_name(f) in _KERAS_LOOPS for f in below):
            continue  # Keras' own loop between its steps (a callback's lines are the user's)
        held[frames[innermost]] += count
    pipeline_functions = []
    for (path, function), count in entered.most_common(SITES_KEPT):
        line = max((f for f in entered_lines if (f.file, f.function) == (path, function)),
                   key=lambda f: entered_lines[f]).line  # fmt: skip
        pipeline_functions.append(_site(Frame(function, path, line), count, pipeline_total))
    return PythonStacks(
        file=file,
        samples=total,
        hz=hz,
        pipeline_samples=pipeline_total,
        pipeline_functions=pipeline_functions,
        pipeline_library_share=round(pipeline_in_libraries / pipeline_total, 4)
        if pipeline_total
        else 0.0,
        loop_samples=loop_total,
        loop_lines=[_site(f, n, loop_total) for f, n in held.most_common(SITES_KEPT)],
        tracing_samples=tracing_total,
        tracing_calls=[
            _site(f, n, tracing_total, traces=_most(traced_names.get(f)))
            for f, n in traced_at.most_common(SITES_KEPT)
        ],
    )


class UserCode:
    """Whether a file is the user's code (the module's docstring says which are not)."""

    def __init__(self, roots: list[str]):
        self.roots = tuple(r + "/" for r in roots) + tuple(r + "\\" for r in roots)
        self.seen: dict[str, bool] = {}

    def __call__(self, file: str) -> bool:
        known = self.seen.get(file)
        if known is None:
            known = self.seen[file] = self._judge(file)
        return known

    def _judge(self, file: str) -> bool:
        if _DEMO.search(file):
            return True
        if not file or file.startswith("<") or "__autograph_generated_file" in file:
            return False
        library = file.startswith(self.roots) or _LIBRARY_PATH.search(file)
        return not (library or _PROFILER.search(file))


def _pipeline_entry(frames: list[Frame]) -> int | None:
    """The index after tf.data's last call into Python in `frames`, None if it made none."""
    found = None
    for i, frame in enumerate(frames):
        if _PIPELINE_ENTRY.search(frame.file):
            found = i + 1
    return found


def _tracing_call(frames: list[Frame], is_user: UserCode) -> tuple[Frame, str | None] | None:
    """Where `frames` trace a tf.function called from the user's code: the user's line that
    called it and the Python function traced (None where the stacks do not name it)."""
    tracing = next(
        (
            i
            for i, f in enumerate(frames)
            if _GRAPH_CALL.search(f.file) and _TRACING.search(f.function)
        ),
        None,
    )
    if tracing is None:
        return None
    call = next((i for i, f in enumerate(frames[:tracing]) if _GRAPH_CALL.search(f.file)), tracing)
    callers = [f for f in frames[:call] if is_user(f.file)]
    if not callers:
        return None  # Keras' or a library's own function (its steps traced from `fit`)
    return callers[-1], _traced_name(frames[tracing:], is_user)


def _is_tracing(frame: Frame) -> bool:
    return bool(_GRAPH_CALL.search(frame.file) and _TRACING.search(frame.function))


def _most(counts: Counter[str] | None) -> str | None:
    return counts.most_common(1)[0][0] if counts else None


def _traced_name(frames: list[Frame], is_user: UserCode) -> str | None:
    """The Python function a tracing stack runs: AutoGraph's conversion of it (`tf__step`), or
    the user's own frame below TensorFlow's graph building."""
    start = next((i for i, f in enumerate(frames) if _TRACED_BELOW.search(f.function)), None)
    if start is None:
        return None
    for frame in frames[start + 1 :]:
        m = _AUTOGRAPH_NAME.search(frame.function)
        if m:
            return m["name"]
        if is_user(frame.file):
            return _loop_name(frame)
    return None


def _loop_name(frame: Frame) -> str:
    return frame.function.rsplit(".", 1)[-1]


def _site(frame: Frame, count: int, total: int, traces: str | None = None) -> CodeSite:
    share = round(count / total, 4) if total else 0.0
    return CodeSite(
        file=frame.file, line=frame.line, function=frame.function, share=share, traces=traces
    )


def _read_meta(path: Path) -> dict:
    """`python.samples.json`; {} where it is missing or unreadable."""
    try:
        return _parse_meta(path.read_text(encoding="utf-8"))
    except OSError:
        return {}


def _parse_meta(text: str) -> dict:
    try:
        meta = json.loads(text)
    except ValueError:
        return {}
    return meta if isinstance(meta, dict) else {}
