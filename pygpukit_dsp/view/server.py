"""The stream process's handle of its live view: it starts the view's server process
(``python -m pygpukit_dsp.view.page``, the ``view`` extra), gives it each view sink's ring when the
sink opens, and sends it the health panel's figures a few times a second, from one thread.

The server runs in a process of its own so that its work (the FFTs, JSON, the WebSocket) never
holds this process's GIL, which a stream's thread needs back after each native call. It ends when
``stop()`` asks, or when this process ends (the end of its control socket), and ignores the
terminal's Ctrl-C: the stream stops it after its summary.
"""

from __future__ import annotations

import dataclasses
import json
import os
import socket
import subprocess
import sys
import threading
import time
import urllib.request
from pathlib import Path
from typing import Any, Callable

from ..errors import ConfigError
from . import control

OPEN_POLL_S = 0.1  # how often the relay looks for a sink not open yet (its first frame waits this at most)


class ViewServer:
    """Serve the view of ``sinks`` ({name: ViewSink}) and ``health()`` (a dict) on ``host:port``.

    ``start()`` returns once the server listens (a ConfigError naming the address when it cannot);
    ``stop()`` ends the server process and the relay thread. ``port`` 0 takes a free port (``url``).
    """

    def __init__(self, host: str, port: int, *, token: str | None = None, sinks: dict[str, Any] | None = None,
                 health: Callable[[], dict[str, Any]] | None = None, health_hz: float = 4.0, title: str = ""):
        self.host, self.port, self.token = host, int(port), token
        self.sinks = dict(sinks or {})
        self.health = health
        self.health_hz = health_hz
        self.title = title
        self.process: subprocess.Popen | None = None
        self._sock: socket.socket | None = None
        self._send_lock = threading.Lock()
        self._relay: threading.Thread | None = None
        self._stopping = threading.Event()
        self._sent: dict[str, int] = {}  # each sink's feed generation the server has

    @property
    def address(self) -> str:
        host = f"[{self.host}]" if ":" in self.host else self.host
        return f"{host}:{self.port}"

    @property
    def url(self) -> str:
        return f"http://{self.address}/" + (f"?token={self.token}" if self.token else "")

    # ------------------------------------------------------------------ life
    def start(self, timeout: float = 30.0) -> "ViewServer":
        ours, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_STREAM)
        package_parent = str(Path(__file__).resolve().parents[2])  # the child imports this very package
        env = dict(os.environ, PYTHONPATH=os.pathsep.join(filter(None, [package_parent, os.environ.get("PYTHONPATH")])))
        try:
            self.process = subprocess.Popen(
                [sys.executable, "-m", "pygpukit_dsp.view.page", "--control-fd", str(theirs.fileno())],
                pass_fds=[theirs.fileno()], stdin=subprocess.DEVNULL, env=env, start_new_session=True)
        finally:
            theirs.close()
        self._sock = ours
        control.send(ours, {"type": "config", "host": self.host, "port": self.port, "token": self.token,
                            "title": self.title, "sinks": list(self.sinks)})
        ours.settimeout(timeout)
        try:
            got = control.Receiver(ours).next()
        except (socket.timeout, OSError):
            got = None
        ours.settimeout(None)
        if got is None or got[0].get("type") not in ("listening", "error"):
            self.stop()
            raise ConfigError(f"the view server on {self.address} did not start within {timeout:g} s",
                              hint="see its messages above; is the 'view' extra installed? "
                                   "(pip install 'pygpukit-dsp[view]')")
        reply = got[0]
        if reply["type"] == "error":
            self.stop()
            raise ConfigError(f"--view {self.address}: cannot listen: {reply.get('reason')}",
                              hint="the port may be taken: pick another (--view HOST:PORT; port 0 takes a free one)")
        self.port = int(reply["port"])
        self._relay = threading.Thread(target=self._relay_main, name="gk-view-relay", daemon=True)
        self._relay.start()
        return self

    def set_ended(self) -> None:
        """The run ended: the page says so (the last figures stay on it until stop())."""
        self._publish_health()
        self._send({"type": "ended"})

    def stop(self, timeout: float = 10.0) -> None:
        self._stopping.set()
        if self._relay is not None:
            self._relay.join(timeout)
            self._relay = None
        proc = self.process
        if proc is not None:
            self._send({"type": "stop"})
            try:
                proc.wait(timeout)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait(timeout)
            self.process = None
        if self._sock is not None:
            self._sock.close()
            self._sock = None

    # ------------------------------------------------------------------ relay
    def _send(self, message: dict[str, Any], fd: int | None = None) -> bool:
        with self._send_lock:
            if self._sock is None:
                return False
            try:
                control.send(self._sock, message, fd)
                return True
            except OSError:  # the server went away: the stream goes on without its view
                return False

    def _relay_main(self) -> None:
        next_health = 0.0
        while not self._stopping.is_set():
            waiting = self._offer_sinks()
            now = time.monotonic()
            if now >= next_health:
                next_health = now + 1.0 / self.health_hz
                self._publish_health()
            # wakes of this thread take the stream process's GIL: only as often as there is work
            pause = next_health - time.monotonic()
            self._stopping.wait(min(pause, OPEN_POLL_S) if waiting else pause)

    def _offer_sinks(self) -> bool:
        """Give the server each sink that opened (again) since the last look; whether a sink has
        not opened yet (the relay looks again soon)."""
        waiting = False
        for name, sink in self.sinks.items():
            feed = sink.feed
            ring = feed.ring
            if ring is None or sink.spec is None:
                waiting = True
                continue
            if self._sent.get(name) == feed.generation:
                continue
            try:
                fd = os.dup(ring.fd)  # the sink may close its ring meanwhile: the server gets its own
            except OSError:
                continue
            try:
                self._send({"type": "open", "sink": name, "spec": dataclasses.asdict(sink.spec),
                            "params": sink.params.model_dump(mode="json"), "layout": ring.layout.to_dict()}, fd)
            finally:
                os.close(fd)
            self._sent[name] = feed.generation
        return waiting

    def _publish_health(self) -> None:
        if self.health is None:
            return
        try:
            figures = self.health()
        except Exception as exc:  # a stream between states: the page keeps its last figures and says why
            figures = {"streams": [], "running": False, "error": f"{type(exc).__name__}: {exc}"}
        self._send({"type": "health", "figures": figures})

    # ------------------------------------------------------------------ reading back
    def state(self, timeout: float = 10.0) -> dict[str, Any]:
        """What the page's /api/state answers now (the sinks' newest figures, the health panel)."""
        request = urllib.request.Request(f"http://{self.address}/api/state")
        if self.token:
            request.add_header("X-View-Token", self.token)
        with urllib.request.urlopen(request, timeout=timeout) as r:
            return json.loads(r.read())
