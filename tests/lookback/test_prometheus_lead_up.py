"""The lead-up read from a real Prometheus: what it stored of a gauge this test serves comes back
as series, and every way a query can go wrong comes back as a note, never as an exception.

One Prometheus (module_prometheus, tests/prometheus_server.py) scrapes the test's own metrics
server every 500 ms for the whole module: a gauge `leadup_queue_depth{kind="train"}` that
Prometheus sees at 1, then climbs to 8 and stays there, the same gauge under a label value full
of PromQL's special characters, and 25 shards of another gauge. Everything listens on 127.0.0.1.
"""

from __future__ import annotations

import itertools
import math
import socket
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import TYPE_CHECKING

import httpx
import pytest
from fakes import NotedAnalyzer, WritesBytes
from helpers import RECORDED_CAPTURE, free_port
from prometheus_client import CollectorRegistry, Gauge, start_http_server

from profiler_service.capture.controller import CaptureRequest
from profiler_service.config import PromQuery
from profiler_service.lookback.prometheus import (
    MissingVariable,
    lead_up_variables,
    promql_string,
    query_lead_up,
    render_query,
)

if TYPE_CHECKING:
    from prometheus_server import Prometheus

pytest_plugins = ["prometheus_server"]

TARGET = "trainer-0"  # the scrape job's name, so {job=$target} selects the served metrics
RAMP = [float(v) for v in range(1, 9)]  # the train gauge's values, in the order served
# A label value with every character PromQL's strings escape, and an attempt to break out.
AWKWARD = 'say "hi" \\ C:\\dir\\\tand\nnext } or vector(1) é'
SHARDS = [f"s{i:02d}" for i in range(25)]
DEADLINE_S = 3.0  # a silent Prometheus's budget: long beside the analysis it must not delay
RAMP_QUERY = PromQuery(
    name="queue_depth", expr='leadup_queue_depth{job=$target, kind="train"}', unit="count"
)


@dataclass
class LeadUpWorld:
    prom: Prometheus
    instance: str  # host:port of the served metrics, Prometheus's `instance` label
    ramp_start: float  # unix seconds (whole ms): Prometheus had 1, the climb had not begun
    ramp_end: float  # ramp_start + a whole number of seconds, after Prometheus had 8


def at(unix_s: float) -> datetime:
    return datetime.fromtimestamp(unix_s, UTC)


@pytest.fixture(scope="module")
def world(module_prometheus: Callable[[dict[str, str]], Prometheus]) -> Iterator[LeadUpWorld]:
    registry = CollectorRegistry()
    depth = Gauge("leadup_queue_depth", "Items queued", ["kind"], registry=registry)
    shard_bytes = Gauge("leadup_shard_bytes", "Bytes per shard", ["shard"], registry=registry)
    depth.labels(kind="train").set(RAMP[0])
    depth.labels(kind=AWKWARD).set(42)
    for i, shard in enumerate(SHARDS):
        shard_bytes.labels(shard=shard).set(i)
    port = free_port()
    server, thread = start_http_server(port, addr="127.0.0.1", registry=registry)
    try:
        prom = module_prometheus({TARGET: f"127.0.0.1:{port}"})
        train = f'leadup_queue_depth{{job="{TARGET}",kind="train"}}'
        prom.wait_for(train, lambda v: v == RAMP[0], what="first value scraped")
        ramp_start = round(time.time(), 3)
        for value in RAMP[1:]:
            time.sleep(0.5)  # the climb being served, a scrape or so per value: not a wait
            depth.labels(kind="train").set(value)
        prom.wait_for(train, lambda v: v == RAMP[-1], what="last value scraped")
        # The window's end is an evaluation time (start + k steps of 1 s) at or after the moment
        # Prometheus had the last value; wait until Prometheus has scraped past it, so no point
        # lies in the future.
        ramp_end = ramp_start + math.ceil(time.time() - ramp_start)
        prom.wait_for(
            f"timestamp({train})", lambda t: t > ramp_end, what="a scrape past the window's end"
        )
        yield LeadUpWorld(prom, f"127.0.0.1:{port}", ramp_start, ramp_end)
    finally:  # Prometheus stops after the module's last test (module_prometheus)
        server.shutdown()
        server.server_close()
        thread.join(10)


# -- render_query and lead_up_variables, without Prometheus ------------------------------------


def test_render_query_quotes_each_variable_as_a_promql_string():
    rendered = render_query(
        'up{pod=$pod, ns=${namespace}} * on() group_left() cost{unit="$$"}',
        {"pod": "trainer-0", "namespace": "ml"},
    )
    assert rendered == 'up{pod="trainer-0", ns="ml"} * on() group_left() cost{unit="$"}'


def test_render_query_escapes_quote_backslash_newline_and_control_characters():
    assert render_query("{kind=$k}", {"k": 'a"b\\c\nd\te\x01f'}) == (
        '{kind="a\\"b\\\\c\\nd\\te\\x01f"}'
    )
    # An alert's label cannot end the string and add a selector of its own.
    assert render_query("up{pod=$pod}", {"pod": '"} or vector(1) or up{x="'}) == (
        'up{pod="\\"} or vector(1) or up{x=\\""}'
    )
    assert promql_string("\ud800") == '"\ufffd"'  # a lone surrogate cannot be sent as UTF-8


def test_render_query_names_the_missing_variable():
    with pytest.raises(MissingVariable) as raised:
        render_query("up{pod=$pod, ns=${namespace}}", {"pod": "p"})
    assert raised.value.name == "namespace"
    assert isinstance(raised.value, ValueError)


def test_render_query_refuses_a_dollar_that_starts_no_placeholder():
    with pytest.raises(ValueError, match="column 6") as raised:
        render_query("up{x=$1}", {})
    assert not isinstance(raised.value, MissingVariable)


def test_lead_up_variables_are_the_labels_then_target_pod_and_namespace():
    labels = {
        "alertname": "StepTimeHigh",
        "pod": "from-the-alert",
        "target": "from-the-alert",
        "app.kubernetes.io/name": "trainer",  # cannot be a placeholder: left out
    }
    assert lead_up_variables("trainer", labels, "trainer-0-abc", "ml") == {
        "alertname": "StepTimeHigh",
        "pod": "trainer-0-abc",
        "target": "trainer",
        "namespace": "ml",
    }
    # Where the service does not know its pod, the alert's pod label is $pod.
    assert lead_up_variables("trainer", labels) == {
        "alertname": "StepTimeHigh",
        "pod": "from-the-alert",
        "target": "trainer",
    }


# -- against the real Prometheus ---------------------------------------------------------------


def test_lead_up_holds_the_values_served_in_order_within_the_window(world):
    series, notes = query_lead_up(
        world.prom.url,
        [RAMP_QUERY],
        lead_up_variables(TARGET, {}),
        at(world.ramp_start),
        at(world.ramp_end),
    )
    assert notes == []
    assert len(series) == 1
    (queue,) = series
    assert (queue.name, queue.unit, queue.source) == ("queue_depth", "count", "prometheus")
    assert queue.query == f'leadup_queue_depth{{job="{TARGET}", kind="train"}}'
    assert queue.labels == {
        "__name__": "leadup_queue_depth",
        "job": TARGET,
        "instance": world.instance,
        "kind": "train",
    }
    # A window of a few seconds over 300 points: one evaluation a second, from start to end.
    times = [t for t, _ in queue.points]
    steps = round(world.ramp_end - world.ramp_start)
    assert times == pytest.approx([world.ramp_start + k for k in range(steps + 1)], abs=1e-3)
    values = [v for _, v in queue.points]
    assert values[0] == RAMP[0] and values[-1] == RAMP[-1]
    assert values == sorted(values)
    assert set(values) <= set(RAMP)
    assert len(set(values)) >= 3, values  # it climbed through the window, not jumped


def test_step_is_the_window_over_max_points(world):
    window_s = 600  # over 300 points: a step of 2 s
    series, notes = query_lead_up(
        world.prom.url,
        [RAMP_QUERY],
        {"target": TARGET},
        at(world.ramp_end - window_s),
        at(world.ramp_end),
    )
    assert notes == []
    times = [t for t, _ in series[0].points]
    # Only the evaluations since the gauge existed come back; they are 2 s apart, ending at end.
    assert len(times) >= 3
    assert times[-1] == pytest.approx(world.ramp_end, abs=1e-3)
    assert [b - a for a, b in itertools.pairwise(times)] == pytest.approx(
        [2.0] * (len(times) - 1), abs=1e-3
    )
    assert series[0].points[-1][1] == RAMP[-1]


def test_awkward_label_values_are_matched_exactly(world):
    """Prometheus parses the rendered string back to the label value itself: the one series
    with that value matches, and the `} or vector(1)` inside it stays text."""
    query = PromQuery(name="awkward", expr="leadup_queue_depth{job=$target, kind=$kind}")
    series, notes = query_lead_up(
        world.prom.url,
        [query],
        {"target": TARGET, "kind": AWKWARD},
        at(world.ramp_start),
        at(world.ramp_end),
    )
    assert notes == []
    assert [s.labels["kind"] for s in series] == [AWKWARD]
    assert {v for _, v in series[0].points} == {42.0}


def test_an_injection_attempt_matches_nothing(world):
    query = PromQuery(name="injected", expr="leadup_queue_depth{job=$target, kind=$kind}")
    series, notes = query_lead_up(
        world.prom.url,
        [query],
        {"target": TARGET, "kind": '"} or vector(1) or up{x="'},
        at(world.ramp_start),
        at(world.ramp_end),
    )
    assert series == []
    assert len(notes) == 1
    assert notes[0].startswith("query injected matched no series in the window: ")


def test_a_missing_variable_skips_that_query_and_asks_the_others(world):
    needs_namespace = PromQuery(name="by_namespace", expr="up{namespace=$namespace}")
    series, notes = query_lead_up(
        world.prom.url,
        [needs_namespace, RAMP_QUERY],
        {"target": TARGET, "pod": "p"},
        at(world.ramp_start),
        at(world.ramp_end),
    )
    assert notes == [
        "query by_namespace not asked: it needs $namespace, which this snapshot does not have "
        "(have: pod, target)"
    ]
    assert [s.name for s in series] == ["queue_depth"]
    assert series[0].points[-1][1] == RAMP[-1]


def test_a_parse_error_is_noted_in_prometheus_words(world):
    bad = PromQuery(name="broken", expr="sum(rate(leadup_queue_depth{job=$target}[1m])")
    rendered = render_query(bad.expr, {"target": TARGET})
    series, notes = query_lead_up(
        world.prom.url,
        [bad, RAMP_QUERY],
        {"target": TARGET},
        at(world.ramp_start),
        at(world.ramp_end),
    )
    # What Prometheus itself says of that query.
    answer = httpx.get(
        f"{world.prom.url}/api/v1/query_range",
        params={"query": rendered, "start": world.ramp_start, "end": world.ramp_end, "step": 1},
        timeout=10,
    ).json()
    assert answer["errorType"] == "bad_data" and "parse error" in answer["error"]
    assert notes == [f"query broken failed: Prometheus says bad_data: {answer['error']}"]
    assert [s.name for s in series] == ["queue_depth"]  # the next query was still asked


def test_a_query_matching_nothing_is_noted(world):
    absent = PromQuery(name="absent", expr='leadup_queue_depth{job=$target, kind="eval"}')
    series, notes = query_lead_up(
        world.prom.url, [absent], {"target": TARGET}, at(world.ramp_start), at(world.ramp_end)
    )
    assert series == []
    assert notes == [
        "query absent matched no series in the window: "
        f'leadup_queue_depth{{job="{TARGET}", kind="eval"}}'
    ]


def test_infinite_and_nan_values_are_dropped(world):
    """v / (v - 8) is infinite where the gauge is 8; 0/0 is NaN everywhere."""
    train = 'leadup_queue_depth{job=$target, kind="train"}'
    ratio = PromQuery(name="ratio", expr=f"{train} / ({train} - 8)")
    nan = PromQuery(name="nan", expr=f"{train} * 0 / 0")
    series, notes = query_lead_up(
        world.prom.url,
        [ratio, nan],
        {"target": TARGET},
        at(world.ramp_start),
        at(world.ramp_end),
    )
    assert [s.name for s in series] == ["ratio"]
    points = series[0].points
    assert points[0] == pytest.approx((world.ramp_start, 1 / (1 - 8)), abs=1e-3)
    assert all(math.isfinite(v) for _, v in points)
    assert points[-1][0] < world.ramp_end - 0.5  # the evaluations at 8 (+Inf) are gone
    assert notes == [
        "query nan: 1 series had only NaN or infinite values (0/0 when nothing happened?), left out"
    ]


def test_series_beyond_the_cap_are_cut_with_a_note(world):
    shards = PromQuery(name="shard_bytes", expr="leadup_shard_bytes{job=$target}", unit="bytes")
    series, notes = query_lead_up(
        world.prom.url, [shards], {"target": TARGET}, at(world.ramp_start), at(world.ramp_end)
    )
    assert notes == ["query shard_bytes returned 25 series; the first 20 are kept"]
    assert [s.labels["shard"] for s in series] == SHARDS[:20]  # Prometheus sorts by labels
    assert [s.points[-1][1] for s in series] == [float(i) for i in range(20)]


# -- when Prometheus cannot answer -------------------------------------------------------------


def test_an_unreachable_prometheus_is_a_note_and_the_rest_is_not_asked():
    url = f"http://127.0.0.1:{free_port()}"  # nothing listens there
    now = time.time()
    series, notes = query_lead_up(
        url,
        [RAMP_QUERY, PromQuery(name="other", expr="up")],
        {"target": TARGET},
        at(now - 60),
        at(now),
        timeout_s=2,
    )
    assert series == []
    assert len(notes) == 2
    assert notes[0].startswith(f"Prometheus at {url} unreachable: ConnectError")
    assert notes[1] == "queries not asked: queue_depth, other"


def test_a_prometheus_that_never_answers_spends_one_deadline_for_all_queries():
    with socket.socket() as listener:  # accepts connections (the kernel does), never replies
        listener.bind(("127.0.0.1", 0))
        listener.listen(8)
        url = f"http://127.0.0.1:{listener.getsockname()[1]}"
        now = time.time()
        series, notes = query_lead_up(
            url,
            [RAMP_QUERY, PromQuery(name="other", expr="up"), PromQuery(name="third", expr="up")],
            {"target": TARGET},
            at(now - 60),
            at(now),
            timeout_s=0.3,
        )
    assert series == []
    assert notes == [
        "query queue_depth: no answer from Prometheus within the lead-up's 0.3 s",
        "queries not asked: other, third (the lead-up's 0.3 s were spent)",
    ]


def test_a_proxy_error_page_is_a_note():
    def proxy(request: httpx.Request) -> httpx.Response:
        assert request.url.path == "/prom/api/v1/query_range"
        return httpx.Response(502, text="<html><body>Bad Gateway</body></html>")

    now = time.time()
    with httpx.Client(transport=httpx.MockTransport(proxy)) as client:
        series, notes = query_lead_up(
            "http://127.0.0.1:9/prom/",
            [RAMP_QUERY],
            {"target": TARGET},
            at(now - 60),
            at(now),
            client=client,
        )
    assert series == []
    assert notes == ["query queue_depth: HTTP 502, not JSON: <html><body>Bad Gateway</body></html>"]


def test_a_window_that_ends_before_it_starts_asks_nothing():
    def refuse(request: httpx.Request) -> httpx.Response:
        raise AssertionError(f"asked {request.url}")

    now = time.time()
    with httpx.Client(transport=httpx.MockTransport(refuse)) as client:
        series, notes = query_lead_up(
            "http://127.0.0.1:9", [RAMP_QUERY], {}, at(now), at(now - 1), client=client
        )
    assert series == []
    assert len(notes) == 1 and "ends" in notes[0] and "before it starts" in notes[0]


class SilentPrometheus:
    """A listening socket that accepts connections and reads requests, and never answers: a
    Prometheus hung behind a proxy. It notes each request and each hang-up in `events`."""

    def __init__(self, events: list[str]):
        self.events = events
        self.requests = 0
        self._listener = socket.socket()
        self._listener.bind(("127.0.0.1", 0))
        self._listener.listen(8)
        self._listener.settimeout(0.2)
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._serve, daemon=True)
        self._thread.start()

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self._listener.getsockname()[1]}"

    def _serve(self) -> None:
        while not self._stop.is_set():
            try:
                conn, _ = self._listener.accept()
            except TimeoutError:
                continue
            threading.Thread(target=self._hold, args=(conn,), daemon=True).start()

    def _hold(self, conn: socket.socket) -> None:
        with conn:
            conn.settimeout(60)
            try:
                if conn.recv(65536):
                    self.requests += 1
                    self.events.append("asked")
                    while conn.recv(65536):  # until the client gives up and closes
                        pass
            except OSError:
                pass
            self.events.append("hung up")

    def close(self) -> None:
        self._stop.set()
        self._thread.join(5)
        self._listener.close()


def test_a_prometheus_that_never_answers_delays_no_analysis(make_service):
    """Its one deadline runs beside the analysis: the analysis starts before the first query
    gives up, and the queries left when the deadline is spent are not asked."""
    events: list[str] = []
    prom = SilentPrometheus(events)
    queries = [{"name": name, "expr": f"{name}{{job=$target}}"} for name in ("steps", "rss", "gpu")]
    service = make_service(
        WritesBytes(RECORDED_CAPTURE.read_bytes()),
        targets="trainer=grpc://127.0.0.1:9",
        prometheus_url=prom.url,
        prometheus_queries=queries,
        prometheus_timeout_s=DEADLINE_S,
    )
    service.controller.analyzer = NotedAnalyzer(service.controller.analyzer, events)
    try:
        snapshot = service.controller.start(CaptureRequest(duration_s=0.1, target="trainer"))
        assert service.controller.wait(snapshot.id, 60 + DEADLINE_S)
        done = service.store.get(snapshot.id)
    finally:
        prom.close()
    assert done.status == "ready", done.error
    # The analysis began before the query gave up (it used to begin after every query had).
    assert sorted(events) == ["analysis started", "asked", "hung up"], events
    assert events.index("analysis started") < events.index("hung up"), events
    assert prom.requests == 1  # not one per query: the deadline is for all of them
    assert done.lead_up is not None and done.lead_up.notes[-2:] == [
        f"query steps: no answer from Prometheus within the lead-up's {DEADLINE_S:g} s",
        f"queries not asked: rss, gpu (the lead-up's {DEADLINE_S:g} s were spent)",
    ]
