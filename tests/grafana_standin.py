"""A loopback stand-in for Grafana's annotations HTTP API (Grafana itself cannot run here).

It follows Grafana's documented `POST /api/annotations`: a JSON body with `text` (required),
`time` / `timeEnd` in epoch milliseconds, `tags` (strings), and optionally `dashboardUID` and
`panelId`; `Authorization: Bearer <service-account token>`. It answers as Grafana does:
200 `{"message": "Annotation added", "id": N}`, 401 for a wrong token, 400 for a bad body, and
whatever status the test scripts first (to play Grafana being down). `hold()` makes it take
each request and answer nothing until `release()` (Grafana hung behind a proxy).
"""

from __future__ import annotations

import json
import threading
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

DOCUMENTED_FIELDS = {"dashboardUID", "dashboardId", "panelId", "time", "timeEnd", "tags", "text"}


@dataclass
class Received:
    method: str
    path: str
    headers: dict[str, str]
    body: Any


@dataclass
class GrafanaStandIn:
    token: str
    script: list[int] = field(default_factory=list)  # statuses to answer first, in order
    received: list[Received] = field(default_factory=list)
    problems: list[str] = field(default_factory=list)  # what a real Grafana would refuse

    def __post_init__(self) -> None:
        standin = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args: Any) -> None:
                pass

            def do_GET(self) -> None:
                standin._handle(self, "GET")

            def do_POST(self) -> None:
                standin._handle(self, "POST")

        self._server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self._thread = threading.Thread(target=self._server.serve_forever, daemon=True)
        self._thread.start()
        self._lock = threading.Lock()
        self._answering = threading.Event()
        self._answering.set()

    def hold(self) -> None:
        """From now on, record each request and answer it only once released."""
        self._answering.clear()

    def release(self) -> None:
        self._answering.set()

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self._server.server_address[1]}"

    def close(self) -> None:
        self.release()
        self._server.shutdown()
        self._server.server_close()

    def annotations(self) -> list[dict]:
        return [r.body for r in self.received if r.path == "/api/annotations"]

    def _handle(self, handler: BaseHTTPRequestHandler, method: str) -> None:
        length = int(handler.headers.get("Content-Length") or 0)
        raw = handler.rfile.read(length)
        try:
            body = json.loads(raw) if raw else None
        except ValueError:
            body = raw
        with self._lock:
            self.received.append(Received(method, handler.path, dict(handler.headers), body))
        self._answering.wait(60)
        with self._lock:
            scripted = self.script.pop(0) if self.script else None
        status, answer = self._answer(handler, method, body, scripted)
        data = json.dumps(answer).encode()
        handler.send_response(status)
        handler.send_header("Content-Type", "application/json")
        handler.send_header("Content-Length", str(len(data)))
        handler.end_headers()
        handler.wfile.write(data)

    def _answer(self, handler, method, body, scripted) -> tuple[int, dict]:
        if method != "POST" or handler.path != "/api/annotations":
            return 404, {"message": "Not found"}
        if handler.headers.get("Authorization") != f"Bearer {self.token}":
            return 401, {"message": "Unauthorized"}
        if scripted is not None:
            return scripted, {"message": "scripted failure"}
        problems = _check_body(handler.headers.get("Content-Type", ""), body)
        if problems:
            self.problems.extend(problems)
            return 400, {"message": "; ".join(problems)}
        return 200, {"message": "Annotation added", "id": len(self.annotations())}


def _check_body(content_type: str, body: Any) -> list[str]:
    if not content_type.startswith("application/json"):
        return [f"Content-Type {content_type!r} is not JSON"]
    if not isinstance(body, dict):
        return ["body is not a JSON object"]
    problems = [f"unknown field {k!r}" for k in body if k not in DOCUMENTED_FIELDS]
    if not isinstance(body.get("text"), str) or not body["text"]:
        problems.append("text is required")
    for key in ("time", "timeEnd"):
        if key in body and not isinstance(body[key], int):
            problems.append(f"{key} must be epoch milliseconds (an integer)")
    if not all(isinstance(t, str) for t in body.get("tags", [])):
        problems.append("tags must be strings")
    if "panelId" in body and not isinstance(body["panelId"], int):
        problems.append("panelId must be an integer")
    return problems
