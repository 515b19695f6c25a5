"""Python stacks sampled in the job's own process while a trace runs (the in-process agent).

A daemon thread reads every Python thread's frames (`sys._current_frames()`) `hz` times a second
and keeps each sample's time and stack; at the end, `write` puts them beside the capture:

- `python.stacks.folded`: collapsed stacks, one line per distinct stack, root first, then its
  count (`MainThread (tid 1);main (train.py:40);fit (trainer.py:318) 57`): the format of Brendan
  Gregg's `flamegraph.pl`, which speedscope and py-spy's raw output share. Each line begins with
  the thread; each frame is `function (file:line)`.
- `python.samples.json`: when each sample was taken (offsets from `started_unix_ns`), which line
  of the folded file it counts in, and the directories of the Python installation that ran the
  job (its standard library and site-packages), so the analysis tells the user's frames from
  the libraries' in another process.

Sampling costs the job little: a sample walks each thread's frames once, keying them by code
object and instruction (no string is built until `write`), and stores two integers in arrays.
Frames read while a thread waits outside Python (in TensorFlow's C++ code, `time.sleep`) count
too: these are wall-clock samples, as py-spy's `--idle`.
"""

from __future__ import annotations

import json
import logging
import sys
import sysconfig
import threading
import time
from array import array
from pathlib import Path
from types import CodeType

__all__ = ["DEFAULT_HZ", "SAMPLES_FILE", "STACKS_FILE", "StackSampler", "library_roots"]

log = logging.getLogger(__name__)

# 100 Hz cost a custom loop of eager ops (Python holding the GIL all the time) 0-4 % of its step
# time, 50 Hz about 1 % (bench/bench_stacks.py); a 2 s trace still gets ~100 samples a thread.
DEFAULT_HZ = 50.0
STACKS_FILE = "python.stacks.folded"
SAMPLES_FILE = "python.samples.json"

_PACKAGE = str(Path(__file__).resolve().parents[1])  # profiler_service/


class StackSampler:
    """Every thread's stack, `hz` times a second, from `start()` to `stop()`; one use."""

    def __init__(self, hz: float = DEFAULT_HZ):
        if hz <= 0:
            raise ValueError(f"hz must be positive, got {hz}")
        self.interval_s = 1.0 / hz
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._started_unix_ns = 0
        self._started_ns = 0
        self.stopped_ns = 0
        self._times_us = array("q")  # each sample's offset from the start
        self._stack_of = array("l")  # each sample's stack, an index into self._keys
        self._ids: dict[tuple[int, ...], int] = {}  # (thread, code id, offset, ...) -> index
        self._keys: list[tuple[int, ...]] = []
        self._thread_names: dict[int, str] = {}
        # Every code object a stored key names, held so that its id is never reused.
        self._codes: dict[int, CodeType] = {}
        self.late = 0  # ticks missed: a sample took longer than the interval, or the GIL did
        self.sampling_ns = 0  # the sampler's own time in its samples, in all
        self.ticks = 0  # times it read the threads' frames

    @property
    def samples(self) -> int:
        return len(self._stack_of)

    def start(self) -> None:
        self._started_unix_ns = time.time_ns()
        self._started_ns = time.monotonic_ns()
        self._thread = threading.Thread(target=self._guarded, name="profiler-stacks", daemon=True)
        self._thread.start()

    def stop(self, timeout_s: float = 5.0) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout_s)
        self.stopped_ns = time.monotonic_ns()

    def _guarded(self) -> None:
        try:
            self._run()
        except Exception:  # the job trains on; the capture keeps what was sampled
            log.exception("the Python stack sampler stopped")

    def _run(self) -> None:
        own = threading.get_ident()
        frames_now = sys._current_frames
        interval_ns = round(self.interval_s * 1e9)
        started = self._started_ns
        ids, times, stacks, sample = self._ids, self._times_us, self._stack_of, self._sample
        due = time.monotonic_ns()
        frame = None
        while True:
            now = time.monotonic_ns()
            if now < due and self._stop.wait((due - now) / 1e9):
                return
            if self._stop.is_set():
                return
            now = time.monotonic_ns()
            offset_us = (now - started) // 1000
            for tid, frame in frames_now().items():
                if tid == own:
                    continue
                key = sample(tid, frame)
                index = ids.get(key)
                if index is None:
                    index = self._keep(key, tid, frame)
                times.append(offset_us)
                stacks.append(index)
            frame = None  # no frame outlives its sample
            self.sampling_ns += time.monotonic_ns() - now
            self.ticks += 1
            due += interval_ns
            if due < now:  # behind: skip the missed ticks rather than burst
                self.late += (now - due) // interval_ns + 1
                due = now + interval_ns

    @staticmethod
    def _sample(tid: int, frame) -> tuple[int, ...]:
        key = [tid]
        append = key.append
        while frame is not None:
            append(id(frame.f_code))
            append(frame.f_lasti)
            frame = frame.f_back
        return tuple(key)

    def _keep(self, key: tuple[int, ...], tid: int, frame) -> int:
        while frame is not None:
            self._codes.setdefault(id(frame.f_code), frame.f_code)
            frame = frame.f_back
        if tid not in self._thread_names:  # a thread not seen before: name it once
            names = {t.ident: t.name for t in threading.enumerate()}
            self._thread_names[tid] = names.get(tid, "thread")  # "thread": TF's own threads
        index = len(self._keys)
        self._ids[key] = index
        self._keys.append(key)
        return index

    # ---- writing, after stop() -------------------------------------------------------------

    def write(self, directory: Path) -> list[Path]:
        """The folded stacks and the samples' timeline, written into `directory`; nothing when
        no sample was taken. Stacks that read alike (two instructions of one line) are one."""
        if not self._stack_of:
            return []
        lines: dict[str, int] = {}  # folded stack -> its line
        counts: list[int] = []
        line_of = array("l")  # each stored key's line
        names: dict[tuple[int, int], str] = {}
        sampled = array("l", [0] * len(self._keys))
        for index in self._stack_of:
            sampled[index] += 1
        for index, key in enumerate(self._keys):
            stack = self._folded(key, names)
            line = lines.setdefault(stack, len(lines))
            if line == len(counts):
                counts.append(0)
            counts[line] += sampled[index]
            line_of.append(line)
        stacks = directory / STACKS_FILE
        stacks.write_text(
            "".join(f"{stack} {count}\n" for stack, count in zip(lines, counts, strict=True)),
            encoding="utf-8",
        )
        samples = directory / SAMPLES_FILE
        timeline = {
            "hz": round(1.0 / self.interval_s, 3),
            "started_unix_ns": self._started_unix_ns,
            "duration_ms": round((self.stopped_ns - self._started_ns) / 1e6, 3),
            "late": self.late,
            "sampling_ms": round(self.sampling_ns / 1e6, 3),
            "library_roots": library_roots(),
            # [offset from started_unix_ns in µs, line of python.stacks.folded (0-based)]
            "samples": [
                [t, line_of[i]] for t, i in zip(self._times_us, self._stack_of, strict=True)
            ],
        }
        samples.write_text(json.dumps(timeline, separators=(",", ":")), encoding="utf-8")
        return [stacks, samples]

    def _folded(self, key: tuple[int, ...], names: dict[tuple[int, int], str]) -> str:
        """`thread (tid N);frame;...;frame`, the outermost frame first."""
        tid = key[0]
        parts = [f"{_clean(self._thread_names.get(tid, 'thread'))} (tid {tid})"]
        for i in range(len(key) - 2, 0, -2):
            name = names.get((key[i], key[i + 1]))
            if name is None:
                code = self._codes[key[i]]
                function = getattr(code, "co_qualname", code.co_name)
                name = f"{_clean(function)} ({_clean(code.co_filename)}:{_line(code, key[i + 1])})"
                names[(key[i], key[i + 1])] = name
            parts.append(name)
        return ";".join(parts)


def library_roots() -> list[str]:
    """The directories whose code is not the user's: this Python's standard library and
    installed packages, and the profiler's own package (its demo job excepted, which stands for
    a user's job: the analysis reads `profiler_service/demo/` as the user's code)."""
    paths = sysconfig.get_paths()
    roots = {paths[k] for k in ("stdlib", "platstdlib", "purelib", "platlib") if k in paths}
    roots.update(p for p in sys.path if p.endswith(("site-packages", "dist-packages")))
    roots.add(_PACKAGE)
    return sorted(str(Path(r)) for r in roots if r)


def _line(code: CodeType, offset: int) -> int:
    for start, end, line in code.co_lines():
        if start <= offset < end:
            return line if line is not None else code.co_firstlineno
    return code.co_firstlineno


def _clean(text: str) -> str:
    """A frame's text as the folded format allows it: no `;`, no line breaks."""
    return text.replace(";", ",").replace("\n", " ")
