"""What gk-stream prints, shared by the local run (cli.py) and the cluster run (cluster.py): error
lines, the per-stream QoS lines, and JSON files.

CLI layer, below cli.py and cluster.py: it imports nothing of the package, so printing a line loads
no executor and no stage.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any


def err(msg: str) -> None:
    """A line on stderr, prefixed ``gk-stream:``."""
    print(f"gk-stream: {msg}", file=sys.stderr)


def qos_lines(summaries: list) -> str:
    """One QoS line per stream: class, deadline, p99 and misses from the scheduler's accounting
    (release to finish on its device's dispatcher); the runner's host figures where none."""
    width = max(16, *(len(s.pipeline) for s in summaries))
    lines = ["streams (scheduler accounting: hand-over to finish on each device's dispatcher):"]
    for s in summaries:
        sa = s.scheduler
        if sa is not None:
            deadline = sa.deadline_us if sa.deadline_us is not None else s.deadline_us
            p99, misses, where = sa.latency_us.get("p99", 0.0), sa.missed, f"{sa.device}, drops {sa.dropped}"
        else:
            deadline, p99, misses, where = s.deadline_us, s.latency_us.get("p99", 0.0), s.deadline_misses, "host"
        lines.append(f"  {s.pipeline:<{width}} class {s.qos_class:<11} deadline {deadline:9.1f} us  "
                     f"p99 {p99:9.1f} us  misses {misses}  ({where})")
    return "\n".join(lines)


def write_json(path: str, data: Any) -> None:
    """``data`` as indented JSON at ``path`` (its folder created); values JSON lacks as strings."""
    p = Path(path)
    p.parent.mkdir(parents=True, exist_ok=True)
    p.write_text(json.dumps(data, indent=2, default=str) + "\n")
