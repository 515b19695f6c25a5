"""Findings that name the user's code (`where`), through the agent embedded in real TensorFlow
jobs: the Python stacks it samples while it traces are stored beside the trace, and the finding
names the function or lines a person fixing it would open. The names and files asserted are read
from the demo job's own source, not written here."""

from __future__ import annotations

import inspect
import subprocess
from pathlib import Path, PurePath

import httpx
import pytest
from helpers import start_job

from profiler_service.demo import workloads as demo
from profiler_service.probes.python_stacks import DEFAULT_HZ, STACKS_FILE


def capture_through_the_agent(
    tmp_path, *args: str, env: dict[str, str] | None = None
) -> tuple[dict, str | None]:
    """A 2 s capture of a demo job through its own agent: the snapshot and its collapsed stacks
    (None where it has none); its report page, as the agent served it, in tmp_path/report.html."""
    job = start_job(*args, "--agent", "--store", str(tmp_path / "store"), env=env)
    try:
        with httpx.Client(base_url=job.ready["agent_url"], timeout=180) as client:
            body = client.post("/profile", params={"duration": "2s", "wait": "true"}).json()
            assert body["status"] == "ready", body.get("error")
            stacks = client.get(f"/profiles/{body['id']}/files/{STACKS_FILE}")
            report = client.get(body["links"]["report"])
            assert report.status_code == 200
            (tmp_path / "report.html").write_text(report.text)
    finally:
        job.stop()
    return body, stacks.text if stacks.status_code == 200 else None


def lines_of(function) -> range:
    source, first = inspect.getsourcelines(function)
    return range(first, first + len(source))


def nested_code(function, name: str):
    """The code of the function `name` defined inside `function` (its source's own)."""
    return next(c for c in function.__code__.co_consts if inspect.iscode(c) and c.co_name == name)


def test_input_bound_names_the_decoding_function_the_pipeline_runs(tmp_path, browser):
    body, stacks = capture_through_the_agent(tmp_path, "--workload", "input-bound")
    decode = demo._python_decode  # what the demo's input_bound_dataset maps, in Python
    assert STACKS_FILE in {f["name"] for f in body["files"]} and stacks is not None
    assert f"{decode.__qualname__} ({inspect.getsourcefile(decode)}:" in stacks
    found = {f["rule"]: f for f in body["findings"]}
    assert "input_bound" in found, body["findings"]
    where = found["input_bound"]["where"]
    assert where, found["input_bound"]
    first = where[0]
    assert first["function"] == decode.__qualname__
    assert first["file"] == inspect.getsourcefile(decode)
    assert first["line"] in lines_of(decode)
    assert first["share"] > 0.5
    assert f"`{decode.__qualname__}`" in found["input_bound"]["recommendation"]
    # the line to change: where the demo's pipeline wires the function in (its own source)
    source = inspect.getsourcefile(decode)
    wiring = next(
        i + 1
        for i, line in enumerate(Path(source).read_text().splitlines())
        if f"numpy_function({decode.__name__}" in line
    )
    assert (first["wired_at"]["file"], first["wired_at"]["line"]) == (source, wiring)
    assert (
        f"wired into it at {PurePath(source).name}:{wiring}"
        in (found["input_bound"]["recommendation"])
    )
    summary = body["summary"]["python_stacks"]
    assert summary["pipeline_samples"] > 20 and summary["hz"] == DEFAULT_HZ

    # The report page draws the flame graph (in real Chromium), the decoding function one of
    # its highlighted boxes, as wide as its share of the samples drawn.
    page = browser.new_page(viewport={"width": 1100, "height": 900})
    page.set_content((tmp_path / "report.html").read_text())
    graph = page.locator("#flame-graph")
    assert graph.is_visible()
    width = graph.bounding_box()["width"]
    decode_boxes = page.locator("#flame-graph g.user").filter(
        has=page.locator("title", has_text=f"{decode.__qualname__} (")
    )
    assert decode_boxes.count() >= 1
    widest = max(decode_boxes.nth(i).bounding_box()["width"] for i in range(decode_boxes.count()))
    drawn = int(graph.get_attribute("aria-label").split(": ")[1].split()[0])  # samples drawn
    assert widest / width == pytest.approx(
        summary["pipeline_samples"] * first["share"] / drawn, abs=0.05
    )
    # the agent's own threads (its HTTP server, the capture) ran no code of the user's
    titles = page.locator("#flame-graph g.thread title").all_text_contents()
    assert titles and not any("profiler-agent" in t or "capture-" in t for t in titles)
    page.close()


def test_a_compute_bound_job_gets_no_where_that_blames_a_line(tmp_path):
    body, stacks = capture_through_the_agent(tmp_path, "--workload", "compute-bound")
    # the stacks were sampled: an empty where is the analysis's reading, not a missing file
    assert stacks is not None and "MainThread" in stacks
    assert body["summary"]["python_stacks"]["samples"] > 50
    assert [f["where"] for f in body["findings"] if f["where"]] == [], body["findings"]


def test_an_eager_loop_names_the_lines_that_dispatch_its_ops(tmp_path):
    body, _ = capture_through_the_agent(tmp_path, "--workload", "eager")
    step = nested_code(demo.eager_loop, "train_step")  # the demo's loop body, run eagerly
    python_rules = {"eager_execution", "host_overhead", "between_steps"}
    named = [f for f in body["findings"] if f["rule"] in python_rules]
    assert named, body["findings"]
    for finding in named:
        assert finding["where"], finding
        first = finding["where"][0]
        assert first["function"] == step.co_qualname and first["file"] == step.co_filename
        assert first["line"] in range(step.co_firstlineno, step.co_firstlineno + 4)
        assert all(s["file"] == step.co_filename for s in finding["where"])
        in_step = [s for s in finding["where"] if s["function"] == step.co_qualname]
        assert sum(s["share"] for s in in_step) > 0.5


def test_stacks_turned_off_leave_no_file_and_no_where(tmp_path):
    body, _ = capture_through_the_agent(
        tmp_path, "--workload", "input-bound", env={"PROFILER_PYTHON_STACKS_HZ": "0"}
    )
    assert STACKS_FILE not in {f["name"] for f in body["files"]}
    assert body["summary"]["python_stacks"] is None
    assert "input_bound" in {f["rule"] for f in body["findings"]}
    assert all(f["where"] == [] for f in body["findings"])
    assert 'id="flame-graph"' not in (tmp_path / "report.html").read_text()


def line_of(function, text: str) -> int:
    """The line of `function`'s own source that holds `text`."""
    source, first = inspect.getsourcelines(function)
    return first + next(i for i, line in enumerate(source) if text in line)


def test_a_retracing_function_is_named_with_the_call_that_retraces_it(tmp_path):
    from profiler_service.demo import tf_pathologies

    body, _ = capture_through_the_agent(
        tmp_path, "--workload", "function", "--arg", "python-number"
    )
    step = nested_code(tf_pathologies.function_loop, "step")  # the loop's call of the function
    call = line_of(tf_pathologies.function_loop, "1e-4 / (1 + i)")  # a new Python float
    found = {f["rule"]: f for f in body["findings"]}
    assert "retracing" in found, body["findings"]
    retracing = found["retracing"]
    assert retracing["where"], retracing
    first = retracing["where"][0]
    assert (first["function"], first["file"], first["line"]) == (
        step.co_qualname,
        step.co_filename,
        call,
    )
    assert first["traces"] == "step_fn" == retracing["evidence"]["function"]
    assert first["share"] > 0.5
    assert (
        f"`{step.co_qualname}` ({PurePath(step.co_filename).name}:{call})"
        in (retracing["recommendation"])
    )
    assert body["summary"]["python_stacks"]["tracing_samples"] > 5
    # tracing is not the loop's own Python: it is not blamed on the loop's lines as well
    assert all(f["where"] == [] for f in body["findings"] if f["rule"] != "retracing")


def test_a_function_traced_once_gets_no_tracing_where(tmp_path):
    body, _ = capture_through_the_agent(tmp_path, "--workload", "function", "--arg", "tensor")
    assert "retracing" not in {f["rule"] for f in body["findings"]}
    assert body["summary"]["python_stacks"]["tracing_samples"] == 0


def test_through_a_sidecar_py_spy_names_the_same_function(
    input_bound_job, service_factory, tmp_path
):
    """`profiler-service serve` beside the job with PROFILER_PY_SPY=true: py-spy samples the
    process listening on the profiler server's port (this machine's /proc, as a pod sharing its
    process namespace sees it), and the finding names the decoding function as the agent does."""
    service = service_factory([input_bound_job.address], {"PROFILER_PY_SPY": "true"})
    with service.client() as client:
        body = client.post("/profile", params={"duration": "2s", "wait": "true"}).json()
        assert body["status"] == "ready", body.get("error")
        report = client.get(body["links"]["report"]).text
    stacks = body["summary"]["python_stacks"]
    assert stacks["source"] == "py-spy" and stacks["unavailable"] is None
    assert stacks["pipeline_samples"] > 20
    decode = demo._python_decode
    found = {f["rule"]: f for f in body["findings"]}
    first = found["input_bound"]["where"][0]
    assert (first["function"], first["file"]) == (
        decode.__qualname__,
        inspect.getsourcefile(decode),
    )
    assert first["line"] in lines_of(decode) and first["share"] > 0.5
    assert {STACKS_FILE, "python.samples.json"} <= {f["name"] for f in body["files"]}
    decoded_in = PurePath(inspect.getsourcefile(decode)).name
    assert 'id="flame-graph"' in report and f"{decode.__qualname__} ({decoded_in}:" in report


def test_a_sidecar_whose_py_spy_cannot_sample_says_why(input_bound_job, service_factory, tmp_path):
    sleeper = subprocess.Popen(["sleep", "120"])  # no Python: py-spy cannot read it
    try:
        service = service_factory(
            [input_bound_job.address],
            {"PROFILER_PY_SPY": "true", "PROFILER_PY_SPY_PID": str(sleeper.pid)},
        )
        with service.client() as client:
            body = client.post("/profile", params={"duration": "2s", "wait": "true"}).json()
            report = client.get(body["links"]["report"]).text
    finally:
        sleeper.kill()
        sleeper.wait()
    assert body["status"] == "ready", body.get("error")  # the trace is still a capture
    stacks = body["summary"]["python_stacks"]
    assert stacks["samples"] == 0
    assert stacks["unavailable"].startswith(f"py-spy could not sample process {sleeper.pid}")
    assert "SYS_PTRACE" in stacks["unavailable"]
    assert all(f["where"] == [] for f in body["findings"])
    assert 'id="python-stacks-unavailable"' in report and 'id="flame-graph"' not in report


def test_through_a_sidecar_py_spy_names_the_retracing_call_and_blames_no_compute_bound_line(
    compute_bound_job, service_factory, tmp_path
):
    """A retracing job of the demo's, and the compute-bound one, each beside a sidecar with
    py-spy: the call that retraces is named; a job whose cause is not in Python gets no `where`
    that blames a line."""
    from helpers import free_port

    from profiler_service.demo import tf_pathologies

    port = free_port()
    job = start_job(
        "--workload", "function", "--arg", "python-number", "--profiler-port", str(port)
    )
    py_spy = {"PROFILER_PY_SPY": "true"}
    try:
        beside_retracing = service_factory([f"grpc://127.0.0.1:{port}"], py_spy)
        with beside_retracing.client() as client:
            retracing = client.post("/profile", params={"duration": "2s", "wait": "true"}).json()
    finally:
        job.stop()
    beside_computing = service_factory(
        [compute_bound_job.address], py_spy, store=tmp_path / "computing"
    )
    with beside_computing.client() as client:
        computing = client.post("/profile", params={"duration": "2s", "wait": "true"}).json()
    assert retracing["status"] == computing["status"] == "ready"
    step = nested_code(tf_pathologies.function_loop, "step")
    found = {f["rule"]: f for f in retracing["findings"]}
    first = found["retracing"]["where"][0]
    assert (first["file"], first["line"], first["traces"]) == (
        step.co_filename,
        line_of(tf_pathologies.function_loop, "1e-4 / (1 + i)"),
        "step_fn",
    )
    assert retracing["summary"]["python_stacks"]["source"] == "py-spy"
    assert computing["summary"]["python_stacks"]["samples"] > 50  # it was sampled
    assert [f["where"] for f in computing["findings"] if f["where"]] == []


def test_through_a_sidecar_py_spy_names_the_eager_loops_lines(service_factory):
    """The demo's eager loop beside a sidecar with py-spy: the lines that dispatch its ops, as
    the agent names them (test_an_eager_loop_names_the_lines_that_dispatch_its_ops)."""
    from helpers import free_port

    port = free_port()
    job = start_job("--workload", "eager", "--profiler-port", str(port))
    try:
        service = service_factory([f"grpc://127.0.0.1:{port}"], {"PROFILER_PY_SPY": "true"})
        with service.client() as client:
            body = client.post("/profile", params={"duration": "2s", "wait": "true"}).json()
    finally:
        job.stop()
    assert body["status"] == "ready", body.get("error")
    assert body["summary"]["python_stacks"]["source"] == "py-spy"
    step = nested_code(demo.eager_loop, "train_step")
    named = [f for f in body["findings"] if f["rule"] in {"eager_execution", "host_overhead"}]
    assert named, body["findings"]
    for finding in named:
        first = finding["where"][0]
        assert first["function"] == step.co_qualname and first["file"] == step.co_filename
        assert first["line"] in range(step.co_firstlineno, step.co_firstlineno + 4)
