"""Sink paths that cannot be written are refused before the first block, in one phrasing for every
file sink (a ConfigError at the sink's FILE:LINE:COL, exit 2); a file under its own name is valid,
also after a full disk, and a run that wrote nothing leaves no file."""

from __future__ import annotations

import hashlib
import json
import os
import re
import signal
import subprocess
import time
from pathlib import Path

import numpy as np
import pytest
import soundfile as sf

from pygpukit_dsp import Pipeline
from pygpukit_dsp.errors import ConfigError, StreamFault
from pygpukit_dsp.io.arrays import NumpySink
from pygpukit_dsp.io.audiofile import AudioFileSink
from pygpukit_dsp.io.base import Sink, StreamFormat
from pygpukit_dsp.io.rawiq import RawIqSink
from pygpukit_dsp.io.synth import SynthSource
from pygpukit_dsp.signal import SignalSpec

BS = 1024
PIPE = """version: 1
name: p
sample_rate: 48000
block_size: 1024
channels: 1
dtype: {dtype}
backend: cpu
source: {source}
stages: [{{type: gain, db: 0}}]
sink: {sink}
"""
SYNTH = "{type: synth, signal: noise, amplitude: 0.2, seed: 5, duration_s: 3}"
# the sinks that write files, each with a path under FOLDER and the dtype it takes
FILE_SINKS = {
    "file": ("{{type: file, path: {folder}/x.wav}}", "float32"),
    "rawiq": ("{{type: rawiq, path: {folder}/x.iq}}", "complex64"),
    "sigmf": ("{{type: sigmf, path: {folder}/x}}", "float32"),
    "numpy": ("{{type: numpy, path: {folder}/x.npy}}", "float32"),
}


def _yaml(tmp_path: Path, sink: str, *, dtype: str = "float32", source: str = SYNTH) -> Path:
    path = tmp_path / "p.yaml"
    path.write_text(PIPE.format(dtype=dtype, source=source, sink=sink))
    return path


def _sink_where(yaml: Path) -> str:
    """FILE:LINE:COL of the sink's mapping, as the loader reports it."""
    for i, line in enumerate(yaml.read_text().splitlines(), 1):
        if line.startswith("sink:"):
            return f"{yaml}:{i}:{line.index('{') + 1}"
    raise AssertionError("no sink line")


def _refused(r, yaml: Path) -> str:
    """A sink path refused before the first block: exit 2, at the sink, no traceback, no summary."""
    err = r.stderr_text
    assert r.returncode == 2, err
    assert "Traceback" not in err and "blocks " not in r.stdout_text  # no run, no summary
    where = _sink_where(yaml)
    assert f"error: {where}: " in err, err
    return err.split(f"error: {where}: ", 1)[1].strip()


def _mount_tmpfs(mnt: Path, size: str) -> None:
    mnt.mkdir()
    r = subprocess.run(["mount", "-t", "tmpfs", "-o", f"size={size}", "tmpfs", str(mnt)], capture_output=True,
                       text=True)
    if r.returncode != 0:
        if os.environ.get("CI", "").lower() in ("1", "true", "yes"):
            pytest.fail(f"CI=true but mounting a tmpfs failed: {r.stderr.strip()}")
        pytest.skip(f"cannot mount a tmpfs here (needs root): {r.stderr.strip()}")


@pytest.fixture
def read_only(tmp_path):
    """A read-only file system (a tmpfs remounted ro): as root chmod does not stop writes."""
    if os.geteuid() != 0:
        pytest.skip("mounting a read-only file system needs root")
    mnt = tmp_path / "ro"
    _mount_tmpfs(mnt, "64k")
    try:
        (mnt / "out").mkdir()
        subprocess.run(["mount", "-o", "remount,ro", str(mnt)], check=True)
        yield mnt
    finally:
        subprocess.run(["umount", str(mnt)], check=True)


@pytest.fixture
def small_disk(tmp_path):
    """A 64 KiB tmpfs: a disk that fills up within the first second of audio."""
    if os.geteuid() != 0:
        pytest.skip("mounting a tmpfs needs root")
    mnt = tmp_path / "small"
    _mount_tmpfs(mnt, "64k")
    try:
        yield mnt
    finally:
        subprocess.run(["umount", str(mnt)], check=True)


def _immutable(path: Path) -> None:
    r = subprocess.run(["chattr", "+i", str(path)], capture_output=True, text=True)
    if r.returncode != 0:
        pytest.skip(f"cannot make {path} immutable here (chattr: {r.stderr.strip()})")


def _mutable(path: Path) -> None:
    subprocess.run(["chattr", "-i", str(path)], capture_output=True)


def _digest(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


# ------------------------------------------------------------------ refused before the first block

@pytest.mark.parametrize("kind", sorted(FILE_SINKS))
def test_a_read_only_folder_is_refused_at_the_sink_in_one_phrasing(tmp_path, gk_process, read_only, kind):
    sink, dtype = FILE_SINKS[kind]
    texts = {}
    for folder in (read_only / "out", read_only / "out" / "new" / "deeper"):  # the folder, a folder to create
        yaml = _yaml(tmp_path, sink.format(folder=folder), dtype=dtype)
        text = _refused(gk_process.run("run", yaml), yaml)
        texts[folder] = text
        assert sorted(os.listdir(read_only / "out")) == []
    prefix = f"{kind} sink '"
    for folder, text in texts.items():
        assert text.startswith(prefix)
        what = text.split("': ", 1)[1]
        # every sink type and both cases: the same words, naming the read-only folder
        assert what == f"cannot write to {read_only / 'out'}: the folder is read-only (choose a writable folder)"


def test_validate_checks_the_sink_paths_as_a_run_does_and_creates_nothing(tmp_path, gk_process, read_only):
    sink, dtype = FILE_SINKS["file"]
    yaml = _yaml(tmp_path, sink.format(folder=read_only / "out"), dtype=dtype)
    r = gk_process.run("validate", yaml)
    assert _refused(r, yaml) == _refused(gk_process.run("run", yaml), yaml)
    assert sorted(os.listdir(read_only / "out")) == []
    ok = _yaml(tmp_path, sink.format(folder=tmp_path / "fine"), dtype=dtype)
    r = gk_process.run("validate", ok)
    assert r.returncode == 0 and not (tmp_path / "fine").exists()


@pytest.mark.parametrize("kind", sorted(FILE_SINKS))
def test_a_folder_that_is_a_file_and_a_path_that_is_a_folder_are_refused(tmp_path, gk_process, kind):
    sink, dtype = FILE_SINKS[kind]
    (tmp_path / "afile").write_text("not a folder")
    yaml = _yaml(tmp_path, sink.format(folder="afile/sub"), dtype=dtype)
    text = _refused(gk_process.run("run", yaml), yaml)
    assert "is a file, not a folder" in text and str(tmp_path / "afile") in text
    assert (tmp_path / "afile").read_text() == "not a folder"

    out = Path(re.search(r"path: ([^}]+)}", sink.format(folder="o")).group(1))
    taken = tmp_path / (str(out) + (".sigmf-data" if kind == "sigmf" else ""))
    taken.mkdir(parents=True)  # the sink's file name is a folder
    yaml = _yaml(tmp_path, sink.format(folder="o"), dtype=dtype)
    text = _refused(gk_process.run("run", yaml), yaml)
    assert text.split("': ", 1)[1].startswith(f"cannot write to {taken}: it is a folder")
    assert sorted(os.listdir(tmp_path / "o")) == [taken.name]  # nothing written next to it


def test_a_folder_that_is_not_writable_and_a_file_that_may_not_be_replaced(tmp_path, gk_process):
    locked = tmp_path / "locked"
    locked.mkdir()
    _immutable(locked)
    try:
        yaml = _yaml(tmp_path, f"{{type: file, path: {locked}/sub/x.wav}}")
        text = _refused(gk_process.run("run", yaml), yaml)
        assert f"cannot write to {locked}: the folder is not writable" in text
        assert os.listdir(locked) == []
    finally:
        _mutable(locked)
    old = tmp_path / "old.wav"
    sf.write(old, np.zeros(100, np.float32), 48000)
    before = _digest(old)
    _immutable(old)
    try:
        yaml = _yaml(tmp_path, f"{{type: file, path: {old}}}")
        text = _refused(gk_process.run("run", yaml), yaml)
        assert f"cannot write to {old}: the file exists and may not be replaced" in text
    finally:
        _mutable(old)
    assert _digest(old) == before and not (tmp_path / "old.wav.partial").exists()


def _same_file_cases(tmp_path: Path) -> dict[str, tuple[str, str, str, Path]]:
    """Pipelines whose sink would write its source's file: (source, sink, dtype, the input file)."""
    x = np.random.default_rng(1).uniform(-0.5, 0.5, 4000).astype(np.float32)
    sf.write(tmp_path / "in.wav", x, 48000, subtype="FLOAT")
    os.symlink(tmp_path / "in.wav", tmp_path / "link.wav")
    (x.astype(np.complex64)).tofile(tmp_path / "cap.iq.partial")
    np.save(tmp_path / "in.npy", x[None, :])
    return {
        "file: the same path": ("{type: file, path: in.wav}", "{type: file, path: ./in.wav}", "float32",
                                tmp_path / "in.wav"),
        "file: a link to it": ("{type: file, path: in.wav}", "{type: file, path: link.wav}", "float32",
                               tmp_path / "in.wav"),
        "rawiq: the sink's .partial": ("{type: rawiq, path: cap.iq.partial, sample_rate: 48000}",
                                       "{type: rawiq, path: cap.iq}", "complex64", tmp_path / "cap.iq.partial"),
        "numpy: an absolute path": ("{type: numpy, path: in.npy}", f"{{type: numpy, path: {tmp_path}/in.npy}}",
                                    "float32", tmp_path / "in.npy"),
    }


@pytest.mark.parametrize("case", ["file: the same path", "file: a link to it", "rawiq: the sink's .partial",
                                  "numpy: an absolute path"])
def test_a_sink_that_would_write_its_sources_file_is_refused_and_the_input_stays(tmp_path, gk_process, case):
    source, sink, dtype, input_file = _same_file_cases(tmp_path)[case]
    before = _digest(input_file)
    yaml = _yaml(tmp_path, sink, dtype=dtype, source=source)
    listing = sorted(os.listdir(tmp_path))
    text = _refused(gk_process.run("run", yaml), yaml)
    assert "it is the file the source reads" in text
    assert _digest(input_file) == before
    assert sorted(os.listdir(tmp_path)) == listing  # no .partial, nothing else


def test_a_sigmf_sink_that_would_write_its_sources_recording_is_refused(tmp_path, gk_process):
    pytest.importorskip("sigmf")
    first = _yaml(tmp_path, "{type: sigmf, path: rec}")
    assert gk_process.run("run", first).returncode == 0
    before = {p: _digest(tmp_path / p) for p in ("rec.sigmf-meta", "rec.sigmf-data")}
    yaml = _yaml(tmp_path, "{type: sigmf, path: rec.sigmf-meta}", source="{type: sigmf, path: rec}")
    text = _refused(gk_process.run("run", yaml), yaml)
    assert "it is the file the source reads" in text
    assert {p: _digest(tmp_path / p) for p in before} == before


def test_the_checks_are_config_errors_at_the_sink_also_in_python(tmp_path):
    (tmp_path / "f").write_text("")
    spec = SignalSpec(48000, 1, 16)
    for sink in (AudioFileSink(path="f/x.wav", base_dir=tmp_path), NumpySink(path="f/x.npy", base_dir=tmp_path),
                 RawIqSink(path="f/x.iq", base_dir=tmp_path)):
        sink.where = "p.yaml:9:7"
        with pytest.raises(ConfigError) as info:
            sink.open(spec if not isinstance(sink, RawIqSink) else SignalSpec(48000, 1, 16, dtype="complex64"))
        assert info.value.where == "p.yaml:9:7" and info.value.path == ("path",)
        assert "is a file, not a folder" in info.value.message
    assert sorted(os.listdir(tmp_path)) == ["f"]


# ------------------------------------------------------------------ files that are complete or absent

def _input(seconds: float = 3) -> np.ndarray:
    src = SynthSource(signal="noise", amplitude=0.2, seed=5, duration_s=seconds)
    fmt = src.open(StreamFormat(48000, 1, "float32"))
    return src.read(fmt.length)


def _failed_block(err: str) -> int:
    return int(re.search(r"failed at block (\d+)", err).group(1))


def test_a_full_disk_keeps_a_flac_partial_and_finalises_a_wav_to_the_blocks_written(tmp_path, gk_process,
                                                                                     small_disk):
    flac = _yaml(tmp_path, f"{{type: file, path: {small_disk}/x.flac}}")
    r = gk_process.run("run", flac)
    assert r.returncode == 1 and "Traceback" not in r.stderr_text
    assert "no space left on the device" in r.stderr_text
    assert "the incomplete file keeps the name x.flac.partial" in r.stderr_text
    assert os.listdir(small_disk) == ["x.flac.partial"]  # nothing under the final name
    (small_disk / "x.flac.partial").unlink()

    wav = _yaml(tmp_path, f"{{type: file, path: {small_disk}/x.wav}}")
    r = gk_process.run("run", wav)
    assert r.returncode == 1 and "no space left on the device" in r.stderr_text
    blocks = _failed_block(r.stderr_text)
    assert blocks > 0 and os.listdir(small_disk) == ["x.wav"]
    expected = Pipeline.from_yaml(wav).process(_input(), backend="cpu")[:, :blocks * BS]
    data, rate = sf.read(small_disk / "x.wav", dtype="float32", always_2d=True)
    assert rate == 48000
    np.testing.assert_array_equal(data.T, expected)


def test_a_full_disk_cuts_a_raw_iq_file_back_to_the_blocks_written(tmp_path, gk_process, small_disk):
    yaml = _yaml(tmp_path, f"{{type: rawiq, path: {small_disk}/x.iq}}", dtype="complex64")
    r = gk_process.run("run", yaml)
    assert r.returncode == 1 and "no space left on the device" in r.stderr_text
    blocks = _failed_block(r.stderr_text)
    assert blocks > 0 and os.listdir(small_disk) == ["x.iq"]
    src = SynthSource(signal="noise", amplitude=0.2, seed=5, duration_s=3)
    fmt = src.open(StreamFormat(48000, 1, "complex64"))
    expected = Pipeline.from_yaml(yaml).process(src.read(fmt.length), backend="cpu")[:, :blocks * BS]
    np.testing.assert_array_equal(np.fromfile(small_disk / "x.iq", dtype="<c8")[None, :], expected)


def test_a_numpy_sink_that_cannot_save_at_close_keeps_its_partial_and_the_summary_prints(tmp_path, gk_process,
                                                                                       small_disk):
    yaml = _yaml(tmp_path, f"{{type: numpy, path: {small_disk}/x.npy}}")
    r = gk_process.run("run", yaml)
    assert r.returncode == 1 and "Traceback" not in r.stderr_text
    assert "while closing: sink 'numpy'" in r.stderr_text and "keeps the name x.npy.partial" in r.stderr_text
    assert "ended by fault" in r.stdout_text and "FAULT: while closing" in r.stdout_text  # the summary
    assert os.listdir(small_disk) == ["x.npy.partial"]


class _CloseFails(Sink):
    type = "close_fails"

    def open(self, spec):
        self.blocks = 0

    def write(self, block):
        self.blocks += 1

    def close(self):
        raise OSError("the device went away")


def test_a_sink_that_fails_to_close_still_gives_the_summary_with_the_fault():
    from pygpukit_dsp import stages

    pipe = Pipeline([stages.Gain(db=0)], name="c", sample_rate=48000, block_size=256, channels=1,
                    source=SynthSource(duration_s=0.05), sink=_CloseFails())
    with pytest.raises(StreamFault) as info:
        pipe.run(backend="cpu")
    s = info.value.summary
    assert s.ended_by == "fault" and s.fault.startswith("while closing: sink 'close_fails'")
    assert s.blocks == 10 and s.samples_out == 2400


@pytest.mark.parametrize("kind", sorted(FILE_SINKS))
def test_sigint_while_a_zmq_source_waits_for_its_peer_leaves_no_file(tmp_path, gk_process, kind):
    pytest.importorskip("zmq")
    if kind == "sigmf":
        pytest.importorskip("sigmf")
    sink, dtype = FILE_SINKS[kind]
    yaml = _yaml(tmp_path, sink.format(folder="rec"), dtype=dtype,
                 source="{type: zmq, endpoint: 'ipc://nobody.sock', start_timeout_s: 120}")
    proc = gk_process.start("run", yaml, "--stats-json", "s.json")
    partial = tmp_path / "rec" / {"file": "x.wav", "rawiq": "x.iq", "sigmf": "x.sigmf-data", "numpy": "x.npy"}[kind]
    partial = partial.with_name(partial.name + ".partial")
    try:
        deadline = time.monotonic() + 60
        while not partial.exists():  # the sink is open: the source waits for a sender
            assert proc.poll() is None and time.monotonic() < deadline, proc.communicate()
            time.sleep(0.05)
        time.sleep(0.3)
        proc.send_signal(signal.SIGINT)
        out, err = proc.communicate(timeout=60)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.communicate()
    assert proc.returncode == 130, err
    s = json.loads((tmp_path / "s.json").read_text())
    assert s["ended_by"] == "SIGINT" and s["samples_out"] == 0
    assert not (tmp_path / "rec").exists()  # no file, and no folder made for it
