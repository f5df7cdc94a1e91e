"""The view's server process: an aiohttp server (the ``view`` extra) on an asyncio loop, started
by view/server.py for ``gk-stream run --view`` and fed over its control socket (view/control.py).

It serves the static page (pygpukit_dsp/view/static), ``/api/state`` (JSON: every view sink's
newest figures and the health panel) and ``/ws`` (a WebSocket: a ``hello`` with each sink's axes,
then ``frame``, ``meta`` and ``health`` messages). Only GET is served: the page is read-only.

The stream never waits for it, and it never holds the stream process's GIL: view sinks copy
snapshots into rings in shared memory (io/view_ring.py), a pump on this loop reads them, reduces them
(reduce.py) and sends each frame to each browser through that browser's own bounded queue; a
browser that cannot keep up loses frames (counted in ``frames_dropped``), not the stream. The
health panel's figures arrive a few times a second from the stream process.

With a token, every request needs it: ``?token=``, an ``X-View-Token`` or ``Authorization: Bearer``
header, or the cookie the page gets when it is opened with ``?token=`` (a missing token: 401, a
wrong one: 403; compared with hmac.compare_digest).

    python -m pygpukit_dsp.view.page --control-fd FD   # what view/server.py starts
"""

from __future__ import annotations

import argparse
import asyncio
import hmac
import importlib.resources
import json
import os
import signal
import socket
import sys
import threading
import time
from typing import Any

from aiohttp import WSMsgType, web

from ..io.view_sink import ViewSinkParams
from ..signal import SignalSpec
from . import control
from .reduce import FrameLimiter, SinkAnalysis
from ..io.view_ring import RingLayout, RingReader

COOKIE = "gk_view_token"
STATIC_FILES = {"index.html": "text/html", "view.js": "text/javascript", "view.css": "text/css"}
CLIENT_QUEUE = 16  # messages waiting for one browser at most


def static_text(name: str) -> str:
    """A file of the page, from the installed package (the wheel ships them)."""
    return importlib.resources.files("pygpukit_dsp.view").joinpath("static", name).read_text(encoding="utf-8")


class ServedSink:
    """A view sink as the server sees it: its spec and parameters, and the ring it reads."""

    def __init__(self, spec: SignalSpec, params: ViewSinkParams, ring: RingReader):
        self.spec, self.params, self.ring = spec, params, ring


class PageServer:
    """Serve the view on ``host:port`` for the sinks named ``sinks``: each is drawn once the stream
    process opened it (an ``open`` message with its ring); the health panel shows the figures the
    stream process last sent."""

    def __init__(self, host: str, port: int, *, token: str | None = None, sinks: list[str] | tuple = (),
                 title: str = ""):
        self.host, self.port, self.token = host, int(port), token
        self.names = list(sinks)
        self.title = title
        self.sinks: dict[str, ServedSink] = {}
        self.analyses: dict[str, SinkAnalysis] = {}
        self._limiters: dict[str, FrameLimiter] = {}
        self.latest_health: dict[str, Any] = {"streams": [], "running": False}
        self.ended = False
        self.bytes_sent = 0
        self.messages_sent = 0
        self.frames_dropped = 0  # frames a slow browser did not get
        self.errors: dict[str, str] = {}  # a sink whose snapshots could not be reduced: why
        self._clients: set[asyncio.Queue] = set()
        self._stopping: asyncio.Event | None = None

    # ------------------------------------------------------------------ life
    async def serve(self, sock: socket.socket, receiver: control.Receiver) -> None:
        """Listen, say so (or why not) on ``sock``, then serve until ``stop`` or the socket's end."""
        loop = asyncio.get_running_loop()
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
            control.send(sock, {"type": "error", "errno": exc.errno, "reason": str(exc.strerror or exc)})
            await runner.cleanup()
            return
        sockets = getattr(site._server, "sockets", None) or []  # the port the OS gave for port 0
        if sockets:
            self.port = sockets[0].getsockname()[1]
        control.send(sock, {"type": "listening", "port": self.port})

        def read() -> None:  # blocking reads on a thread of this process: the loop only gets messages
            while True:
                try:
                    got = receiver.next()
                except OSError:
                    got = None
                if got is None:
                    loop.call_soon_threadsafe(self._stopping.set)
                    return
                loop.call_soon_threadsafe(self.on_message, *got)

        threading.Thread(target=read, name="gk-view-control", daemon=True).start()
        pump = asyncio.ensure_future(self._pump())
        await self._stopping.wait()
        pump.cancel()
        for q in list(self._clients):  # each browser's sender ends, then its socket closes
            _offer(q, None)
        await asyncio.sleep(0)
        await runner.cleanup()

    def on_message(self, message: dict[str, Any], fd: int | None) -> None:
        kind = message.get("type")
        if kind == "open" and fd is not None:
            name = message["sink"]
            old = self.sinks.pop(name, None)
            if old is not None:
                old.ring.close()
            self.analyses.pop(name, None)
            try:
                self.sinks[name] = ServedSink(SignalSpec(**message["spec"]), ViewSinkParams(**message["params"]),
                                              RingReader(RingLayout(**message["layout"]), fd))
            except Exception as exc:  # said on the page; the other sinks go on
                self.errors[name] = f"{type(exc).__name__}: {exc}"
            if name not in self.names:
                self.names.append(name)
        elif kind == "health":
            figures = message.get("figures") or {}
            self.latest_health = figures
            self._broadcast(self._health_message())
        elif kind == "ended":
            self.ended = True
            self._broadcast(self._health_message())
        elif kind == "stop" and self._stopping is not None:
            self._stopping.set()

    # ------------------------------------------------------------------ data
    def _analysis(self, name: str, sink: ServedSink) -> SinkAnalysis:
        a = self.analyses.get(name)
        if a is None:
            a = self.analyses[name] = SinkAnalysis(name, sink.spec, sink.params)
            self._limiters[name] = FrameLimiter(sink.params.fps)
            self._broadcast({"type": "meta", "sink": a.meta()})
        return a

    async def _pump(self) -> None:
        """Read every sink's ring, reduce, and send a frame per sink at most at its frame rate."""
        while True:
            now = time.monotonic()
            for name, sink in list(self.sinks.items()):
                try:
                    self._pump_sink(name, sink, now)
                except Exception as exc:  # one sink's bad snapshot: said on the page, the others go on
                    self.errors[name] = f"{type(exc).__name__}: {exc}"
            fastest = max((s.params.fps for s in self.sinks.values()), default=10.0)
            await asyncio.sleep(0.5 / fastest)

    def _pump_sink(self, name: str, sink: ServedSink, now: float) -> None:
        a = self._analysis(name, sink)
        for snap in sink.ring.drain():
            a.add(snap)
        if a.pending and self._limiters[name].ready(now):
            frame = a.frame()
            frame["type"] = "frame"
            frame["dropped"] = sink.ring.dropped
            self._broadcast(frame)

    def _health_message(self) -> dict[str, Any]:
        figures = dict(self.latest_health)
        figures["running"] = figures.get("running", False) and not self.ended
        figures["ended"] = self.ended
        figures["errors"] = dict(self.errors)
        return {"type": "health", **figures}

    def state(self) -> dict[str, Any]:
        """What /api/state answers: each sink's axes and newest figures, the health panel, the traffic."""
        sinks = {name: {**a.meta(), "frames_sent": a.frames_sent, "latest": a.latest,
                        "dropped": self.sinks[name].ring.dropped}
                 for name, a in self.analyses.items() if name in self.sinks}
        return {"title": self.title, "sinks": sinks, "sinks_not_open": [n for n in self.names if n not in sinks],
                "errors": dict(self.errors), "health": self._health_message(),
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
        metas = [a.meta() for a in self.analyses.values()]
        hello = {"type": "hello", "title": self.title, "sinks": metas,
                 "sinks_not_open": [n for n in self.names if n not in self.analyses]}
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


VIEW_NICE = 10  # the view's server runs this much nicer than its stream


def nice_below_stream() -> int:
    """Lower this process's CPU priority under its stream's (a busy host gives the stream's threads
    the CPU first: the page may lag, the stream may not). Where the OS refuses, it stays as it is;
    the niceness it runs at."""
    try:
        return os.nice(VIEW_NICE)
    except OSError:
        return os.nice(0)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description="the view's server process (started by gk-stream run --view)")
    ap.add_argument("--control-fd", type=int, required=True)
    args = ap.parse_args(argv)
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # a terminal's Ctrl-C is the stream's: it stops us
    nice_below_stream()
    sock = socket.socket(fileno=args.control_fd)
    receiver = control.Receiver(sock)
    got = receiver.next()
    if got is None or got[0].get("type") != "config":
        return 2
    config = got[0]
    server = PageServer(config["host"], config["port"], token=config.get("token"), sinks=config.get("sinks", ()),
                        title=config.get("title", ""))
    asyncio.run(server.serve(sock, receiver))
    return 0


if __name__ == "__main__":
    sys.exit(main())
