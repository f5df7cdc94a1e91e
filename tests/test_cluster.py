"""Placement on Ray actors: ``gk-stream run FILE --cluster ray``.

The logic (links, start order, resources, the endpoint resolver, the missing extra) is tested
without Ray. The end-to-end tests (marked ``cluster``) each start a local Ray instance in a
`gk-stream run --cluster ray` subprocess: its own short temporary folder (RAY_TMPDIR), a bounded
timeout, and afterwards every process whose command line names that folder is stopped by its PID,
so nothing of that instance outlives the test. Ray is in the test extra (about 10 s a test on the
2-core build machine); without it these skip with the reason, except with CI=true, where they fail.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
import pytest
import soundfile as sf

from pygpukit_dsp import Pipeline, Session, cluster
from pygpukit_dsp.errors import ConfigError
from pygpukit_dsp.io import endpoints
from pygpukit_dsp.runner import RunSummary
from pygpukit_dsp.spec import load_text

ROOT = Path(__file__).resolve().parents[1]
RAY_TIMEOUT = 300  # seconds for the whole --cluster run (Ray's start on a loaded 2-core machine included)
CI = os.environ.get("CI", "").lower() in ("1", "true", "yes")


def need_ray() -> None:
    if CI:
        import ray  # noqa: F401  CI installs the test extra: a missing ray fails here instead of skipping
    else:
        pytest.importorskip("ray", reason="ray is in the test extra (and the 'cluster' extra): pip install '.[test]'")

pytest.importorskip("zmq", reason="pyzmq is in the test extra: pip install '.[test]'")

TWO = """\
version: 1
backend: cpu
pipelines:
  - name: {a}
    sample_rate: 8000
    channels: 1
    source: {{type: synth, signal: noise, seed: 1, duration_s: 0.1}}
    sink: {{type: zmq, endpoint: "cluster://{link}", bind: true}}
  - name: {b}
    sample_rate: 8000
    source: {{type: zmq, endpoint: "cluster://{link2}"}}
    sink: {{type: "null"}}
"""


def _load(a="tx", b="rx", link="iq", link2="iq"):
    return [Pipeline.from_config(c) for c in load_text(TWO.format(a=a, b=b, link=link, link2=link2), "c.yaml")]


# ---------------------------------------------------------------- without Ray


def test_links_and_start_order():
    ps = _load()
    links = cluster.plan_links(ps)
    assert list(links) == ["iq"] and links["iq"].binder == "tx" and links["iq"].connectors == ["rx"]
    assert cluster.pipeline_links(ps[0]) == (["iq"], []) and cluster.pipeline_links(ps[1]) == ([], ["iq"])
    assert cluster.start_order(ps, links) == [["tx"], ["rx"]]  # the binder first, then who connects to it
    # the file order does not matter
    assert cluster.start_order(list(reversed(ps)), links) == [["tx"], ["rx"]]


def test_a_link_nobody_binds_or_two_bind_is_a_config_error():
    ps = _load(link="iq", link2="other")
    with pytest.raises(ConfigError, match="cluster link 'other' is connected to by 'rx' but no pipeline .* binds"):
        cluster.plan_links(ps)
    a, b = _load(), _load(a="tx2", b="rx2")
    with pytest.raises(ConfigError, match="bound by two pipelines, 'tx' and 'tx2'"):
        cluster.plan_links([a[0], b[0]])


def test_a_cycle_of_links_cannot_start():
    text = """\
version: 1
pipelines:
  - name: p
    sample_rate: 8000
    source: {type: zmq, endpoint: "cluster://b"}
    sink: {type: zmq, endpoint: "cluster://a", bind: true}
  - name: q
    sample_rate: 8000
    source: {type: zmq, endpoint: "cluster://a"}
    sink: {type: zmq, endpoint: "cluster://b", bind: true}
"""
    ps = [Pipeline.from_config(c) for c in load_text(text, "c.yaml")]
    with pytest.raises(ConfigError, match="in a cycle"):
        cluster.start_order(ps, cluster.plan_links(ps))


def test_resources_follow_the_backend():
    assert cluster.resources_for("cpu", 4, 0.5) == (0.5, 0, "backend cpu: no GPU")
    assert cluster.resources_for("cuda", 2, 1)[:2] == (1, 1)
    assert cluster.resources_for("auto", 1, 0.5)[:2] == (0.5, 1)
    assert cluster.resources_for("auto", 0, 0.5) == (0.5, 0, "backend auto and the cluster has no GPU: CPU only")
    with pytest.raises(ConfigError, match="backend cuda needs a GPU, and the Ray cluster has none"):
        cluster.resources_for("cuda", 0, 0.5)


def test_the_resolver_binds_on_the_node_and_connects_where_told():
    r = cluster.ClusterResolver("10.1.2.3", {"iq": "tcp://10.1.2.3:41000"})
    assert r("cluster://iq", True) == "tcp://10.1.2.3:*"
    assert r("cluster://iq", False) == "tcp://10.1.2.3:41000"
    assert cluster.ClusterResolver("fd00::5")("cluster://x", True) == "tcp://[fd00::5]:*"
    with pytest.raises(ValueError, match="no address for cluster link 'spectrum'"):
        r("cluster://spectrum", False)
    # what a zmq component does with it when it opens: check + resolve through the hook
    endpoints.register_scheme("cluster", r)
    try:
        assert endpoints.resolve("cluster://iq", bind=False, base_dir=ROOT) == "tcp://10.1.2.3:41000"
    finally:
        endpoints.register_scheme("cluster", endpoints.local_cluster_resolver)


def test_in_one_process_a_link_is_an_ipc_socket():
    a = endpoints.resolve("cluster://iq", bind=True, base_dir=ROOT)
    assert a.startswith("ipc:///") and a.endswith("/iq.ipc")
    assert endpoints.resolve("cluster://iq", bind=False, base_dir=ROOT) == a
    for bad in ("cluster://", "cluster://a/b", "cluster://-x"):
        with pytest.raises(ValueError, match="a cluster link is named"):
            endpoints.check(bad, bind=True)


def test_one_process_runs_the_linked_pipelines():
    tx, rx = Session(_load()).run()
    assert tx.samples_in == rx.samples_in == 800 and rx.ended_by == "source end"


def test_a_summary_survives_the_trip_as_a_dict():
    s = Session(_load()).run()[1]
    back = cluster.summary_from_dict(json.loads(json.dumps(s.to_dict(), default=str)))
    assert isinstance(back, RunSummary) and back.format() == s.format()
    assert back.scheduler == s.scheduler


def test_missing_ray_is_a_config_error_naming_the_extra(monkeypatch, tmp_path, capsys):
    monkeypatch.setitem(sys.modules, "ray", None)  # import ray raises ImportError
    with pytest.raises(ConfigError) as info:
        cluster.run_cluster(ROOT / "pipelines" / "cluster.yaml", "ray")
    assert "--cluster ray needs the ray package, which is not installed" in str(info.value)
    assert "pip install 'pygpukit-dsp[cluster]'" in str(info.value)
    from pygpukit_dsp.cli import main

    assert main(["run", str(ROOT / "pipelines" / "cluster.yaml"), "--cluster", "ray", "--quiet"]) == 2
    assert "pygpukit-dsp[cluster]" in capsys.readouterr().err


def test_cluster_cpus_needs_cluster(capsys):
    from pygpukit_dsp.cli import main

    assert main(["run", str(ROOT / "pipelines" / "cluster.yaml"), "--cluster-cpus", "1"]) == 2
    assert "--cluster-cpus applies to a run with --cluster" in capsys.readouterr().err


# ---------------------------------------------------------------- with a local Ray instance


def _stop_instance(folder: str) -> list[int]:
    """Stop (by PID) every process whose command line names ``folder``: this test's Ray instance."""
    mine = []
    for d in Path("/proc").iterdir():
        if not d.name.isdigit() or int(d.name) == os.getpid():
            continue
        try:
            cmd = (d / "cmdline").read_bytes().decode(errors="replace")
        except OSError:
            continue
        if folder in cmd:
            mine.append(int(d.name))
    for pid in mine:
        try:
            os.kill(pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
    return mine


@pytest.mark.cluster
@pytest.mark.slow
def test_two_pipelines_on_ray_actors_equal_the_single_process_run(tmp_path):
    need_ray()
    work = tmp_path / "pipelines"
    shutil.copytree(ROOT / "pipelines", work, ignore=shutil.ignore_patterns("out"))
    # The reader sends its 18 blocks at once and then waits for the filter to take them, 60 s at
    # most by default (end_timeout_s); on a loaded 2-core machine the filter's actor can take longer
    # than that to start, so the copy waits as long as the whole run may take.
    yml = work / "cluster.yaml"
    text = yml.read_text()
    assert 'bind: true}' in text
    yml.write_text(text.replace('bind: true}', f'bind: true, end_timeout_s: {RAY_TIMEOUT}}}', 1))
    ray_dir = tempfile.mkdtemp(prefix="gkray", dir="/tmp")  # short: Ray's socket paths must fit 107 bytes
    env = {**os.environ, "RAY_TMPDIR": ray_dir, "GK_LIBCUDA": "/nonexistent/libcuda.so.1"}
    started = time.monotonic()
    proc = subprocess.Popen([sys.executable, "-m", "pygpukit_dsp.cli", "run", str(yml),
                             "--cluster", "ray", "--backend", "cpu", "--stats-json", str(tmp_path / "s.json")],
                            cwd=tmp_path, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        out, err = proc.communicate(timeout=RAY_TIMEOUT)
    except subprocess.TimeoutExpired:
        proc.kill()
        out, err = proc.communicate()
        pytest.fail(f"--cluster ray ran over {RAY_TIMEOUT} s:\n{out}\n{err}")
    finally:
        leftover = _stop_instance(ray_dir)
        shutil.rmtree(ray_dir, ignore_errors=True)
    took = time.monotonic() - started
    print(f"--cluster ray run: {took:.1f} s; Ray processes left over and stopped: {leftover}")
    assert proc.returncode == 0, f"{out}\n{err}"
    assert "Traceback" not in err
    assert "cluster: ray (local instance)" in out
    assert out.count("  ray node ") == 2 and "asked num_cpus=0.5, num_gpus=0: backend cpu: no GPU" in out
    stats = json.loads((tmp_path / "s.json").read_text())
    assert [s["pipeline"] for s in stats] == ["reader", "filter"]
    assert all(s["ended_by"] == "source end" and s["cluster"]["node_ip"] for s in stats)

    y, fs = sf.read(work / "out" / "chirp_filtered_cluster.wav", dtype="float32")
    # the same file in one process (the link is an ipc socket there), and file_filter.yaml unsplit
    (work / "out" / "chirp_filtered_cluster.wav").rename(work / "out" / "on_ray.wav")
    Session(Pipeline.load_all(work / "cluster.yaml"), backend="cpu").run()
    local, _ = sf.read(work / "out" / "chirp_filtered_cluster.wav", dtype="float32")
    np.testing.assert_array_equal(y, local)
    Session(Pipeline.load_all(work / "file_filter.yaml"), backend="cpu").run()
    whole, _ = sf.read(work / "out" / "chirp_filtered.wav", dtype="float32")
    np.testing.assert_array_equal(y, whole)
    # and Pipeline.process of the same input, within the WAV's own resolution
    x, fs_in = sf.read(work / "data" / "chirp_hum.wav", dtype="float32", always_2d=True)
    p = Pipeline.load_all(work / "cluster.yaml")[1]
    ref = p.process(x.T.copy(), backend="cpu")
    assert fs == fs_in and y.shape[0] == ref.shape[-1]
    info = sf.info(work / "out" / "on_ray.wav")
    tol = 0 if info.subtype in ("FLOAT", "DOUBLE") else 2.0 ** -15
    np.testing.assert_allclose(y, ref[0], atol=tol + 1e-6)


LONG = TWO.replace("duration_s: 0.1}", "duration_s: 60, rate: realtime}")


def _gk_cluster(tmp_path, yaml_text, *extra):
    """Start `gk-stream run FILE --cluster ray` on a local Ray instance in its own folder."""
    need_ray()
    (tmp_path / "c.yaml").write_text(yaml_text)
    ray_dir = tempfile.mkdtemp(prefix="gkray", dir="/tmp")
    env = {**os.environ, "RAY_TMPDIR": ray_dir, "GK_LIBCUDA": "/nonexistent/libcuda.so.1"}
    with open(tmp_path / "err.txt", "w") as err:  # a file: the test reads it while the run goes on
        proc = subprocess.Popen([sys.executable, "-m", "pygpukit_dsp.cli", "run", str(tmp_path / "c.yaml"),
                                 "--cluster", "ray", *extra], cwd=tmp_path, env=env, stdout=subprocess.PIPE,
                                stderr=err, text=True)
    return proc, ray_dir


def _finish(proc, ray_dir, timeout=RAY_TIMEOUT):
    try:
        out, _ = proc.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        proc.kill()
        out, _ = proc.communicate()
        pytest.fail(f"--cluster ray ran over {timeout} s:\n{out}")
    finally:
        leftover = _stop_instance(ray_dir)
        shutil.rmtree(ray_dir, ignore_errors=True)
    assert leftover == [], "the run left processes of its Ray instance behind"
    return out


@pytest.mark.cluster
@pytest.mark.slow
def test_a_fault_in_one_actor_is_exit_1_naming_the_pipeline_and_node(tmp_path):
    text = TWO.format(a="tx", b="rx", link="iq", link2="iq")
    i = text.rindex("channels: 1")
    proc, ray_dir = _gk_cluster(tmp_path, text[:i] + "channels: 2" + text[i + len("channels: 1"):], "--quiet")
    out = _finish(proc, ray_dir)
    err = (tmp_path / "err.txt").read_text()
    assert proc.returncode == 1, f"{out}\n{err}"
    # the sender sends 2 channels, the receiver declares 1: its run fails, and the driver says where
    assert "gk-stream: error: pipeline 'rx' (ray node " in err and "channels 2 != 1" in err
    assert "Traceback" not in err and "ended by fault" in out


@pytest.mark.cluster
@pytest.mark.slow
def test_sigint_on_the_driver_drains_every_actor(tmp_path):
    proc, ray_dir = _gk_cluster(tmp_path, LONG.format(a="tx", b="rx", link="iq", link2="iq"))
    try:
        deadline = time.monotonic() + RAY_TIMEOUT
        while "[rx] on" not in (tmp_path / "err.txt").read_text() and time.monotonic() < deadline \
                and proc.poll() is None:
            time.sleep(0.2)
        assert "[rx] on" in (tmp_path / "err.txt").read_text()
        time.sleep(1.0)
        proc.send_signal(signal.SIGINT)
    except BaseException:
        proc.kill()
        _finish(proc, ray_dir, timeout=60)
        raise
    out = _finish(proc, ray_dir, timeout=120)
    err = (tmp_path / "err.txt").read_text()
    assert proc.returncode == 130, f"{out}\n{err}"
    assert out.count("ended by SIGINT") == 2 and "Traceback" not in err
