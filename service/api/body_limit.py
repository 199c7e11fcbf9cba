"""ASGI middleware that refuses request bodies over a size cap with 413."""

from __future__ import annotations

from collections.abc import Awaitable, Callable, MutableMapping
from typing import Any

__all__ = ["ASGIApp", "BodyLimit"]

Scope = MutableMapping[str, Any]
Message = MutableMapping[str, Any]
Receive = Callable[[], Awaitable[Message]]
Send = Callable[[Message], Awaitable[None]]
ASGIApp = Callable[[Scope, Receive, Send], Awaitable[None]]


class BodyLimit:
    """ASGI middleware: refuse a request body over ``limit`` bytes with 413, counting the
    bytes as they arrive (a client may lie in Content-Length or send none, e.g. chunked).

    The body is read whole before the application sees it (the application would buffer it
    anyway to parse the JSON), so an oversized body is refused before any handler runs.
    """

    def __init__(self, app: ASGIApp, limit: int) -> None:
        self.app, self.limit = app, limit

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        headers = dict(scope.get("headers") or [])
        declared = headers.get(b"content-length")
        if declared is not None and (not declared.isdigit() or int(declared) > self.limit):
            await _too_large(send, self.limit)
            return
        body = await self._read(receive, send)
        if body is None:
            return
        whole: Message | None = {"type": "http.request", "body": body}

        async def replay() -> Message:
            nonlocal whole
            if whole is not None:
                message, whole = whole, None
                return message
            return await receive()

        await self.app(scope, replay, send)

    async def _read(self, receive: Receive, send: Send) -> bytes | None:
        """The whole body, or None when the client went away or was answered 413."""
        chunks: list[bytes] = []
        seen = 0
        while True:
            message = await receive()
            if message["type"] != "http.request":  # the client went away
                return None
            chunk = message.get("body", b"")
            seen += len(chunk)
            if seen > self.limit:
                # Read on (up to four times the cap more) before answering: a server that
                # closes on a client still sending makes the kernel reset the connection,
                # and the client loses the 413 with it.
                drained = 0
                while message.get("more_body", False) and drained <= 4 * self.limit:
                    message = await receive()
                    if message["type"] != "http.request":
                        return None
                    drained += len(message.get("body", b""))
                await _too_large(send, self.limit)
                return None
            chunks.append(chunk)
            if not message.get("more_body", False):
                return b"".join(chunks)


async def _too_large(send: Send, limit: int) -> None:
    body = f'{{"detail": "request body over {limit} bytes"}}'.encode()
    await send(
        {
            "type": "http.response.start",
            "status": 413,
            "headers": [
                (b"content-type", b"application/json"),
                (b"content-length", str(len(body)).encode()),
                (b"connection", b"close"),
            ],
        }
    )
    await send({"type": "http.response.body", "body": body})
