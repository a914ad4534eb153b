"""Request limits, checked before routing: no control characters in the path or query
(422; those no body string may hold either, lakewarden.policy.model.CONTROL_CHARACTERS) and no
body over `MAX_BODY_BYTES` (413), whether or not it declares its length. One route takes
more: Hudi's write-commit callback lists every file the commit wrote (about 1 KiB each), so
a commit of thousands of files is megabytes; it gets `LARGER_BODIES`' allowance, and only
with credentials (an anonymous body never gets past 1 MiB).

A pure ASGI middleware: what reaches the routes is already within bounds, so no route can
pass a NUL byte to Postgres or read an unbounded body. Refusals have the body of every
error, `ErrorOut` (services/api/errors.py).
"""

from __future__ import annotations

from urllib.parse import unquote_to_bytes

from starlette.types import ASGIApp, Message, Receive, Scope, Send

from lakewarden.policy.model import CONTROL_CHARACTERS as _CONTROL
from services.api.schemas import ErrorOut

MAX_BODY_BYTES = 1024 * 1024  # 1 MiB: the largest real request (a policy) is a few KiB
# A Hudi commit of ~50,000 files; a larger one is recorded by the poll.
LARGER_BODIES = {"/api/v1/events/hudi": 64 * 1024 * 1024}


class RequestLimits:
    def __init__(
        self,
        app: ASGIApp,
        max_body_bytes: int = MAX_BODY_BYTES,
        larger: dict[str, int] | None = None,
    ) -> None:
        self.app = app
        self.max_body_bytes = max_body_bytes
        self.larger = LARGER_BODIES if larger is None else larger

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        problem = _control_characters(scope)
        if problem:
            await _refuse(send, 422, problem)
            return
        declared = _content_length(scope)
        if declared is None and _header(scope, b"content-length") is not None:
            await _refuse(send, 400, "Content-Length must be a non-negative integer")
            return
        limit = self.max_body_bytes
        if (_header(scope, b"authorization") or b"").strip():
            limit = self.larger.get(scope.get("path", ""), limit)
        if declared is not None and declared > limit:
            await _refuse(send, 413, _too_large(limit))
            return
        if declared is None:
            # No declared length (chunked): read the body here, counting, then replay it.
            body = bytearray()
            while True:
                message = await receive()
                if message["type"] != "http.request":
                    break  # the client went away; the app will see the disconnect
                body += message.get("body", b"")
                if len(body) > limit:
                    await _refuse(send, 413, _too_large(limit))
                    return
                if not message.get("more_body", False):
                    break
            receive = _replay(bytes(body), receive)
        await self.app(scope, receive, send)


def _too_large(limit: int) -> str:
    return f"request body too large: at most {limit} bytes"


def _control_characters(scope: Scope) -> str | None:
    """What to fix if the (decoded) path or any query parameter holds a control character."""
    hit = _CONTROL.search(scope.get("path", ""))
    if hit:
        return f"the path contains the control character {_name(hit.group())}: remove it"
    for pair in scope.get("query_string", b"").split(b"&"):
        key, _, value = pair.partition(b"=")
        for part in (key, value):
            decoded = unquote_to_bytes(part.replace(b"+", b" ")).decode("utf-8", "replace")
            hit = _CONTROL.search(decoded)
            if hit:
                name = unquote_to_bytes(key).decode("utf-8", "replace")
                return (
                    f"query parameter {_CONTROL.sub('', name)!r} contains the control "
                    f"character {_name(hit.group())}: remove it"
                )
    return None


def _name(char: str) -> str:
    return f"U+{ord(char):04X}"


def _header(scope: Scope, name: bytes) -> bytes | None:
    for key, value in scope.get("headers", ()):
        if key.lower() == name:
            return bytes(value)
    return None


def _content_length(scope: Scope) -> int | None:
    raw = _header(scope, b"content-length")
    if raw is None or not raw.strip().isdigit():
        return None
    return int(raw)


def _replay(body: bytes, receive: Receive) -> Receive:
    sent = False

    async def replay() -> Message:
        nonlocal sent
        if not sent:
            sent = True
            return {"type": "http.request", "body": body, "more_body": False}
        return await receive()

    return replay


async def _refuse(send: Send, status: int, detail: str) -> None:
    payload = ErrorOut(detail=detail).model_dump_json(exclude_none=True).encode()
    await send(
        {
            "type": "http.response.start",
            "status": status,
            "headers": [
                (b"content-type", b"application/json"),
                (b"content-length", str(len(payload)).encode()),
            ],
        }
    )
    await send({"type": "http.response.body", "body": payload})
