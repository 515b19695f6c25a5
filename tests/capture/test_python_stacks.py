"""The agent's stack sampler (probes/python_stacks.py) on real threads of this process: what it
writes beside a capture reads back as the threads ran, in the format flamegraph.pl reads."""

from __future__ import annotations

import json
import sysconfig
import threading
import time

from profiler_service.analysis.readers.python_stacks import read_python_stacks, read_stacks
from profiler_service.probes.python_stacks import SAMPLES_FILE, STACKS_FILE, StackSampler


def spin_in_user_code(stop: threading.Event) -> None:
    while not stop.is_set():
        sum(range(200))


def sample_a_spinning_thread(tmp_path, seconds: float = 0.4, hz: float = 100.0):
    stop = threading.Event()
    worker = threading.Thread(target=spin_in_user_code, args=(stop,), name="spinner")
    worker.start()
    sampler = StackSampler(hz)
    sampler.start()
    time.sleep(seconds)
    sampler.stop()
    stop.set()
    worker.join()
    return sampler, sampler.write(tmp_path)


def test_every_thread_is_sampled_with_its_frames_and_counts(tmp_path):
    sampler, written = sample_a_spinning_thread(tmp_path)
    assert [p.name for p in written] == [STACKS_FILE, SAMPLES_FILE]
    stacks = read_stacks((tmp_path / STACKS_FILE).read_text())
    assert sum(count for _, _, count in stacks) == sampler.samples
    assert 20 <= sampler.ticks <= 60  # 100 Hz over 0.4 s, give or take the start
    spinner = [(frames, n) for thread, frames, n in stacks if thread.startswith("spinner (tid ")]
    assert sum(n for _, n in spinner) >= 0.8 * sampler.ticks  # in every tick but the edges
    code = spin_in_user_code.__code__
    frames = {f for frames, _ in spinner for f in frames}
    ours = [f for f in frames if f.function == spin_in_user_code.__qualname__]
    assert ours and all(f.file == code.co_filename for f in ours)
    assert {f.line for f in ours} <= set(range(code.co_firstlineno, code.co_firstlineno + 3))
    # the sampler's own thread is not among them
    assert not any(thread.startswith("profiler-stacks") for thread, _, _ in stacks)


def test_each_sample_keeps_its_time_and_its_line_of_the_folded_stacks(tmp_path):
    sampler, _ = sample_a_spinning_thread(tmp_path, seconds=0.3)
    timeline = json.loads((tmp_path / SAMPLES_FILE).read_text())
    lines = (tmp_path / STACKS_FILE).read_text().splitlines()
    assert timeline["hz"] == 100.0 and len(timeline["samples"]) == sampler.samples
    offsets = [t for t, _ in timeline["samples"]]
    assert offsets == sorted(offsets) and offsets[-1] <= timeline["duration_ms"] * 1000
    assert all(0 <= line < len(lines) for _, line in timeline["samples"])
    counted = [0] * len(lines)
    for _, line in timeline["samples"]:
        counted[line] += 1
    assert counted == [int(line.rsplit(" ", 1)[1]) for line in lines]
    assert sysconfig.get_paths()["stdlib"] in timeline["library_roots"]


def test_the_users_code_reads_as_the_users_and_the_libraries_as_theirs(tmp_path):
    """This test file is the user's code; threading.py (the standard library) is not."""
    sample_a_spinning_thread(tmp_path)
    stacks = read_python_stacks(tmp_path)
    assert stacks is not None and stacks.file == STACKS_FILE and stacks.hz == 100.0
    assert stacks.pipeline_samples == 0
    sites = {s.function: s for s in stacks.loop_lines}
    assert spin_in_user_code.__qualname__ in sites
    assert sites[spin_in_user_code.__qualname__].file == spin_in_user_code.__code__.co_filename
    assert not any(s.file.endswith("threading.py") for s in stacks.loop_lines)


def test_nothing_is_written_without_a_sample(tmp_path):
    assert StackSampler(10).write(tmp_path) == []
    assert read_python_stacks(tmp_path) is None
