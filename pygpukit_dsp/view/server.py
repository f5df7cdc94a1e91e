"""The live web view: an aiohttp server on its own thread and asyncio loop (the ``view`` extra).

It serves the static page (pygpukit_dsp/view/static), ``/api/state`` (JSON: every view sink's
newest figures and the health panel) and ``/ws`` (a WebSocket: a ``hello`` with each sink's axes,
then ``frame``, ``meta`` and ``health`` messages). Only GET is served: the page is read-only.

The stream never waits for it: view sinks hand snapshots over through their bounded feeds
(io/view_sink.py), a pump on this loop drains them, reduces them (reduce.py) and sends each frame
to each browser through that browser's own bounded queue; a browser that cannot keep up loses
frames (counted in ``frames_dropped``), not the stream.

With a token, every request needs it: ``?token=``, an ``X-View-Token`` or ``Authorization: Bearer``
header, or the cookie the page gets when it is opened with ``?token=`` (a missing token: 401, a
wrong one: 403; compared with hmac.compare_digest).
"""

from __future__ import annotations

import asyncio
import hmac
import importlib.resources
import json
import threading
import time
from typing import Any, Callable

from aiohttp import WSMsgType, web

from ..errors import ConfigError
from .reduce import FrameLimiter, SinkAnalysis

COOKIE = "gk_view_token"
STATIC_FILES = {"index.html": "text/html", "view.js": "text/javascript", "view.css": "text/css"}
CLIENT_QUEUE = 16  # messages waiting for one browser at most


def static_text(name: str) -> str:
    """A file of the page, from the installed package (the wheel ships them)."""
    return importlib.resources.files("pygpukit_dsp.view").joinpath("static", name).read_text(encoding="utf-8")


class ViewServer:
    """Serve the view of ``sinks`` ({name: ViewSink}) and ``health()`` (a dict) on ``host:port``.

    ``start()`` returns once the socket listens (a ConfigError naming the address when it cannot);
    ``stop()`` closes every connection and joins the thread. ``port`` 0 takes a free port (``url``).
    """

    def __init__(self, host: str, port: int, *, token: str | None = None, sinks: dict[str, Any] | None = None,
                 health: Callable[[], dict[str, Any]] | None = None, health_hz: float = 4.0, title: str = ""):
        self.host, self.port, self.token = host, int(port), token
        self.sinks = dict(sinks or {})
        self.health = health
        self.health_hz = health_hz
        self.title = title
        self.analyses: dict[str, SinkAnalysis] = {}
        self._limiters: dict[str, FrameLimiter] = {}
        self.latest_health: dict[str, Any] = {"streams": [], "running": False}
        self.ended = False
        self.bytes_sent = 0
        self.messages_sent = 0
        self.frames_dropped = 0  # frames a slow browser did not get
        self.errors: dict[str, str] = {}  # a sink whose snapshots could not be reduced: why
        self._clients: set[asyncio.Queue] = set()
        self._loop: asyncio.AbstractEventLoop | None = None
        self._thread: threading.Thread | None = None
        self._runner: web.AppRunner | None = None
        self._stopping: asyncio.Event | None = None
        self._lock = threading.Lock()  # latest figures, read by /api/state and by tests

    @property
    def address(self) -> str:
        host = f"[{self.host}]" if ":" in self.host else self.host
        return f"{host}:{self.port}"

    @property
    def url(self) -> str:
        return f"http://{self.address}/" + (f"?token={self.token}" if self.token else "")

    # ------------------------------------------------------------------ life
    def start(self, timeout: float = 10.0) -> "ViewServer":
        started: dict[str, Any] = {}
        ready = threading.Event()

        def main() -> None:
            loop = asyncio.new_event_loop()
            self._loop = loop
            asyncio.set_event_loop(loop)
            try:
                loop.run_until_complete(self._serve(started, ready))
            finally:
                loop.close()
                ready.set()

        self._thread = threading.Thread(target=main, name="gk-view", daemon=True)
        self._thread.start()
        if not ready.wait(timeout):
            raise ConfigError(f"the view server on {self.address} did not start within {timeout:g} s")
        if "error" in started:
            self._thread.join(timeout)
            exc = started["error"]
            raise ConfigError(f"--view {self.address}: cannot listen: {exc.strerror or exc}",
                              hint="the port may be taken: pick another (--view HOST:PORT; port 0 takes a free one)"
                              ) from exc
        return self

    async def _serve(self, started: dict[str, Any], ready: threading.Event) -> None:
        self._stopping = asyncio.Event()
        app = web.Application(middlewares=[self._guard])
        app.router.add_get("/", self._index)
        app.router.add_get("/static/{name}", self._static)
        app.router.add_get("/favicon.ico", self._no_icon)
        app.router.add_get("/api/state", self._state)
        app.router.add_get("/ws", self._ws)
        runner = web.AppRunner(app, access_log=None, handle_signals=False)
        await runner.setup()
        site = web.TCPSite(runner, self.host, self.port, reuse_address=False)
        try:
            await site.start()
        except OSError as exc:
            started["error"] = exc
            await runner.cleanup()
            ready.set()
            return
        self._runner = runner
        sockets = getattr(site._server, "sockets", None) or []  # the port the OS gave for port 0
        if sockets:
            self.port = sockets[0].getsockname()[1]
        ready.set()
        tasks = [asyncio.ensure_future(self._pump()), asyncio.ensure_future(self._publish_health())]
        await self._stopping.wait()
        for t in tasks:
            t.cancel()
        for q in list(self._clients):  # each browser's sender ends, then its socket closes
            _offer(q, None)
        await asyncio.sleep(0)
        await runner.cleanup()

    def set_ended(self) -> None:
        """The run ended: the page says so (the last figures stay on it until stop())."""
        self.ended = True

    def stop(self, timeout: float = 10.0) -> None:
        loop, thread = self._loop, self._thread
        if loop is None or thread is None:
            return
        if self._stopping is not None and not loop.is_closed():
            try:
                loop.call_soon_threadsafe(self._stopping.set)
            except RuntimeError:  # the loop already closed
                pass
        thread.join(timeout)
        self._thread = None

    # ------------------------------------------------------------------ data
    def _analysis(self, name: str, sink: Any) -> SinkAnalysis | None:
        a = self.analyses.get(name)
        if a is None and sink.spec is not None:
            a = SinkAnalysis(name, sink.spec, sink.params)
            with self._lock:
                self.analyses[name] = a
            self._limiters[name] = FrameLimiter(sink.params.fps)
            self._broadcast({"type": "meta", "sink": a.meta()})
        return a

    async def _pump(self) -> None:
        """Drain every sink's feed, reduce, and send a frame per sink at most at its frame rate."""
        fastest = max((s.params.fps for s in self.sinks.values()), default=10.0)
        while True:
            now = time.monotonic()
            for name, sink in self.sinks.items():
                try:
                    self._pump_sink(name, sink, now)
                except Exception as exc:  # one sink's bad snapshot: said on the page, the others go on
                    with self._lock:
                        self.errors[name] = f"{type(exc).__name__}: {exc}"
            await asyncio.sleep(0.5 / fastest)

    def _pump_sink(self, name: str, sink: Any, now: float) -> None:
        a = self._analysis(name, sink)
        if a is None:
            return
        for snap in sink.feed.drain():
            a.add(snap)
        if a.pending and self._limiters[name].ready(now):
            frame = a.frame()
            frame["type"] = "frame"
            frame["dropped"] = sink.feed.dropped
            self._broadcast(frame)

    async def _publish_health(self) -> None:
        while True:
            if self.health is not None:
                try:
                    figures = self.health()
                except Exception as exc:  # a stream between states: keep the last figures, say why
                    figures = {**self.latest_health, "error": f"{type(exc).__name__}: {exc}"}
                with self._lock:
                    self.latest_health = figures
            self._broadcast(self._health_message())
            await asyncio.sleep(1.0 / self.health_hz)

    def _health_message(self) -> dict[str, Any]:
        with self._lock:
            figures = dict(self.latest_health)
        figures["running"] = figures.get("running", False) and not self.ended
        figures["ended"] = self.ended
        with self._lock:
            figures["errors"] = dict(self.errors)
        return {"type": "health", **figures}

    def state(self) -> dict[str, Any]:
        """What /api/state answers: each sink's axes and newest figures, the health panel, the traffic."""
        with self._lock:
            sinks = {name: {**a.meta(), "frames_sent": a.frames_sent, "latest": a.latest,
                            "dropped": self.sinks[name].feed.dropped} for name, a in self.analyses.items()}
        waiting = [n for n in self.sinks if n not in sinks]
        with self._lock:
            errors = dict(self.errors)
        return {"title": self.title, "sinks": sinks, "sinks_not_open": waiting, "errors": errors,
                "health": self._health_message(),
                "traffic": {"bytes_sent": self.bytes_sent, "messages_sent": self.messages_sent,
                            "frames_dropped": self.frames_dropped, "clients": len(self._clients)}}

    def _broadcast(self, message: dict[str, Any]) -> None:
        if not self._clients:
            return
        text = json.dumps(message, separators=(",", ":"))
        for q in list(self._clients):
            if not _offer(q, text):
                self.frames_dropped += 1

    # ------------------------------------------------------------------ http
    @web.middleware
    async def _guard(self, request: web.Request, handler: Any) -> web.StreamResponse:
        if request.method != "GET":
            return web.Response(status=405, text="the view is read-only\n")
        if self.token is not None:
            given = (request.query.get("token") or request.headers.get("X-View-Token")
                     or _bearer(request.headers.get("Authorization")) or request.cookies.get(COOKIE))
            if not given:
                return web.Response(status=401, text="this view needs its token: open the address gk-stream "
                                                     "printed (?token=...)\n")
            if not hmac.compare_digest(given.encode(), self.token.encode()):
                return web.Response(status=403, text="wrong token\n")
        response = await handler(request)
        response.headers.setdefault("Cache-Control", "no-store")
        return response

    async def _index(self, request: web.Request) -> web.Response:
        response = web.Response(text=static_text("index.html"), content_type="text/html")
        if self.token is not None:
            response.set_cookie(COOKIE, self.token, httponly=True, samesite="Strict")
        return response

    async def _static(self, request: web.Request) -> web.Response:
        name = request.match_info["name"]
        if name not in STATIC_FILES:
            raise web.HTTPNotFound()
        return web.Response(text=static_text(name), content_type=STATIC_FILES[name])

    async def _no_icon(self, request: web.Request) -> web.Response:
        return web.Response(status=204)

    async def _state(self, request: web.Request) -> web.Response:
        return web.json_response(self.state())

    async def _ws(self, request: web.Request) -> web.WebSocketResponse:
        ws = web.WebSocketResponse(heartbeat=20)
        await ws.prepare(request)
        q: asyncio.Queue = asyncio.Queue(CLIENT_QUEUE)
        with self._lock:
            metas = [a.meta() for a in self.analyses.values()]
        hello = {"type": "hello", "title": self.title, "sinks": metas,
                 "sinks_not_open": [n for n in self.sinks if n not in self.analyses]}
        self._clients.add(q)
        sender = asyncio.ensure_future(self._send_loop(ws, q, hello))
        try:
            async for msg in ws:  # the page sends nothing that matters; this notices the close
                if msg.type == WSMsgType.ERROR:
                    break
        finally:
            self._clients.discard(q)
            _offer(q, None)
            await sender
        return ws

    async def _send_loop(self, ws: web.WebSocketResponse, q: asyncio.Queue, hello: dict[str, Any]) -> None:
        try:
            for text in (json.dumps(hello), json.dumps(self._health_message())):
                await ws.send_str(text)
                self.bytes_sent += len(text)
            while True:
                text = await q.get()
                if text is None:
                    break
                await ws.send_str(text)
                self.bytes_sent += len(text)
                self.messages_sent += 1
        except (ConnectionError, RuntimeError):  # the browser went away
            pass
        finally:
            await ws.close()


def _offer(q: asyncio.Queue, item: Any) -> bool:
    """Put without waiting; a full queue drops its oldest message for the new one (False)."""
    try:
        q.put_nowait(item)
        return True
    except asyncio.QueueFull:
        try:
            q.get_nowait()
        except asyncio.QueueEmpty:
            pass
        q.put_nowait(item)
        return False


def _bearer(header: str | None) -> str | None:
    if header and header.lower().startswith("bearer "):
        return header[7:].strip()
    return None
