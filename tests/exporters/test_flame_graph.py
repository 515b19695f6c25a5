"""The report's flame graph of the job's Python stacks: the threads that ran the user's code,
the user's frames merged by function and highlighted, each run of library frames one box."""

from __future__ import annotations

import html
import re

from profiler_service.exporters.flame_graph import MIN_WIDTH, flame_graph_svg

SITE = "/venv/lib/python3.11/site-packages"
TRAIN = "/home/me/project/train.py"
TF = f"{SITE}/tensorflow/python"
CALL = (
    f"filter_traceback.<locals>.error_handler ({TF}/util/traceback_utils.py:164);"
    f"Function.__call__ ({TF}/eager/polymorphic_function/polymorphic_function.py:833)"
)
FOLDED = f"""\
MainThread (tid 1);<module> ({TRAIN}:90);train ({TRAIN}:40);{CALL};quick_execute ({TF}/eager/execute.py:53) 60
MainThread (tid 1);<module> ({TRAIN}:90);train ({TRAIN}:41);{CALL};quick_execute ({TF}/eager/execute.py:53) 20
Thread-3 (tid 7);FuncRegistry.__call__ ({TF}/ops/script_ops.py:268);decode ({TRAIN}:12) 20
profiler-agent (tid 3);Server.run ({SITE}/uvicorn/server.py:60) 500
"""  # noqa: E501
BOX = re.compile(
    r'<g class="frame (?P<kind>\w+)"><rect x="(?P<x>[\d.]+)" y="(?P<y>\d+)" '
    r'width="(?P<w>[\d.]+)"[^>]*>(?:<text[^>]*>[^<]*</text>)?<title>(?P<title>[^<]*)</title>'
)


def boxes(svg: str) -> list[dict]:
    return [{**m.groupdict(), "title": html.unescape(m["title"])} for m in BOX.finditer(svg)]


def test_only_the_threads_that_ran_the_users_code_are_drawn_the_users_frames_merged():
    svg = flame_graph_svg(FOLDED, [SITE], width=1000)
    assert 'aria-label="flame graph: 100 samples of the threads that ran your code"' in svg
    drawn = boxes(svg)
    titles = [b["title"] for b in drawn]
    assert not any("uvicorn" in t or "profiler-agent" in t for t in titles)
    threads = {b["title"]: float(b["w"]) for b in drawn if b["kind"] == "thread"}
    assert threads == {"thread MainThread: 80 samples": 799.5, "thread Thread-3: 20 samples": 199.5}
    user = {b["title"]: b for b in drawn if b["kind"] == "user"}
    # one box for `train`, its two lines merged, named by the line that holds more samples
    assert set(user) == {
        "<module> (train.py:90): 80 samples",
        "train (train.py:40): 80 samples",
        "decode (train.py:12): 20 samples",
    }
    library = [b["title"] for b in drawn if b["kind"] == "library"]
    # TensorFlow's decorator is passed over: the run is named by the function entered
    assert "tensorflow: Function.__call__ (3 library frames): 80 samples" in library
    assert "quick_execute (1 library frame): 80 samples" in library  # what the stack ran last
    assert "tensorflow: FuncRegistry.__call__ (1 library frame): 20 samples" in library
    rows = {int(b["y"]) for b in drawn}
    assert rows == {0, 17, 34, 51, 68}


def test_narrow_boxes_are_left_out_and_a_job_without_user_code_draws_nothing():
    tiny = FOLDED + f"MainThread (tid 1);<module> ({TRAIN}:90);rare ({TRAIN}:70) 1\n"
    svg = flame_graph_svg(tiny, [SITE], width=40)  # 1 of 101 samples: under MIN_WIDTH px
    assert MIN_WIDTH > 40 / 101 and "rare (train.py" not in svg
    assert "rare (train.py:70): 1 samples" in flame_graph_svg(tiny, [SITE], width=1000)
    idle = "profiler-agent (tid 3);Server.run (/venv/lib/python3.11/site-packages/u.py:1) 9\n"
    assert flame_graph_svg(idle, [SITE]) == ""
