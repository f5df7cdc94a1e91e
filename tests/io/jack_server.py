"""A JACK audio server for the live tests: a real audio server with a dummy backend, no sound card.

``JackServer.start(name)`` runs ``jackd -n NAME -d dummy -r 48000 -p 256`` (``period=`` another
period) in its own process group and waits until a client can connect; ``stop()`` ends it by its
PID (TERM, then KILL). Clients (PortAudio in gk-stream, the JACK-Client package here) reach a named
server through the ``JACK_DEFAULT_SERVER`` environment variable.

``LoopProcess`` runs a ``LoopClient`` in a process of its own (``python jack_server.py loop ...``):
its Python process callback then never waits for the GIL of the test process, and the test process
keeps talking to one JACK server only (libjack keeps one server's state per process).
"""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time

RATE = 48000
PERIOD = 256


def jackd_path() -> str | None:
    return shutil.which("jackd")


_PROBE = """
import sys, jack
try:
    jack.Client("gk-test-probe", no_start_server=True, servername=sys.argv[1] or None).close()
except jack.JackOpenError:
    sys.exit(1)
"""


def server_running(name: str | None = None) -> bool:
    """True when a JACK server (``name``, else the default one) accepts clients.

    Asked in a child process: libjack keeps one server's state per process, and a test process
    whose clients talk to one server crashes when a second server it probed goes away.
    """
    probe = subprocess.run([sys.executable, "-c", _PROBE, name or ""], capture_output=True, timeout=30)
    return probe.returncode == 0


def _remove_stale_shm(name: str) -> None:
    """A killed server leaves its shared-memory segments and semaphores in /dev/shm; a new server
    of the same name then starts, but a PortAudio client finds no devices on it. Removed only
    when no server of that name answers."""
    import glob

    stale = glob.glob(f"/dev/shm/jack_{name}_*") + glob.glob(f"/dev/shm/jack_sem.*_{name}_*")
    if stale and not server_running(name):
        for path in stale:
            try:
                os.unlink(path)
            except OSError:
                pass


def wait_for_ports(name: str | None, prefix: str = "PortAudio", timeout_s: float = 30.0) -> None:
    """Wait until a client whose name starts with ``prefix`` has ports on server ``name`` (asked
    with jack_lsp in a child process, for the same reason as server_running)."""
    env = {**os.environ, **({"JACK_DEFAULT_SERVER": name} if name else {})}
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        r = subprocess.run(["jack_lsp"], capture_output=True, text=True, timeout=10, env=env)
        if any(line.startswith(prefix) for line in r.stdout.splitlines()):
            return
        time.sleep(0.1)
    raise TimeoutError(f"no JACK client '{prefix}...' with ports on server {name!r} in {timeout_s} s")


class JackServer:
    def __init__(self, name: str | None, proc: subprocess.Popen | None, log_path: str | None = None,
                 period: int | None = None):
        self.name, self.proc, self.log_path = name, proc, log_path
        self.period = period  # frames, for a server started here

    @property
    def owned(self) -> bool:
        return self.proc is not None

    @property
    def env(self) -> dict[str, str]:
        """Environment that points JACK clients (PortAudio too) at this server."""
        return {"JACK_DEFAULT_SERVER": self.name} if self.name else {}

    @classmethod
    def start(cls, name: str, *, rate: int = RATE, period: int = PERIOD, timeout_s: float = 15.0) -> "JackServer":
        jackd = jackd_path()
        if jackd is None:
            raise RuntimeError("jackd is not installed (Debian: apt-get install jackd2)")
        _remove_stale_shm(name)
        fd, log_path = tempfile.mkstemp(prefix=f"{name}-", suffix=".log")
        with os.fdopen(fd, "w") as log:
            proc = subprocess.Popen([jackd, "-n", name, "-d", "dummy", "-r", str(rate), "-p", str(period)],
                                    stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
        server = cls(name, proc, log_path, period)
        deadline = time.monotonic() + timeout_s
        time.sleep(0.2)
        while not server_running(name):
            if proc.poll() is not None or time.monotonic() > deadline:
                log_text = server.log()
                server.stop()
                raise RuntimeError(f"jackd did not start (exit {proc.returncode}): {log_text[-2000:]}")
            time.sleep(0.1)
        return server

    def log(self) -> str:
        if self.log_path is None:
            return ""
        with open(self.log_path, errors="replace") as f:
            return f.read()

    def kill(self, sig: int = signal.SIGKILL) -> None:
        """The server goes away (the device-disappears test)."""
        if self.proc is not None and self.proc.poll() is None:
            os.kill(self.proc.pid, sig)
            self.proc.wait(10)
            if self.name:
                # the dead server's registry entry and shared memory stay behind; a server of the
                # same name started now would come up but serve PortAudio no devices. One that
                # starts and stops cleanly clears them.
                JackServer.start(self.name).stop()

    def stop(self) -> None:
        if self.proc is None:
            return
        if self.proc.poll() is None:
            os.kill(self.proc.pid, signal.SIGTERM)
            try:
                self.proc.wait(5)
            except subprocess.TimeoutExpired:
                os.kill(self.proc.pid, signal.SIGKILL)
                self.proc.wait(5)
        if self.log_path is not None and os.path.exists(self.log_path):
            os.unlink(self.log_path)


class XrunMonitor:
    """A JACK client with no process callback of its own: it only counts the server's xruns (a
    client whose Python callback waits for the GIL could cause xruns itself)."""

    def __init__(self, name: str = "gk-test-xrun-monitor"):
        import jack

        self.xruns = 0
        self.delays_us: list[float] = []
        self.gone: list[str] = []  # clients that left the server, in the order it told us
        self.client = jack.Client(name, no_start_server=True)
        self.client.set_xrun_callback(self._xrun)
        self.client.set_client_registration_callback(self._registration)
        self.client.activate()

    def _xrun(self, delay: float) -> None:
        self.xruns += 1
        self.delays_us.append(delay)

    def _registration(self, name: str, register: bool) -> None:
        if not register:
            self.gone.append(name)

    def wait_until_gone(self, prefix: str, timeout_s: float = 10.0) -> bool:
        """Wait until a client whose name starts with ``prefix`` has left. The server tells each
        client of xruns and departures in order, so every xrun that client could have been told
        of has then reached this monitor too."""
        deadline = time.monotonic() + timeout_s
        while not any(n.startswith(prefix) for n in self.gone):
            if time.monotonic() > deadline:
                return False
            time.sleep(0.02)
        return True

    def close(self) -> None:
        self.client.deactivate()
        self.client.close()


class LoopClient:
    """A second JACK client: plays ``signal`` into another client's input ports and records its
    output ports, both stamped with JACK frame times; counts the server's xruns meanwhile."""

    def __init__(self, signal, name: str = "gk-test-loop"):
        import jack
        import numpy as np

        self.np = np
        self.signal = np.ascontiguousarray(signal, dtype=np.float32)
        channels = self.signal.shape[0]
        self.client = jack.Client(name, no_start_server=True)
        self.outs = [self.client.outports.register(f"play_{c}") for c in range(channels)]
        self.ins = [self.client.inports.register(f"rec_{c}") for c in range(channels)]
        self.period = self.client.blocksize
        self.xruns = 0
        self.xrun_frames: list[int] = []  # the server's frame time at each xrun
        self.play_from: int | None = None  # frame time of the signal's first sample
        self._play = False
        self._pos = 0
        self._rec: list[tuple[int, object]] = []
        self.client.set_process_callback(self._process)
        self.client.set_xrun_callback(self._xrun)
        self.client.activate()

    def _xrun(self, delay: float) -> None:
        self.xruns += 1
        self.xrun_frames.append(self.client.frame_time)

    def _process(self, frames: int) -> None:
        t = self.client.last_frame_time
        for p in self.outs:
            p.get_array().fill(0.0)
        if self._play and self._pos < self.signal.shape[1]:
            if self.play_from is None:
                self.play_from = t
            m = min(frames, self.signal.shape[1] - self._pos)
            for c, p in enumerate(self.outs):
                p.get_array()[:m] = self.signal[c, self._pos:self._pos + m]
            self._pos += m
        self._rec.append((t, self.np.stack([p.get_array().copy() for p in self.ins])))

    def wait_for_client(self, prefix: str = "PortAudio", timeout_s: float = 20.0,
                        channels: int = 1) -> tuple[list, list]:
        """The input and output ports of the client whose name starts with ``prefix``, once it has
        registered at least ``channels`` of each (a client registers its ports one by one: taken
        at the first, a loop-through would leave the others unconnected, and a channel silent)."""
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            ins = self.client.get_ports(f"{prefix}[^:]*:in_", is_input=True)
            outs = self.client.get_ports(f"{prefix}[^:]*:out_", is_output=True)
            if len(ins) >= channels and len(outs) >= channels:
                return ins, outs
            time.sleep(0.05)
        raise TimeoutError(f"no JACK client '{prefix}...' with {channels} input and output port(s) appeared "
                           f"in {timeout_s} s")

    def loop_through(self, prefix: str = "PortAudio") -> None:
        """Connect our outputs to the client's inputs and its outputs to our inputs (every channel)."""
        ins, outs = self.wait_for_client(prefix, channels=len(self.outs))
        for ours, theirs in zip(self.outs, ins):
            self.client.connect(ours, theirs)
        for theirs, ours in zip(outs, self.ins):
            self.client.connect(theirs, ours)

    def play(self) -> None:
        self._play = True

    @property
    def played_all(self) -> bool:
        return self._pos >= self.signal.shape[1]

    def recording(self):
        """(channels, frames) recorded from the first cycle on, and the signal's start in it."""
        np = self.np
        rec = list(self._rec)
        t0 = rec[0][0]
        out = np.zeros((self.signal.shape[0], rec[-1][0] - t0 + self.period), np.float32)
        for t, block in rec:
            out[:, t - t0:t - t0 + block.shape[1]] = block
        return out, (None if self.play_from is None else self.play_from - t0)

    def recorded_frames(self):
        """Per frame of recording(): True where exactly one cycle recorded it. A cycle this client
        missed (it ran late: a server xrun) leaves a hole; one it ran twice, catching up, carries
        the same frame time twice, and which buffers it read then is unknown."""
        np = self.np
        stamps = np.array([t for t, _ in self._rec], np.int64)
        t0 = int(stamps[0])
        seen = np.zeros(int(stamps[-1]) - t0 + self.period, np.int32)
        for t in stamps:
            seen[t - t0:t - t0 + self.period] += 1
        return seen == 1

    def close(self) -> None:
        self.client.deactivate()
        self.client.close()


class LoopProcess:
    """A LoopClient in a process of its own: ``start()`` it once the pipeline runs (it waits for the
    pipeline's ports, loops through and plays ``signal`` 0.2 s later); ``finish()`` after the
    pipeline ended returns what it recorded (a LoopRecording)."""

    def __init__(self, signal, workdir, env: dict[str, str], prefix: str = "PortAudio"):
        import numpy as np

        self.workdir, self.env, self.prefix = workdir, env, prefix
        self.signal_path = os.path.join(workdir, "loop_signal.npy")
        self.out_path = os.path.join(workdir, "loop_recording.npz")
        np.save(self.signal_path, np.ascontiguousarray(signal, dtype=np.float32))
        self.proc: subprocess.Popen | None = None

    def start(self, timeout_s: float = 60.0) -> None:
        self.proc = subprocess.Popen(
            [sys.executable, __file__, "loop", self.signal_path, self.out_path, self.prefix, str(timeout_s)],
            stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
            env={**os.environ, **self.env})

    def finish(self, timeout_s: float = 30.0) -> "LoopRecording":
        """Stop recording and return it (an AssertionError with the client's stderr if it failed)."""
        import numpy as np

        out, err = self.proc.communicate("stop\n", timeout=timeout_s)
        assert self.proc.returncode == 0, f"the loop-through client failed: {err}"
        with np.load(self.out_path) as f:
            return LoopRecording(rec=f["rec"], recorded=f["recorded"], start=int(f["start"]),
                                 period=int(f["period"]), played_all=bool(f["played_all"]),
                                 xruns=int(f["xruns"]))

    def kill(self) -> None:
        """Stop the client process by its PID if it still runs (a failed test)."""
        if self.proc is not None and self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait(10)


class LoopRecording:
    """What a LoopProcess recorded: ``rec`` (channels, frames) from its first cycle, ``recorded``
    (per frame: recorded exactly once), ``start`` (the signal's first frame), the server's
    ``period``, whether it ``played_all`` of the signal and the server ``xruns`` it was told of."""

    def __init__(self, *, rec, recorded, start: int, period: int, played_all: bool, xruns: int):
        self.rec, self.recorded, self.start = rec, recorded, start
        self.period, self.played_all, self.xruns = period, played_all, xruns


def _loop_main(signal_path: str, out_path: str, prefix: str, timeout_s: str) -> int:
    import numpy as np

    loop = LoopClient(np.load(signal_path))
    try:
        loop.wait_for_client(prefix, timeout_s=float(timeout_s), channels=len(loop.outs))
        loop.loop_through(prefix)
        time.sleep(0.2)
        loop.play()
        sys.stdin.readline()  # the test says "stop" once the pipeline ended
    finally:
        loop.close()
    rec, start = loop.recording()
    if start is None:
        print("the signal never started playing", file=sys.stderr)
        return 1
    np.savez(out_path, rec=rec, recorded=loop.recorded_frames(), start=start, period=loop.period,
             played_all=loop.played_all, xruns=loop.xruns)
    return 0


if __name__ == "__main__":
    if len(sys.argv) == 6 and sys.argv[1] == "loop":
        sys.exit(_loop_main(*sys.argv[2:]))
    sys.exit(f"usage: {sys.argv[0]} loop SIGNAL.npy OUT.npz CLIENT_PREFIX TIMEOUT_S")
