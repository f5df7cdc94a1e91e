"""Latency histogram plot for a bench report (matplotlib, imported only when asked)."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np

if TYPE_CHECKING:
    from .report import BenchReport


def plot_latency(report: "BenchReport", path: str | Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(9, 4.8))
    timed = [r for r in report.results if r.raw_us]
    lo = min(min(r.raw_us) for r in timed)
    hi = max(max(r.raw_us) for r in timed)
    bins = np.geomspace(max(lo * 0.9, 0.1), hi * 1.1, 120)
    for r in timed:
        line = ax.hist(r.raw_us, bins=bins, histtype="step", linewidth=1.4,
                       label=f"{r.name}: p50 {r.latency_us['p50']:.1f} us, p99 {r.latency_us['p99']:.1f} us")
        color = line[2][0].get_edgecolor()
        ax.axvline(r.latency_us["p99"], color=color, linestyle=":", linewidth=1)
    ax.set_xscale("log")
    ax.set_yscale("log")
    ax.set_xlabel("per-block latency (us), dotted: p99")
    ax.set_ylabel("blocks")
    ax.set_title(f"{report.pipeline}: {report.input_spec}\n{report.machine}", fontsize=9)
    ax.legend(fontsize=8)
    fig.tight_layout()
    Path(path).parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=120)
    plt.close(fig)
