"""The view server over 127.0.0.1 on a free port: the token rules (401 without, 403 wrong, query,
header, bearer or the page's cookie), read-only, /api/state, the WebSocket's messages, a taken port,
and the static files found through importlib.resources (as the wheel ships them)."""

import asyncio
import importlib.resources
import socket
import threading
import time

import numpy as np
import pytest

from pygpukit_dsp.errors import ConfigError
from pygpukit_dsp.io.view_sink import Snapshot, ViewSink
from pygpukit_dsp.signal import SignalSpec

pytestmark = pytest.mark.usefixtures("aiohttp_installed")
TOKEN = "s3cret-token"


def test_the_page_files_ship_in_the_package():
    static = importlib.resources.files("pygpukit_dsp.view").joinpath("static")
    for name in ("index.html", "view.js", "view.css"):
        assert static.joinpath(name).is_file(), name
    assert "view.js" in static.joinpath("index.html").read_text()


class Feeder:
    """Writes a 1 kHz tone into a view sink from a thread, as a stream would, until stopped."""

    def __init__(self, sink, spec):
        self.sink, self.spec = sink, spec
        self._stop = threading.Event()
        self.thread = threading.Thread(target=self.run, daemon=True)

    def run(self):
        t0 = 0
        n = self.spec.block_size
        while not self._stop.is_set():
            t = (t0 + np.arange(n)) / self.spec.sample_rate
            self.sink.write((0.5 * np.cos(2 * np.pi * 1000 * t))[None].astype(np.float32))
            t0 += n
            time.sleep(0.005)

    def __enter__(self):
        self.thread.start()
        return self

    def __exit__(self, *exc):
        self._stop.set()
        self.thread.join(5)


@pytest.fixture
def served():
    from pygpukit_dsp.view.server import ViewServer

    spec = SignalSpec(48000, 1, 1024)
    sink = ViewSink(fps=20)
    sink.open(spec)
    health = {"streams": [{"stream": "tone", "blocks": 7}], "running": True}
    server = ViewServer("127.0.0.1", 0, token=TOKEN, sinks={"scope": sink}, health=lambda: health, title="t").start()
    try:
        with Feeder(sink, spec):
            yield server
    finally:
        server.stop()


async def fetch(url, **kw):
    import aiohttp

    async with aiohttp.ClientSession() as s:
        async with s.get(url, timeout=aiohttp.ClientTimeout(total=10), **kw) as r:
            return r.status, await r.text(), r.cookies


def get(url, **kw):
    return asyncio.run(fetch(url, **kw))


def test_every_request_needs_the_token(served):
    base = f"http://{served.address}"
    assert get(f"{base}/")[0] == 401
    assert get(f"{base}/api/state")[0] == 401
    assert get(f"{base}/static/view.js")[0] == 401
    assert get(f"{base}/ws")[0] == 401
    assert get(f"{base}/api/state?token=wrong")[0] == 403
    assert get(f"{base}/api/state", headers={"X-View-Token": "wrong"})[0] == 403
    assert get(f"{base}/api/state?token={TOKEN}")[0] == 200
    assert get(f"{base}/api/state", headers={"X-View-Token": TOKEN})[0] == 200
    assert get(f"{base}/api/state", headers={"Authorization": f"Bearer {TOKEN}"})[0] == 200
    status, text, cookies = get(f"{base}/?token={TOKEN}")
    assert status == 200 and "<canvas" in text
    assert cookies["gk_view_token"].value == TOKEN and cookies["gk_view_token"]["httponly"]
    assert get(f"{base}/static/view.js", cookies={"gk_view_token": TOKEN})[0] == 200


def test_the_view_is_read_only(served):
    import aiohttp

    async def post():
        async with aiohttp.ClientSession() as s:
            async with s.post(f"http://{served.address}/api/state?token={TOKEN}", data=b"x") as r:
                return r.status

    assert asyncio.run(post()) == 405


def test_api_state_has_the_sinks_figures_and_the_health(served, poll):
    import json

    def state():
        status, text, _ = get(f"http://{served.address}/api/state?token={TOKEN}")
        assert status == 200
        data = json.loads(text)
        return data if data["sinks"].get("scope", {}).get("frames_sent", 0) >= 2 else None

    data = poll(state)
    scope = data["sinks"]["scope"]
    assert scope["axis"]["unit"] == "Hz" and scope["axis"]["last"] == 24000
    assert scope["latest"]["peak_x"] == pytest.approx(1000, abs=48000 / 2048)
    assert data["health"]["streams"] == [{"stream": "tone", "blocks": 7}]
    assert data["health"]["ended"] is False


def test_the_websocket_sends_hello_health_and_frames(served):
    import aiohttp

    async def listen():
        got = {}
        async with aiohttp.ClientSession() as s:
            async with s.ws_connect(f"http://{served.address}/ws?token={TOKEN}") as ws:
                end = time.monotonic() + 20
                while time.monotonic() < end and not ({"hello", "health", "frame"} <= set(got)):
                    msg = await ws.receive_json(timeout=10)
                    got.setdefault(msg["type"], msg)
        return got

    got = asyncio.run(listen())
    assert {"hello", "health", "frame"} <= set(got)
    assert got["health"]["streams"][0]["blocks"] == 7
    frame = got["frame"]
    assert frame["sink"] == "scope" and frame["peak"]["x"] == pytest.approx(1000, abs=24)
    assert {"spectrum", "waterfall", "scope", "levels", "dropped"} <= set(frame)


def test_a_taken_port_is_a_config_error_naming_the_address():
    from pygpukit_dsp.view.server import ViewServer

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        s.listen()
        port = s.getsockname()[1]
        with pytest.raises(ConfigError, match=f"127.0.0.1:{port}"):
            ViewServer("127.0.0.1", port).start()


def test_stop_ends_the_thread_and_frees_the_port():
    from pygpukit_dsp.view.server import ViewServer

    server = ViewServer("127.0.0.1", 0).start()
    port = server.port
    assert get(f"http://127.0.0.1:{port}/api/state")[0] == 200  # no token set: none asked
    process = server.process
    server.stop()
    assert server.process is None and process.returncode == 0  # it ended when asked, not killed
    with socket.socket() as s:
        s.bind(("127.0.0.1", port))


def test_a_sink_whose_snapshots_fail_is_reported_and_the_others_go_on(poll):
    from pygpukit_dsp.view.server import ViewServer

    spec = SignalSpec(48000, 1, 1024)
    good, bad = ViewSink(fps=20), ViewSink(fps=20)
    good.open(spec)
    bad.open(spec)
    bad.feed.put(Snapshot(np.zeros((1, 2048), np.float32), 0.1))
    count = np.frombuffer(bad.feed.ring._map.buf, np.uint32, 1, 64 + 16)
    count[0] = 1 << 20  # fault injection: a slot that says it holds more than it can
    server = ViewServer("127.0.0.1", 0, sinks={"good": good, "bad": bad}).start()
    try:
        with Feeder(good, spec):
            poll(lambda: server.state()["sinks"].get("good", {}).get("frames_sent", 0) >= 2)
        state = server.state()
        assert "bad" in state["errors"] and "bad" in state["health"]["errors"]
        assert state["sinks"]["good"]["latest"]["peak_x"] == pytest.approx(1000, abs=24)
    finally:
        server.stop()


def test_a_sink_opened_after_the_server_started_is_served(poll):
    from pygpukit_dsp.view.server import ViewServer

    spec = SignalSpec(48000, 1, 1024)
    late = ViewSink(fps=20)
    server = ViewServer("127.0.0.1", 0, sinks={"late": late}).start()
    try:
        assert server.state()["sinks_not_open"] == ["late"]
        late.open(spec)
        with Feeder(late, spec):
            poll(lambda: server.state()["sinks"].get("late", {}).get("frames_sent", 0) >= 2)
        assert server.state()["sinks"]["late"]["latest"]["peak_x"] == pytest.approx(1000, abs=24)
    finally:
        server.stop()


def test_the_server_is_another_process_and_ends_with_its_stream_process():
    """The server never holds the stream process's GIL; a stream process that dies takes it along."""
    import os
    import subprocess
    import sys

    code = ("import sys, time; from pygpukit_dsp.view.server import ViewServer; "
            "s = ViewServer('127.0.0.1', 0).start(); print(s.process.pid, flush=True); time.sleep(60)")
    parent = subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE, text=True)
    try:
        child = int(parent.stdout.readline())
        assert child != os.getpid() and child != parent.pid
        parent.kill()
        parent.wait(10)
        end = time.monotonic() + 20
        while time.monotonic() < end and _alive(child):
            time.sleep(0.05)
        assert not _alive(child)
    finally:
        if parent.poll() is None:
            parent.kill()
            parent.wait(10)


def _alive(pid):
    import os

    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    try:  # a zombie (ended, not yet reaped by init) counts as ended
        with open(f"/proc/{pid}/stat") as f:
            return f.read().split(")")[-1].split()[0] != "Z"
    except OSError:
        return False


def test_the_server_runs_nicer_than_its_stream():
    """A busy host gives the stream's threads the CPU before the page's."""
    import os

    from pygpukit_dsp.view.page import VIEW_NICE
    from pygpukit_dsp.view.server import ViewServer

    server = ViewServer("127.0.0.1", 0).start()
    try:
        with open(f"/proc/{server.process.pid}/stat") as f:
            nice = int(f.read().split(")")[-1].split()[16])  # field 19 of proc(5)
        assert nice == min(19, os.nice(0) + VIEW_NICE)
    finally:
        server.stop()
