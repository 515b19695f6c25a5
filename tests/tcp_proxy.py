"""A loopback TCP proxy in front of several servers: what a Kubernetes Service is to the hub's
replicas. Each new connection goes to the next backend in turn (`round_robin`), or to the first
that accepts (`first_alive`: every client on one replica until it dies, so the test knows which);
one that refuses is skipped (a replica whose endpoint is gone); when either side closes, so does
the other (a killed replica's clients see their connection end, as through kube-proxy).
`reply_delay_s` holds every answer that long (a slow sidecar: a replica killed while it waits).

A plain module (like s3_server.py), run in threads of the test process.
"""

from __future__ import annotations

import contextlib
import itertools
import socket
import threading
import time
from collections import Counter


class ServiceProxy:
    def __init__(
        self, backends: list[int], policy: str = "round_robin", reply_delay_s: float = 0.0
    ):
        assert policy in ("round_robin", "first_alive")
        self.backends = backends
        self.policy = policy
        self.reply_delay_s = reply_delay_s
        self.connections: Counter[int] = Counter()  # backend port -> connections sent there
        self._next = itertools.cycle(range(len(backends)))
        self._listener = socket.create_server(("127.0.0.1", 0))
        self.port = self._listener.getsockname()[1]
        self._lock = threading.Lock()
        self._closed = False
        self._sockets: set[socket.socket] = set()

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def start(self) -> ServiceProxy:
        threading.Thread(target=self._accept, name="proxy-accept", daemon=True).start()
        return self

    def _accept(self) -> None:
        while not self._closed:
            try:
                client, _ = self._listener.accept()
            except OSError:
                return
            upstream = self._connect()
            if upstream is None:
                client.close()
                continue
            with self._lock:
                self._sockets |= {client, upstream}
            for a, b, delay in ((client, upstream, 0.0), (upstream, client, self.reply_delay_s)):
                threading.Thread(target=self._pump, args=(a, b, delay), daemon=True).start()

    def _connect(self) -> socket.socket | None:
        with self._lock:
            if self.policy == "first_alive":
                order = list(range(len(self.backends)))
            else:
                start, n = next(self._next), len(self.backends)
                order = [(start + k) % n for k in range(n)]
        for i in order:
            port = self.backends[i]
            try:
                upstream = socket.create_connection(("127.0.0.1", port), timeout=2)
            except OSError:
                continue  # refused: the next one
            upstream.settimeout(None)
            with self._lock:
                self.connections[port] += 1
            return upstream
        return None

    def _pump(self, source: socket.socket, sink: socket.socket, delay_s: float) -> None:
        try:
            while data := source.recv(65536):
                time.sleep(delay_s)  # the injected slowness: the fault, not a wait
                sink.sendall(data)
        except OSError:
            pass
        for s in (source, sink):
            with contextlib.suppress(OSError):
                s.shutdown(socket.SHUT_RDWR)

    def cut(self) -> int:
        """End every open connection, both sides, and keep accepting new ones (a network blip,
        a database failover); how many were cut."""
        with self._lock:
            open_now, self._sockets = self._sockets, set()
        for s in open_now:
            with contextlib.suppress(OSError):
                s.shutdown(socket.SHUT_RDWR)
            with contextlib.suppress(OSError):
                s.close()
        return len(open_now) // 2

    def close(self) -> None:
        self._closed = True
        self._listener.close()
        with self._lock:
            for s in self._sockets:
                with contextlib.suppress(OSError):
                    s.close()
