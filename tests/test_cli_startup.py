"""gk-stream starts fast: ``--help``, ``validate FILE`` and ``stages`` import only what answering needs.

Each command runs in a fresh interpreter, which writes the names in ``sys.modules`` when it exits
(``python -X importtime`` would miss the modules the registries load with ``importlib``), and the
test reads them; no timing is asserted. Never SciPy, the native module or the Rust core; for
``--help`` no stage, source, sink, pydantic or YAML either; for ``validate FILE`` only the modules of
the types FILE names, and no SciPy even when its fir and sos stages design their filters (the
designs are checked without SciPy and computed when a stream opens).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from pygpukit_dsp.io import CATALOG as IO_CATALOG
from pygpukit_dsp.stages import CATALOG as STAGE_CATALOG

NEVER = ("scipy", "pygpukit_dsp._native", "pygpukit_dsp_core")  # each with its submodules
PIPELINES = Path(__file__).resolve().parents[1] / "pipelines"
STAGE_MODULES = {f"pygpukit_dsp.stages.{m}" for _, m, _ in STAGE_CATALOG}
IO_MODULES = {f"pygpukit_dsp.io.{m}" for _, _, m, _ in IO_CATALOG}


# what the gk-stream console script runs, and at exit the modules it imported, as JSON to $GK_MODULES
GK_STREAM = ("import atexit, json, os, sys\n"
             "atexit.register(lambda: open(os.environ['GK_MODULES'], 'w').write(json.dumps(sorted(sys.modules))))\n"
             "from pygpukit_dsp.cli import main\n"
             "sys.exit(main(sys.argv[1:]))\n")


def imported(tmp: Path, *args: str) -> tuple[subprocess.CompletedProcess, set[str]]:
    """Run ``gk-stream ARGS`` in a fresh interpreter in folder ``tmp``: the result and every module it imported."""
    out = tmp / "modules.json"
    r = subprocess.run([sys.executable, "-c", GK_STREAM, *args], cwd=tmp, capture_output=True, text=True,
                       timeout=120, env={**os.environ, "GK_MODULES": str(out)})
    modules = set(json.loads(out.read_text()))
    assert "pygpukit_dsp.cli" in modules  # the list was written
    return r, modules


def loaded(modules: set[str], *names: str) -> list[str]:
    """The modules among ``modules`` that are one of ``names`` or inside one."""
    return sorted(m for m in modules if any(m == n or m.startswith(n + ".") for n in names))


def test_help_imports_no_stage_no_scipy_and_no_native_module(tmp_path):
    r, modules = imported(tmp_path, "--help")
    assert r.returncode == 0 and "validate" in r.stdout
    assert loaded(modules, *NEVER) == []
    assert loaded(modules, "pydantic", "yaml", "pygpukit_dsp.stages", "pygpukit_dsp.io", "pygpukit_dsp.spec",
                  "pygpukit_dsp.pipeline", "pygpukit_dsp.session", "pygpukit_dsp.backends") == []


def test_validate_imports_the_modules_of_the_types_the_file_names(tmp_path):
    (tmp_path / "p.yaml").write_text(textwrap.dedent("""\
        version: 1
        name: p
        sample_rate: 48000
        channels: 2
        block_size: 256
        source: {type: synth, signal: noise, seed: 1, duration_s: 0.1}
        stages:
          - {type: gain, db: -6}
          - {type: rfft}
        sink: {type: "null"}
        """))
    r, modules = imported(tmp_path, "validate", "p.yaml")
    assert r.returncode == 0, r.stderr[-2000:]
    assert "pipeline p: ok" in r.stdout
    assert loaded(modules, *NEVER) == []
    assert sorted(modules & STAGE_MODULES) == ["pygpukit_dsp.stages.fft", "pygpukit_dsp.stages.gain"]
    assert sorted(modules & IO_MODULES) == ["pygpukit_dsp.io.null", "pygpukit_dsp.io.synth"]
    assert loaded(modules, "pygpukit_dsp.session", "pygpukit_dsp.runner", "pygpukit_dsp.backends",
                  "pygpukit_dsp.admission.calibration") == []


@pytest.mark.parametrize("name", ["demo", "file_filter"])
def test_validate_of_a_shipped_pipeline_that_designs_filters_imports_no_scipy(tmp_path, name):
    r, modules = imported(tmp_path, "validate", str(PIPELINES / f"{name}.yaml"))
    assert r.returncode == 0, r.stderr[-2000:]
    assert f"pipeline {name}: ok" in r.stdout
    assert loaded(modules, *NEVER) == []


def test_validate_of_every_filter_design_and_filter_stage_imports_no_scipy(tmp_path):
    (tmp_path / "p.yaml").write_text(textwrap.dedent("""\
        version: 1
        name: p
        sample_rate: 48000
        channels: 1
        block_size: 480
        source: {type: synth, signal: noise, seed: 1, duration_s: 0.1}
        stages:
          - {type: fir, design: {numtaps: 64, cutoff_hz: [1000, 5000], pass_zero: bandpass, window: [kaiser, 8.0]}}
          - {type: sos, design: {kind: ellip, order: 5, cutoff_hz: 3000, btype: highpass, rp: 0.5, rs: 60}}
          - {type: sos, design: {kind: cheby1, order: 4, cutoff_hz: [300, 3400], btype: bandstop, rp: 1}}
          - {type: sos, design: {kind: cheby2, order: 4, cutoff_hz: 8000, rs: 40}}
          - {type: sos, design: {kind: bessel, order: 6, cutoff_hz: 8000}}
          - {type: resample, up: 2, down: 3}
          - {type: channelizer, channels: 4}
          - {type: stft, nfft: 16, hop: 8, window: [kaiser, 5.0]}
        sink: {type: "null"}
        """))
    r, modules = imported(tmp_path, "validate", "p.yaml")
    assert r.returncode == 0, r.stderr[-2000:]
    assert loaded(modules, *NEVER) == []


def test_an_unknown_type_is_named_with_a_near_one_without_importing_every_stage(tmp_path):
    (tmp_path / "p.yaml").write_text(textwrap.dedent("""\
        version: 1
        name: p
        sample_rate: 48000
        channels: 1
        stages:
          - {type: fri, taps: [1.0]}
        """))
    r, modules = imported(tmp_path, "validate", "p.yaml")
    assert r.returncode == 2
    assert "p.yaml:6:" in r.stderr and "'fir'" in r.stderr  # where, and the did-you-mean over every type
    assert modules & STAGE_MODULES == set()
    assert loaded(modules, *NEVER) == []


def test_stages_lists_every_type_without_scipy_or_native_modules(tmp_path):
    r, modules = imported(tmp_path, "stages")
    assert r.returncode == 0
    assert STAGE_MODULES <= modules and IO_MODULES <= modules  # the catalog needs every model
    assert loaded(modules, *NEVER) == []


@pytest.mark.parametrize("name, module", [("fir", "pygpukit_dsp.stages.fir"), ("sigmf", "pygpukit_dsp.io.sigmf_io")])
def test_stages_name_imports_that_type_alone(tmp_path, name, module):
    r, modules = imported(tmp_path, "stages", name)
    assert r.returncode == 0
    assert sorted(modules & (STAGE_MODULES | IO_MODULES)) == [module]
    assert loaded(modules, *NEVER) == []


def test_importing_the_package_imports_none_of_its_modules():
    code = "import sys, pygpukit_dsp; print(sorted(m for m in sys.modules if m.startswith('pygpukit_dsp.')))"
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert r.returncode == 0 and r.stdout.strip() == "[]"
