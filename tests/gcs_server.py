"""A GCS API on loopback that TensorFlow's own GCS filesystem writes to, for the tests.

TF 2.21's GCS filesystem always calls https://www.googleapis.com (it has no endpoint setting),
so the job is pointed at an HTTPS proxy on loopback (`https_proxy`/`http_proxy`, which TF's
libcurl honours) that answers every CONNECT with TLS under a certificate made here
(`CURL_CA_BUNDLE`) and passes the requests to gcp-storage-emulator, a standalone GCS JSON API
server from the package registry. `GOOGLE_AUTH_TOKEN_FOR_TESTING` is TF's own switch to skip
OAuth. The service reads the same emulator through gcsfs (`STORAGE_EMULATOR_HOST`). Nothing
leaves 127.0.0.1.
"""

from __future__ import annotations

import contextlib
import datetime
import os
import socket
import ssl
import subprocess
import sys
import threading
from dataclasses import dataclass, field
from pathlib import Path

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import NameOID
from helpers import free_port, stop_process, wait_for_http

GOOGLE_HOSTS = ["www.googleapis.com", "storage.googleapis.com"]

# Two requests TF's uploads make that gcp-storage-emulator 2026.7.19 gets wrong, put right here:
# an empty body (each directory marker) is an empty object, not an error; and a body sent with
# both `Transfer-Encoding: chunked` and `Content-Length` is chunked (RFC 9112 6.3), where the
# emulator would store the chunk framing as data.
EMULATOR = """
import sys, threading
from gcp_storage_emulator import server
from gcp_storage_emulator.handlers import objects

media_upload, read_raw_data = objects._media_upload, server._read_raw_data

def empty_body_is_empty(request, response, storage):
    if request.data is None:
        request._data = b""
    return media_upload(request, response, storage)

def chunked_before_length(handler):
    if (handler.headers.get("Transfer-Encoding") or "").lower() == "chunked":
        del handler.headers["Content-Length"]
    return read_raw_data(handler)

objects._media_upload, server._read_raw_data = empty_body_is_empty, chunked_before_length
port, bucket = int(sys.argv[1]), sys.argv[2]
server.create_server("127.0.0.1", port, in_memory=True, default_bucket=bucket).start()
threading.Event().wait()
"""


@dataclass
class GcsServer:
    bucket: str
    workdir: Path
    port: int = 0
    proxy_port: int = 0
    proc: subprocess.Popen | None = None
    _proxy: socket.socket | None = None
    _threads: list[threading.Thread] = field(default_factory=list)

    @property
    def endpoint(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    @property
    def job_env(self) -> dict[str, str]:
        """What a TF job needs to write gs:// into this server."""
        proxy = f"http://127.0.0.1:{self.proxy_port}"
        return {
            "https_proxy": proxy,
            "http_proxy": proxy,  # the resumable upload's session URL is plain http
            "no_proxy": "127.0.0.1,localhost",
            "CURL_CA_BUNDLE": str(self.workdir / "cert.pem"),
            "GOOGLE_AUTH_TOKEN_FOR_TESTING": "test-token",
        }

    @property
    def service_env(self) -> dict[str, str]:
        """What gcsfs in the service needs; NO_GCE_CHECK keeps google-auth off the network."""
        return {"STORAGE_EMULATOR_HOST": self.endpoint, "NO_GCE_CHECK": "True"}

    def start(self) -> GcsServer:
        self.workdir.mkdir(parents=True, exist_ok=True)
        self.port = free_port()
        log = self.workdir / "emulator.log"
        self.proc = subprocess.Popen(
            [sys.executable, "-u", "-c", EMULATOR, str(self.port), self.bucket],
            stdout=log.open("a"),
            stderr=subprocess.STDOUT,
        )
        wait_for_http(self.proc, f"{self.endpoint}/storage/v1/b", log, "the GCS emulator")
        self._start_proxy()
        return self

    def stop(self) -> None:
        if self._proxy is not None:
            self._proxy.close()
        if self.proc is not None:
            stop_process(self.proc, timeout_s=0)

    def _start_proxy(self) -> None:
        cert, key = _self_signed(self.workdir, GOOGLE_HOSTS)
        context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        context.load_cert_chain(cert, key)
        self._proxy = socket.create_server(("127.0.0.1", 0))
        self.proxy_port = self._proxy.getsockname()[1]
        accept = threading.Thread(target=self._accept, args=(context,), daemon=True)
        accept.start()

    def _accept(self, context: ssl.SSLContext) -> None:
        assert self._proxy is not None
        while True:
            try:
                client, _ = self._proxy.accept()
            except OSError:  # closed by stop()
                return
            threading.Thread(target=self._serve, args=(client, context), daemon=True).start()

    def _serve(self, client: socket.socket, context: ssl.SSLContext) -> None:
        """One proxied connection: CONNECT -> TLS -> the emulator; plain http -> the emulator."""
        try:
            head = b""
            while b"\r\n\r\n" not in head:
                chunk = client.recv(4096)
                if not chunk:
                    return
                head += chunk
            upstream = socket.create_connection(("127.0.0.1", self.port))
            if head.startswith(b"CONNECT "):
                client.sendall(b"HTTP/1.1 200 Connection established\r\n\r\n")
                client = context.wrap_socket(client, server_side=True)
            else:  # "POST http://www.googleapis.com/upload/... HTTP/1.1": keep only the path
                method, uri, rest = head.split(b" ", 2)
                path = b"/" + uri.split(b"/", 3)[3] if uri.count(b"/") >= 3 else b"/"
                upstream.sendall(b" ".join([method, path, rest]))
            threading.Thread(target=_pipe, args=(client, upstream), daemon=True).start()
            _pipe(upstream, client)
        except OSError:
            client.close()


def _pipe(source: socket.socket, sink: socket.socket) -> None:
    try:
        while data := source.recv(65536):
            sink.sendall(data)
    except OSError:
        pass
    finally:
        for s in (source, sink):
            with contextlib.suppress(OSError):
                s.shutdown(socket.SHUT_RDWR)


def _self_signed(workdir: Path, hosts: list[str]) -> tuple[Path, Path]:
    key = ec.generate_private_key(ec.SECP256R1())
    name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, hosts[0])])
    now = datetime.datetime.now(datetime.UTC)
    cert = (
        x509.CertificateBuilder()
        .subject_name(name)
        .issuer_name(name)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(hours=1))
        .not_valid_after(now + datetime.timedelta(days=1))
        .add_extension(x509.SubjectAlternativeName([x509.DNSName(h) for h in hosts]), False)
        .add_extension(x509.BasicConstraints(ca=True, path_length=None), True)
        .sign(key, hashes.SHA256())
    )
    cert_path, key_path = workdir / "cert.pem", workdir / "key.pem"
    cert_path.write_bytes(cert.public_bytes(serialization.Encoding.PEM))
    key_path.write_bytes(
        key.private_bytes(
            serialization.Encoding.PEM,
            serialization.PrivateFormat.PKCS8,
            serialization.NoEncryption(),
        )
    )
    os.chmod(key_path, 0o600)
    return cert_path, key_path
