"""Fixtures for the source and sink tests: the fake sounddevice (fault injection) and a JACK server."""

import importlib.util
import os
import sys
from pathlib import Path

import pytest


def _load(name: str):
    # tests/io is no package (it would shadow the standard library's io): load helpers by path
    spec = importlib.util.spec_from_file_location(f"_gk_tests_{name}", Path(__file__).with_name(f"{name}.py"))
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    return module


fake_sounddevice = _load("fake_sounddevice")
loop_check_module = _load("loop_check")


@pytest.fixture
def fake(monkeypatch):
    """install(**config) -> a fake sounddevice module in sys.modules (see fake_sounddevice.py)."""
    def install(**config):
        sd = fake_sounddevice.make_fake(**config)
        monkeypatch.setitem(sys.modules, "sounddevice", sd)
        return sd
    return install


@pytest.fixture
def device_input():
    """device_input(channel, start, frames): what the fake device's input channel carries."""
    return fake_sounddevice.device_input


jack_server = _load("jack_server")


def _no_jack(reason: str) -> None:
    """Outside CI a missing JACK server skips the live tests; in CI (CI=true) it is a failure."""
    if os.environ.get("CI", "").lower() in ("1", "true", "yes"):
        pytest.fail(f"CI=true but {reason}: .ci/run installs jackd2 and libportaudio2 and starts jackd")
    pytest.skip(f"{reason}; the live tests need a JACK server (apt-get install jackd2 libportaudio2)")


@pytest.fixture(scope="session")
def jack():
    """A running JACK server (the one CI started, else one started here and stopped by PID at the
    end, also when a test fails). Sets JACK_DEFAULT_SERVER for this process and its children and
    makes sounddevice see it."""
    try:
        import jack as _jack_client  # noqa: F401  (the JACK-Client package)
        import sounddevice  # noqa: F401
    except (ImportError, OSError) as exc:
        _no_jack(f"the live tests' Python packages are missing ({exc}; pip install '.[test]')")
    name = os.environ.get("JACK_DEFAULT_SERVER")
    if jack_server.server_running(name):
        server = jack_server.JackServer(name, None)
    elif jack_server.jackd_path() is None:
        _no_jack("jackd is not installed and no JACK server is running")
    else:
        server = jack_server.JackServer.start("gk-test")  # one name: JACK has 8 registry slots
    old = os.environ.get("JACK_DEFAULT_SERVER")
    os.environ.update(server.env)
    # PortAudio stays closed in this process while the live tests run gk-stream as a subprocess:
    # an initialised PortAudio holds an idle JACK client here, and where the server cannot run
    # realtime (the GPU machine's container) the server counts an xrun each time another client
    # joins or leaves while that one is notified. `portaudio` opens it for a test that needs it.
    _terminate_audio()
    try:
        yield server
    finally:
        server.stop()
        if old is None:
            os.environ.pop("JACK_DEFAULT_SERVER", None)
        else:
            os.environ["JACK_DEFAULT_SERVER"] = old
        _initialize_audio()


@pytest.fixture
def portaudio(jack):
    """PortAudio initialised in this process (it then sees the `jack` server), closed afterwards
    while that server still runs: libjack aborts the process when Pa_Terminate closes a client
    whose server has gone."""
    _initialize_audio()
    try:
        yield
    finally:
        _terminate_audio()


def _terminate_audio() -> None:
    import sounddevice as sd

    while getattr(sd, "_initialized", 0) > 0:
        sd._terminate()


def _initialize_audio() -> None:
    import sounddevice as sd

    if getattr(sd, "_initialized", 1) == 0:
        sd._initialize()


# A period for a loaded machine: 21.3 ms at 48 kHz. Beside two busy cores of a 2-core VM a realtime
# thread here woke up to 5.8 ms late and the default period, 256 frames, is 5.3 ms.
LOADED_PERIOD = 1024


@pytest.fixture(scope="session")
def jack_1024(jack):
    """A JACK server of its own (dummy backend, 48 kHz, LOADED_PERIOD frames), for the tests whose
    recording must hold on a loaded machine; stopped by its PID at the end. Only child processes
    talk to it (this process's JACK clients talk to the `jack` server)."""
    if jack_server.jackd_path() is None:
        _no_jack("jackd is not installed (the loaded-machine tests start a server of their own)")
    server = jack_server.JackServer.start("gk-test-1024", period=LOADED_PERIOD)
    try:
        yield server
    finally:
        server.stop()


@pytest.fixture(scope="session")
def jack_helpers():
    """The jack_server helper module (JackServer, LoopClient, LoopProcess)."""
    return jack_server


@pytest.fixture(scope="session")
def loop_check():
    """The loop_check helper module: a loop-through recording against process(), span by span."""
    return loop_check_module
