"""``gk-stream run --view`` through the command line: the bind and token rules (exit 2 before anything
listens), a taken port, ``--view-token auto``, a view sink without --view, and the view's drops in
--stats-json."""

import json
import os
import re
import socket
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

import pygpukit_dsp

from pygpukit_dsp.view.attach import is_loopback, parse_address

pytestmark = pytest.mark.usefixtures("aiohttp_installed")

TONE = textwrap.dedent("""\
    version: 1
    name: tone
    sample_rate: 48000
    block_size: 1024
    channels: 1
    backend: cpu
    source: {type: synth, signal: sine, freq_hz: 3000, amplitude: 0.5, duration_s: 0.5}
    sink: {type: view}
    """)


def run(tmp_path, *args, timeout=120):
    """``gk-stream run ARGS`` in a fresh interpreter in ``tmp_path`` (the package under test on its path)."""
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join([str(Path(pygpukit_dsp.__file__).resolve().parents[1]),
                                         *filter(None, [env.get("PYTHONPATH")])])
    return subprocess.run([sys.executable, "-m", "pygpukit_dsp.cli", "run", *map(str, args)], cwd=tmp_path,
                          capture_output=True, text=True, env=env, timeout=timeout)


@pytest.fixture
def tone(tmp_path):
    f = tmp_path / "tone.yaml"
    f.write_text(TONE)
    return f


def test_addresses_parse_and_loopback_is_recognised():
    assert parse_address("8751") == ("127.0.0.1", 8751)
    assert parse_address("0.0.0.0:80") == ("0.0.0.0", 80)
    assert parse_address("[::1]:9000") == ("::1", 9000)
    assert all(is_loopback(h) for h in ("127.0.0.1", "127.1.2.3", "::1", "localhost"))
    assert not any(is_loopback(h) for h in ("0.0.0.0", "::", "192.168.1.4", "example.org"))


def test_a_non_loopback_address_without_a_token_exits_2_before_the_run(tmp_path, tone):
    r = run(tmp_path, tone, "--view", "0.0.0.0:0")
    assert r.returncode == 2, r.stderr
    assert "--view 0.0.0.0:0" in r.stderr and "--view-token" in r.stderr
    assert "view: http" not in r.stderr and "Traceback" not in r.stderr
    assert "pipeline tone" not in r.stdout  # no block ran


def test_a_taken_port_exits_2_naming_the_address(tmp_path, tone):
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        s.listen()
        port = s.getsockname()[1]
        r = run(tmp_path, tone, "--view", f"127.0.0.1:{port}")
    assert r.returncode == 2
    assert f"127.0.0.1:{port}" in r.stderr and "cannot listen" in r.stderr
    assert "pipeline tone" not in r.stdout


def test_view_token_auto_prints_the_address_with_a_token_and_the_run_reports_view_drops(tmp_path, tone):
    stats = tmp_path / "stats.json"
    r = run(tmp_path, tone, "--view", "127.0.0.1:0", "--view-token", "auto", "--stats-json", stats)
    assert r.returncode == 0, r.stderr
    m = re.search(r"view: http://127\.0\.0\.1:(\d+)/\?token=([A-Za-z0-9_-]{16,})", r.stderr)
    assert m, r.stderr
    assert int(m.group(1)) > 0
    assert "view_dropped" in json.loads(stats.read_text())["sink_stats"]


def test_two_auto_tokens_differ(tmp_path, tone):
    tokens = [re.search(r"token=(\S+)", run(tmp_path, tone, "--view", "0", "--view-token", "auto").stderr).group(1)
              for _ in range(2)]
    assert tokens[0] != tokens[1]


def test_a_non_loopback_address_with_a_token_listens(tmp_path, tone):
    r = run(tmp_path, tone, "--view", "0.0.0.0:0", "--view-token", "abc123")
    assert r.returncode == 0, r.stderr
    assert re.search(r"view: http://0\.0\.0\.0:\d+/ \(with its token", r.stderr)
    assert "abc123" not in r.stderr  # a given token is not printed back


def test_a_view_sink_without_view_is_a_config_error_at_its_line(tmp_path, tone):
    r = run(tmp_path, tone)
    assert r.returncode == 2
    assert f"{tone}:8:" in r.stderr and "--view" in r.stderr


@pytest.mark.parametrize("args, flag", [(["--view-token", "x"], "--view-token"),
                                        (["--view", "nope"], "[HOST:]PORT"),
                                        (["--view", "70000"], "0..65535")])
def test_bad_view_flags_exit_2(tmp_path, tone, args, flag):
    r = run(tmp_path, tone, *args)
    assert r.returncode == 2 and flag in r.stderr, r.stderr


def test_view_with_cluster_exits_2(tmp_path, tone):
    r = run(tmp_path, tone, "--view", "--cluster", "ray")
    assert r.returncode == 2 and "--view applies to a local run" in r.stderr


def test_validating_a_file_with_a_view_sink_imports_no_web_server(tmp_path, tone):
    """The view sink's module stands alone (with its shared-memory ring): aiohttp and the server load only for --view."""
    out = tmp_path / "modules.json"
    code = ("import atexit, json, sys\n"
            f"atexit.register(lambda: open({str(out)!r}, 'w').write(json.dumps(sorted(sys.modules))))\n"
            "from pygpukit_dsp.cli import main\nsys.exit(main(sys.argv[1:]))\n")
    r = subprocess.run([sys.executable, "-c", code, "validate", str(tone)], cwd=tmp_path, capture_output=True,
                       text=True, timeout=120)
    assert r.returncode == 0, r.stderr
    modules = set(json.loads(out.read_text()))
    assert "pygpukit_dsp.io.view_sink" in modules
    assert not [m for m in modules if m.split(".")[0] == "aiohttp" or m.startswith("pygpukit_dsp.view")]


def test_view_alone_takes_the_default_address():
    from pygpukit_dsp.cli import build_parser

    parse = build_parser().parse_args
    assert parse(["run", "f.yaml", "--view"]).view == "127.0.0.1:8750"
    assert parse(["run", "f.yaml", "--view", "0.0.0.0:9000"]).view == "0.0.0.0:9000"
    assert parse(["run", "f.yaml"]).view is None
