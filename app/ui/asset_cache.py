"""Gradio's page and frontend assets kept in memory as first sent (the assets compressed).

The page itself is kept as well: for every request of it Gradio copies its ~420 kB config
(the Blocks', fixed once built), writes the root URL it makes of the request into it and renders
it with the API description into its template: ~50–90 ms of the server's CPU on every fresh
page's path to its first token. It is kept per URL, query and the request headers that make
that root URL, and only an answer that sets no cookie.

A fresh page of the UI asks for ~100 of Gradio's script and style files (1.9 MB, and Plotly's
4.6 MB chunk once a chart mounts). Gradio serves each from disk and compresses it on every
request (Brotli, in the server's event loop: ~0.2 CPU-s a page, 0.13 s of it for Plotly's
chunk alone, while no other request of the page is answered). Their names carry a hash of their
content (``assets/<name>-<hash>.js``) and come from the installed package, which does not change
while the server runs: the bytes Gradio sent once are the bytes it would send again for the same
request.

:class:`AssetCache` is the outermost middleware of the mounted Gradio app (inside the server's
own: the host check and the API key still apply) and answers a ``GET`` of ``/assets/...`` that
it has answered before with the same request headers that decide the response
(``Accept-Encoding``, ``Origin``, ``Host``) from memory, and the page (``GET /``) likewise.
Only complete 200 responses (assets: with an ``ETag``) are kept, up to ``max_bytes`` in all;
conditional, partial and credentialed requests go to Gradio.
"""

from __future__ import annotations

from typing import Any

ASSETS = "/assets/"
MAX_BYTES = 32 * 1024 * 1024
"""Bytes of responses kept at most (Gradio's whole frontend, compressed, is ~6 MB)."""

_KEYED = (b"accept-encoding", b"origin", b"host")  # the request headers a response depends on
# and the page's too: its config holds the root URL Gradio makes of the request (the URL's
# scheme and host, or these headers); its query names the page and a deep link
_PAGE_KEYED = (b"x-forwarded-host", b"x-forwarded-proto", b"x-gradio-server")
_REFUSED = (b"range", b"if-none-match", b"if-modified-since", b"cookie", b"authorization")


class AssetCache:
    """Pure ASGI wrapper of the Gradio app: its ``/assets/`` responses, kept and replayed."""

    def __init__(self, app: Any, max_bytes: int = MAX_BYTES) -> None:
        self.app = app
        self.max_bytes = max_bytes
        self.size = 0
        self.kept: dict[tuple[str, ...], tuple[dict[str, Any], bytes]] = {}
        self.hits = 0

    def key(self, scope: Any) -> tuple[str, ...] | None:
        """What identifies the response to this request, or None when it is not one to keep
        (not a plain GET of an asset, a conditional or partial request, one with credentials)."""
        if scope.get("type") != "http" or scope.get("method") != "GET":
            return None
        path = str(scope.get("path", ""))
        root = str(scope.get("root_path", ""))
        inner = path[len(root) :] if root and path.startswith(root) else path
        page = inner in ("", "/")
        if not page and (not inner.startswith(ASSETS) or scope.get("query_string")):
            return None
        headers = {k.lower(): v for k, v in scope.get("headers", [])}
        if any(h in headers for h in _REFUSED):
            return None
        key = (path, *(headers.get(h, b"").decode("latin-1") for h in _KEYED))
        if not page:
            return key
        extra = (str(scope.get("scheme")), bytes(scope.get("query_string", b"")).decode("latin-1"))
        return (*key, *extra, *(headers.get(h, b"").decode("latin-1") for h in _PAGE_KEYED))

    async def __call__(self, scope: Any, receive: Any, send: Any) -> None:
        key = self.key(scope)
        if key is None:
            await self.app(scope, receive, send)
            return
        kept = self.kept.get(key)
        if kept is not None:
            self.hits += 1
            head, body = kept
            await send(head)
            await send({"type": "http.response.body", "body": body})
            return
        start: dict[str, Any] = {}
        chunks: list[bytes] = []

        async def capture(message: dict[str, Any]) -> None:
            if message["type"] == "http.response.start":
                start.update(message)
            elif message["type"] == "http.response.body":
                chunks.append(message.get("body", b""))
                if not message.get("more_body"):
                    self._keep(key, start, b"".join(chunks))
            await send(message)

        await self.app(scope, receive, capture)

    def _keep(self, key: tuple[str, ...], start: dict[str, Any], body: bytes) -> None:
        headers = {k.lower(): v for k, v in start.get("headers", [])}
        page = ASSETS not in key[0]
        if (
            start.get("status") != 200
            or b"set-cookie" in headers
            or (b"etag" not in headers and not page)  # an asset's name and ETag: its content
            or self.size + len(body) > self.max_bytes
        ):
            return
        # a streamed (compressed) answer had no length: the replay, one message, has one
        kept = [(k, v) for k, v in start.get("headers", []) if k.lower() != b"content-length"]
        kept.append((b"content-length", str(len(body)).encode()))
        self.kept[key] = ({**start, "headers": kept}, body)
        self.size += len(body)


def cache_assets(app: Any, path: str) -> bool:
    """Add :class:`AssetCache` to the Gradio app mounted at ``path`` on ``app`` (a FastAPI app),
    as its outermost middleware; False when no such mount is found."""
    for route in app.router.routes:
        if getattr(route, "path", None) == path.rstrip("/") and hasattr(route, "app"):
            route.app.add_middleware(AssetCache)
            return True
    return False
