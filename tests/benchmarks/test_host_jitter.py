"""benchmarks/host_jitter.py: the host-noise probe runs anywhere (no GPU) and reports every case."""
from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def test_probe_reports_each_case_with_its_gaps(tmp_path):
    out = tmp_path / "jitter.json"
    proc = subprocess.run([sys.executable, str(ROOT / "benchmarks" / "host_jitter.py"), "--seconds", "0.05",
                           "--spinners", "1", "--json", str(out)], capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0, proc.stderr
    data = json.loads(out.read_text())
    assert data["host"]["cpus_online"] >= 1 and data["host"]["cpus_allowed"]
    last = data["host"]["cpus_allowed"][-1]
    setups = [(c["cpu"], c["fifo"], c["spinners"]) for c in data["cases"]]
    assert setups[:3] == [(None, False, 0), (last, False, 0), (None, False, 1)]
    assert setups[3:] == ([(last, True, 1)] if data["host"]["sched_fifo_allowed"] else [])
    for c in data["cases"]:
        assert c["gaps"] >= c["over_100us"] >= c["over_500us"] >= c["over_1ms"] >= 0
        assert c["max_us"] >= 0 and c["stalled_ms"] >= 0
    assert "| default |" in proc.stdout  # the Markdown table
