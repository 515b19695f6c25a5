"""A slow (or absent) bucket: an HTTP proxy in front of moto's S3 server that holds every request.

The store's S3 client talks to this proxy as it would to any S3 endpoint; each request waits
`delay_s` and is then forwarded whole to the real S3 server, or answered 502 while `upstream`
is down. Every request is logged with when it started and finished, so a test can say what the
bucket had (or had not yet) done when the store answered, and count the PUTs each key got.
"""

from __future__ import annotations

import http.client
import threading
import time
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

from s3_server import KEY, SECRET

# Not forwarded: they describe one connection, and the proxy re-frames bodies itself.
_HOP = {"connection", "keep-alive", "transfer-encoding", "expect", "te", "upgrade"}


@dataclass
class ProxiedRequest:
    method: str
    path: str
    started: float  # time.monotonic()
    finished: float | None = None
    status: int | None = None


class SlowS3Proxy:
    def __init__(self, upstream_port: int, delay_s: float):
        self.upstream_port = upstream_port
        self.delay_s = delay_s
        self.requests: list[ProxiedRequest] = []
        self._lock = threading.Lock()
        self._server: ThreadingHTTPServer | None = None

    @property
    def endpoint(self) -> str:
        assert self._server is not None
        return f"http://127.0.0.1:{self._server.server_address[1]}"

    @property
    def options(self) -> dict:
        """fsspec options for the store: this endpoint; one try per call (no hidden retries)."""
        config = {"connect_timeout": 5, "read_timeout": 60, "retries": {"max_attempts": 1}}
        return {
            "endpoint_url": self.endpoint,
            "key": KEY,
            "secret": SECRET,
            "config_kwargs": config,
        }

    def start(self) -> SlowS3Proxy:
        proxy = self

        class Handler(_Forward):
            owner = proxy

        self._server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self._server.daemon_threads = True
        threading.Thread(target=self._server.serve_forever, name="slow-s3", daemon=True).start()
        return self

    def stop(self) -> None:
        if self._server is not None:
            self._server.shutdown()
            self._server.server_close()
            self._server = None

    def snapshot_log(self) -> list[ProxiedRequest]:
        with self._lock:
            return [ProxiedRequest(**vars(r)) for r in self.requests]

    def puts(self, key_part: str, *, ok_only: bool = True) -> int:
        """PUT requests whose path holds `key_part` (answered 200, unless `ok_only` is False)."""
        return sum(
            1
            for r in self.snapshot_log()
            if r.method == "PUT" and key_part in r.path and (r.status == 200 or not ok_only)
        )

    def _begin(self, method: str, path: str) -> ProxiedRequest:
        record = ProxiedRequest(method, path, time.monotonic())
        with self._lock:
            self.requests.append(record)
        return record

    def _end(self, record: ProxiedRequest, status: int) -> None:
        with self._lock:
            record.status, record.finished = status, time.monotonic()


class _Forward(BaseHTTPRequestHandler):
    owner: SlowS3Proxy
    protocol_version = "HTTP/1.1"  # keep-alive, and 100-continue answered here

    def log_message(self, format: str, *args: object) -> None:
        pass

    def do_GET(self) -> None:
        self._forward()

    do_PUT = do_POST = do_DELETE = do_HEAD = do_GET

    def _body(self) -> bytes:
        if self.headers.get("Transfer-Encoding", "").lower() == "chunked":
            data = bytearray()
            while True:
                size = int(self.rfile.readline().split(b";")[0].strip(), 16)
                if size == 0:
                    while self.rfile.readline() not in (b"\r\n", b"\n", b""):
                        pass  # trailers
                    return bytes(data)
                data += self.rfile.read(size)
                self.rfile.readline()
        return self.rfile.read(int(self.headers.get("Content-Length") or 0))

    def _forward(self) -> None:
        body = self._body()
        record = self.owner._begin(self.command, self.path)
        time.sleep(self.owner.delay_s)  # the slow bucket: the fault, not a wait
        headers = {k: v for k, v in self.headers.items() if k.lower() not in _HOP}
        headers["Content-Length"] = str(len(body))
        try:
            conn = http.client.HTTPConnection("127.0.0.1", self.owner.upstream_port, timeout=60)
            conn.request(self.command, self.path, body=body, headers=headers)
            response = conn.getresponse()
            status, reason, data = response.status, response.reason, response.read()
            upstream_headers = response.getheaders()
            conn.close()
        except OSError:  # the bucket is down
            status, reason, data, upstream_headers = 502, "Bad Gateway", b"", []
        self.owner._end(record, status)  # before the answer leaves: no client has it yet
        self.send_response(status, reason)
        length = str(len(data))
        for key, value in upstream_headers:
            lower = key.lower()
            if lower == "content-length":
                length = value if self.command == "HEAD" else length
            elif lower not in _HOP and lower not in ("date", "server"):
                self.send_header(key, value)
        self.send_header("Content-Length", length)
        self.end_headers()
        if self.command != "HEAD":
            self.wfile.write(data)
