"""The machine's calibration (pygpukit_dsp/admission/calibration.py, calibrate.py): cached per GPU
and driver in the user cache folder, read back, measured on first need, redone on request. Without
a GPU the identity and the measurement are injected; on the fake driver, gk-stream devices
--calibrate is tested in tests/backends/test_cuda_admission.py; on a real GPU, below (gpu)."""

from dataclasses import replace

import pytest

from pygpukit_dsp.admission import calibrate, calibration
from pygpukit_dsp.admission.calibration import REFERENCE, GpuIdentity

H200 = GpuIdentity(0, "NVIDIA H200", "0000:1b:00.0", "580.159.04")


@pytest.fixture
def cache(tmp_path, monkeypatch):
    monkeypatch.setenv("GK_CACHE_DIR", str(tmp_path))
    monkeypatch.setattr(calibrate, "_MEMO", {})
    return tmp_path / "calibration"


def _measured(identity, dispatch_ns=11_000):
    return replace(REFERENCE, gpu_index=identity.index, gpu_name=identity.name, pci_bus_id=identity.pci_bus_id,
                   driver=identity.driver, dispatch_ns=dispatch_ns, measured_at="2026-12-01T00:00:00+00:00")


def test_the_cache_folder_is_the_kernel_cache_s_root(monkeypatch, tmp_path):
    monkeypatch.setenv("GK_CACHE_DIR", str(tmp_path / "kernels"))
    assert calibration.cache_dir() == tmp_path / "kernels" / "calibration"
    monkeypatch.delenv("GK_CACHE_DIR")
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))
    assert calibration.cache_dir() == tmp_path / "xdg" / "pygpukit-dsp" / "calibration"
    monkeypatch.delenv("XDG_CACHE_HOME")
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    assert calibration.cache_dir() == tmp_path / "home" / ".cache" / "pygpukit-dsp" / "calibration"


def test_a_calibration_is_written_and_read_back_under_its_gpu_and_driver(cache):
    saved = calibration.save(_measured(H200))
    assert saved.path == str(cache / H200.file_name) and (cache / H200.file_name).exists()
    assert "NVIDIA-H200" in H200.file_name and "driver-580.159.04" in H200.file_name
    assert calibration.load(H200) == saved
    # another driver, another GPU of the model (another bus id): none cached for them
    assert calibration.load(replace(H200, driver="590.10")) is None
    assert calibration.load(replace(H200, pci_bus_id="0000:2a:00.0")) is None
    # the same GPU under another index (CUDA_VISIBLE_DEVICES): its figures, its index now
    moved = calibration.load(replace(H200, index=1))
    assert moved is not None and moved.gpu_index == 1 and moved.dispatch_ns == saved.dispatch_ns
    # a file under the GPU's name that holds another GPU's figures is not read
    (cache / H200.file_name).write_text((cache / H200.file_name).read_text().replace("H200", "H100"))
    assert calibration.load(H200) is None
    (cache / H200.file_name).write_text("{not json")
    assert calibration.load(H200) is None


def test_it_is_measured_on_first_need_then_cached_and_redone_on_request(cache, monkeypatch):
    made = []

    def measure(identity, policy):
        made.append(identity)
        return _measured(identity, dispatch_ns=10_000 + len(made))

    monkeypatch.setattr(calibrate, "gpu_identity", lambda gpu, caps=None: replace(H200, index=gpu))
    monkeypatch.setattr(calibrate, "measure", measure)
    assert calibrate.cached(0) is None
    first = calibrate.calibration_for(0)
    assert made == [H200] and first.dispatch_ns == 10_001 and first.path == str(cache / H200.file_name)
    assert calibrate.calibration_for(0) == first and len(made) == 1  # this process's
    monkeypatch.setattr(calibrate, "_MEMO", {})
    assert calibrate.calibration_for(0) == first and len(made) == 1  # the next process's: the cache
    again = calibrate.calibration_for(0, remeasure=True)
    assert len(made) == 2 and again.dispatch_ns == 10_002 and calibration.load(H200).dispatch_ns == 10_002
    report = calibrate.admission_report([0])
    assert report["calibration"] == {"0": again.to_dict()} and report["policy"]["u_max"] == 0.9
    assert calibrate.admission_report([])["calibration"] is None


def test_a_cache_that_cannot_be_written_keeps_the_measurement_for_the_process(cache, monkeypatch, tmp_path):
    blocker = tmp_path / "file"
    blocker.write_text("")
    monkeypatch.setenv("GK_CACHE_DIR", str(blocker))  # a file where the folder would be
    monkeypatch.setattr(calibrate, "gpu_identity", lambda gpu, caps=None: H200)
    monkeypatch.setattr(calibrate, "measure", lambda identity, policy: _measured(identity))
    cal = calibrate.calibration_for(0)
    assert cal.path is None and cal.dispatch_ns == 11_000 and calibrate.calibration_for(0) is cal


def test_a_gpu_the_driver_does_not_list_cannot_be_calibrated():
    from pygpukit_dsp.errors import DeviceError

    caps = {"gpus": [], "gpus_reason": "CUDA driver not detected", "driver": {"version": ""}}
    with pytest.raises(DeviceError, match="no GPU 0 to calibrate admission on: CUDA driver not detected"):
        calibration.gpu_identity(0, caps)
    caps = {"gpus": [{"index": 0, "name": "NVIDIA H200", "pci_bus_id": "0000:1b:00.0"}],
            "driver": {"version": "580.159.04"}}
    assert calibration.gpu_identity(0, caps) == H200


def test_gk_stream_devices_shows_the_policy_and_calibrate_needs_a_gpu(tmp_path):
    import json

    from pygpukit_dsp.admission import DEFAULT_POLICY
    from tests.test_cli import NO_DRIVER, gk

    env = {**NO_DRIVER, "GK_CACHE_DIR": str(tmp_path)}
    r = gk("devices", "--json", env=env)
    assert r.returncode == 0, r.stderr
    admission = json.loads(r.stdout)["admission"]
    assert admission == {"policy": DEFAULT_POLICY.to_dict(), "calibration": None}  # no GPU, no calibration
    r = gk("devices", env=env)
    assert r.returncode == 0 and "admission policy: u_max 0.9, dispatcher's lock busy at most 85%" in r.stdout
    r = gk("devices", "--calibrate", env=env)
    assert r.returncode == 1 and "no usable GPU to calibrate admission on" in r.stderr and "Traceback" not in r.stderr
    assert not (tmp_path / "calibration").exists()


# ----------------------------------------------------------------------------- on the GPU


@pytest.mark.gpu
def test_gpu_calibration_measures_the_dispatcher_the_hold_and_the_overlap_and_caches_them(cache):
    cal = calibrate.calibration_for(0, remeasure=True)
    # the dispatcher's work per block: some us of host time; its longest hold at least a step's
    assert 1_000 < cal.dispatch_ns < 200_000 and cal.hold_ns >= cal.dispatch_ns
    assert 1.0 <= cal.overlap < cal.streams and cal.blocks > cal.streams
    assert calibration.load(cal.identity) == cal and cal.path.startswith(str(cache))
    print(cal.describe())


@pytest.mark.gpu
def test_gpu_a_session_measures_its_gpu_s_calibration_on_first_need(cache):
    from pygpukit_dsp import Pipeline, Session, stages
    from pygpukit_dsp.io import NullSink, NullSource

    def w1(name):
        import numpy as np

        rng = np.random.default_rng(1)
        return Pipeline([stages.Fir(taps=rng.standard_normal(256) / 16),
                         stages.Mix(matrix=rng.standard_normal((16, 64)))],
                        name=name, sample_rate=48_000, channels=64, block_size=256, backend="cuda",
                        qos={"class": "realtime"}, source=NullSource(duration_s=0.1), sink=NullSink())

    assert calibrate.cached(0) is None
    s = Session([w1("a"), w1("b")])
    s.run()
    cal = calibrate.cached(0)
    assert cal is not None and cal.path is not None  # measured to judge whether they are crowded, and kept


@pytest.mark.gpu
@pytest.mark.slow
def test_gpu_w1_admitted_with_this_gpu_s_calibration_against_the_reference_figures(cache, monkeypatch):
    """Before and after in one run: the most W1 streams (5.33 ms, staggered as a Session paces its
    own clocks) admission admits with this GPU's calibration, and with the reference figures (the
    constants admission used before the calibration: 12 us, 0.8 ms), each N judged both ways on
    the same rehearsal. On the H200s the reference figures admitted 0.96-1.0x of what held over
    30 s at 5.33 ms (docs/benchmarks.md, "Capacity"); the calibration should land within 10% of
    them. The figures are printed for the capacity bench's comparison with what holds."""
    from types import SimpleNamespace

    import numpy as np

    from pygpukit_dsp import Pipeline, stages
    from pygpukit_dsp.admission import admit, admitting
    from pygpukit_dsp.backends import choose_backend
    from pygpukit_dsp.backends.cuda_engine import CudaEngine
    from pygpukit_dsp.errors import AdmissionError
    from pygpukit_dsp.io import NullSink, NullSource
    from pygpukit_dsp.io._common import Pacer

    rng = np.random.default_rng(1)
    p = Pipeline([stages.Fir(taps=rng.standard_normal(256) / 16), stages.Mix(matrix=rng.standard_normal((16, 64)))],
                 name="w1", sample_rate=48_000, channels=64, block_size=256, backend="cuda",
                 qos={"class": "realtime"}, source=NullSource(duration_s=0.1), sink=NullSink())
    chain = p.specs()
    choice = choose_backend(p, chain, "cuda")
    n_max = 448
    engines = [CudaEngine(p, chain, choice) for _ in range(n_max)]
    machine = calibrate.calibration_for(0, remeasure=True)
    runs = {}
    real = admitting.rehearse

    def rehearse_once(engs, *a, **kw):  # one rehearsal per N, judged with both calibrations
        if len(engs) not in runs:
            runs[len(engs)] = real(engs, *a, **kw)
        return runs[len(engs)]

    monkeypatch.setattr(admitting, "rehearse", rehearse_once)

    def admits(n, cal):
        runners = [SimpleNamespace(pipeline=SimpleNamespace(name=f"w{i}", qos=p.qos, stages=p.stages, where=None),
                                   chain=chain, engine=e, source=SimpleNamespace(_pacer=Pacer(48_000.0)))
                   for i, e in enumerate(engines[:n])]
        try:
            admit(runners, calibration=lambda gpu: cal)
        except AdmissionError:
            return False
        return True

    def largest(cal):
        lo, hi = 1, n_max  # admits(lo); the largest admitted is below hi + 1
        if admits(hi, cal):
            return hi
        while hi - lo > 1:
            mid = (lo + hi) // 2
            lo, hi = (mid, hi) if admits(mid, cal) else (lo, mid)
        return lo

    try:
        after, before = largest(machine), largest(REFERENCE)
    finally:
        for e in engines:
            e.close()
    print(f"W1 at 5.33 ms admitted: {after} with this GPU's calibration ({machine.describe()}), "
          f"{before} with the reference figures ({REFERENCE.describe()})")
    assert 0.9 * before <= after <= 1.1 * before
