"""The latency benchmark harness behind ``gk-stream bench``.

The project and every requested baseline run the same workload, on the same input
blocks, in the same process, interleaved in rounds so that machine noise falls on all
of them alike. Outputs are checked against the project's before any timing counts.
"""

from .harness import run_bench
from .report import BenchReport, ImplResult
from .soak import SoakReport, run_soak

__all__ = ["BenchReport", "ImplResult", "SoakReport", "run_bench", "run_soak"]
