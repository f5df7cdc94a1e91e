"""benchmarks/soak.py: a short CPU soak writes its JSON and Markdown and prints a line per sample."""
from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]

TINY = """\
version: 1
name: tiny
sample_rate: 8000
block_size: 256
channels: 1
source: {type: synth, signal: sine, freq_hz: 440}
stages:
  - type: gain
    linear: 0.5
sink: {type: "null"}
"""


def test_script_soaks_a_file_and_writes_json_and_markdown(tmp_path):
    (tmp_path / "tiny.yaml").write_text(TINY)
    js, md = tmp_path / "out" / "soak.json", tmp_path / "out" / "soak.md"
    proc = subprocess.run([sys.executable, str(ROOT / "benchmarks" / "soak.py"), str(tmp_path / "tiny.yaml"),
                           "--backend", "cpu", "--minutes", "0.02", "--interval", "0.4", "--json", str(js),
                           "--markdown", str(md)], capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    data = json.loads(js.read_text())
    assert data["pipeline"] == "tiny" and data["backend"] == "cpu" and data["ended_by"] == "duration limit"
    assert data["blocks"] == 38  # ceil(1.2 s * 8000 / 256)
    sample_lines = [ln for ln in proc.stderr.splitlines() if ln.startswith("soak tiny ")]
    assert len(sample_lines) == len(data["samples"])  # one progress line per sample
    assert md.read_text().strip() == proc.stdout.strip()  # the table printed is the table written
    assert data["verdict_code"] in ("no_growth", "growth", "too_few_samples") and "grew" in data


def test_script_reports_a_configuration_error_with_exit_2(tmp_path):
    (tmp_path / "tiny.yaml").write_text(TINY)
    proc = subprocess.run([sys.executable, str(ROOT / "benchmarks" / "soak.py"), str(tmp_path / "tiny.yaml"),
                           "--backend", "cpu", "--minutes", "0.02", "--warmup", "5"],
                          capture_output=True, text=True, timeout=120)
    assert proc.returncode == 2 and "warm-up (5 s) must be" in proc.stderr and "Traceback" not in proc.stderr
