"""An HTTP proxy in front of an S3 endpoint (127.0.0.1) that counts what passes, can make
every request slower, and can stop answering: what B1 on S3 measures a query with, and
what the S3 fault tests break.

A client is pointed at the meter's endpoint instead of the server's. Each request is
forwarded as it came (the Host header too: the AWS signature covers it, so the server
checks it as if the client had called it directly), after `latency_s` (the round trip to
a real object store, which a server on loopback lacks), and counted by kind:

- `LIST`: a GET of a bucket (ListObjects, `list-type=2`), `HEAD`: HeadObject/HeadBucket,
  `GET`: an object read (ranged or whole), `PUT`, `POST` (multipart, bulk delete), `DELETE`;
- bytes received from the client and sent back to it (as far as the client read them:
  one that drops its connection mid-response is counted what was written until then).

While `refuse` is set, a request it matches is not answered: the meter closes the client's
connection at once, as an endpoint that went away does.
"""

from __future__ import annotations

import contextlib
import http.client
import threading
import time
from collections import Counter
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any
from urllib.parse import urlsplit

_CHUNK = 64 * 1024
# Hop-by-hop headers (RFC 9110 §7.6.1) and Expect (the meter answers 100-continue itself).
_HOP = {"connection", "keep-alive", "transfer-encoding", "te", "trailer", "upgrade", "expect"}


def kind_of(method: str, path: str) -> str:
    """The request's kind: LIST for a GET of a bucket (path-style: `/bucket?...`)."""
    parts = urlsplit(path)
    if method == "GET" and (parts.path.strip("/").count("/") == 0 or "list-type=" in parts.query):
        return "LIST"
    return method


@dataclass
class Counts:
    requests: Counter[str] = field(default_factory=Counter)
    bytes_in: int = 0  # from clients
    bytes_out: int = 0  # to clients

    def as_dict(self) -> dict[str, Any]:
        return {
            "requests": dict(sorted(self.requests.items())),
            "total_requests": sum(self.requests.values()),
            "bytes_in": self.bytes_in,
            "bytes_out": self.bytes_out,
        }


class S3Meter:
    """The proxy's state: where it forwards, what it counted, how slow and how broken."""

    def __init__(self, upstream: str) -> None:
        u = urlsplit(upstream)
        self.upstream = (u.hostname or "127.0.0.1", u.port or 80)
        self.latency_s = 0.0
        self.refuse: Callable[[str, str], bool] | None = None
        self.refused = 0
        self._counts = Counts()
        self._lock = threading.Lock()
        self.endpoint = ""

    def reset(self) -> Counts:
        """What was counted since the last reset, and start again from zero."""
        with self._lock:
            counts, self._counts = self._counts, Counts()
        return counts

    def count(self, kind: str, bytes_in: int, bytes_out: int) -> None:
        with self._lock:
            self._counts.requests[kind] += 1
            self._counts.bytes_in += bytes_in
            self._counts.bytes_out += bytes_out


class _Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"  # keep-alive, as S3 clients expect
    server: _Server
    _upstream: http.client.HTTPConnection | None = None  # one per client connection

    def log_message(self, format: str, *args: Any) -> None:  # quiet
        return

    def _forward(self) -> None:
        meter = self.server.meter
        refuse = meter.refuse
        if refuse is not None and refuse(self.command, self.path):
            meter.refused += 1
            self.close_connection = True
            return  # no answer: the client sees its connection closed
        body = self._body()
        length = len(body or b"")
        if meter.latency_s:
            time.sleep(meter.latency_s)
        upstream = self._upstream
        if upstream is None:
            upstream = self._upstream = http.client.HTTPConnection(*meter.upstream, timeout=60)
        skip = _HOP | {"content-length"}
        headers = {k: v for k, v in self.headers.items() if k.lower() not in skip}
        if body is not None:
            headers["Content-Length"] = str(length)  # de-chunked (below)
        try:
            upstream.request(self.command, self.path, body=body, headers=headers)
            response = upstream.getresponse()
            data = response.read()
        except (OSError, http.client.HTTPException):
            upstream.close()
            self._upstream = None
            self.close_connection = True
            return
        self.send_response_only(response.status, response.reason)
        sent_length = False
        for key, value in response.getheaders():
            if key.lower() in _HOP:
                continue
            sent_length |= key.lower() == "content-length"
            self.send_header(key, value)
        if not sent_length:
            self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        sent = 0
        try:
            # A reader that needs only the start of what it asked for (Iceberg's S3 stream
            # asks for the rest of the object, reads a column chunk, then drops the
            # connection) gets only what it took counted: the bytes written until then.
            for start in range(0, len(data) if self.command != "HEAD" else 0, _CHUNK):
                self.wfile.write(data[start : start + _CHUNK])
                sent += len(data[start : start + _CHUNK])
        except ConnectionError:
            self.close_connection = True
        finally:
            meter.count(kind_of(self.command, self.path), length, sent)

    def handle(self) -> None:
        with contextlib.suppress(ConnectionError):  # a client gone between requests
            super().handle()

    def _body(self) -> bytes | None:
        """The request's body, its HTTP chunking undone (AWS SDKs send chunked uploads
        with trailing checksums); an `aws-chunked` content encoding stays as sent."""
        if "chunked" in self.headers.get("Transfer-Encoding", "").lower():
            out = b""
            while True:
                size = int(self.rfile.readline().split(b";", 1)[0].strip(), 16)
                if size == 0:
                    while self.rfile.readline() not in (b"\r\n", b"\n", b""):
                        pass  # trailers
                    return out
                out += self.rfile.read(size)
                self.rfile.readline()
        length = int(self.headers.get("Content-Length") or 0)
        return self.rfile.read(length) if length else None

    do_GET = do_HEAD = do_PUT = do_POST = do_DELETE = _forward


class _Server(ThreadingHTTPServer):
    daemon_threads = True
    meter: S3Meter


@contextmanager
def metering(upstream: str) -> Iterator[S3Meter]:
    """A meter on a free port of 127.0.0.1 in front of `upstream`, for the block's life."""
    server = _Server(("127.0.0.1", 0), _Handler)
    server.meter = S3Meter(upstream)
    server.meter.endpoint = f"http://127.0.0.1:{server.server_address[1]}"
    thread = threading.Thread(target=server.serve_forever, name="s3-meter", daemon=True)
    thread.start()
    try:
        yield server.meter
    finally:
        server.shutdown()
        server.server_close()
