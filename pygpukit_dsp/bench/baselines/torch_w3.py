"""The PyTorch two-stream baseline of W3 (the contention bench, pygpukit_dsp/bench/contention.py;
its rows in the report: bench/w3_torch.py).

What a PyTorch user would write to serve a latency-critical pipeline beside a heavy one on one
GPU: each on its own ``torch.cuda.Stream``, the heavy one in a background thread, the
latency-critical one at a higher stream priority if they know about priorities.

* W1: the torch-graph W1 baseline (:class:`~.torch_impl.TorchBaseline` with ``graph=True``:
  pinned staging, the block's ops in one CUDA graph), replayed on stream 1.
* W2: the torch W2 baseline, GPU-resident (the input already on the GPU), replayed as a CUDA
  graph on stream 2 with two blocks in flight (eager if the graph cannot be captured; the report
  says so). A graph replay is one call that releases the GIL, so the background thread costs
  the W1 thread as little Python time as PyTorch allows.

Graph launches run at the priority of the stream they are launched into.
"""

from __future__ import annotations

import time
from collections import deque
from typing import TYPE_CHECKING, Any, Callable, TypeVar

import numpy as np

from ..w3_pumps import W2_IN_FLIGHT
from .ops import BaselineSkipped
from .torch_impl import TorchBaseline, import_torch

if TYPE_CHECKING:
    from ...pipeline import Pipeline, SpecChain
    from ..w3_pumps import Pump

T = TypeVar("T")


class TorchW3:
    """W1 (CUDA graph) and W2 (resident) in PyTorch, each run on a stream the caller picks."""

    def __init__(self, w1: "Pipeline", c1: "SpecChain", w2: "Pipeline", c2: "SpecChain"):
        torch = import_torch()
        self.torch = torch
        self.w1 = TorchBaseline(w1, c1, graph=True)
        self.w2_note = ""
        try:
            self.w2 = TorchBaseline(w2, c2, graph=True)
            self.w2_graph = True
        except BaselineSkipped:
            raise
        except Exception as exc:  # the comparison still stands with eager W2; say which ran
            torch.cuda.synchronize()
            self.w2 = TorchBaseline(w2, c2, graph=False)
            self.w2_graph = False
            self.w2_note = (f"PyTorch {w2.name} ran eager: its CUDA graph could not be captured "
                            f"({type(exc).__name__}: {exc})")
        try:
            self.greatest_priority = int(min(torch.cuda.Stream.priority_range()))
        except (AttributeError, TypeError, RuntimeError):
            self.greatest_priority = -1  # every PyTorch version accepts -1 (high)

    def streams(self, high: bool) -> tuple[Any, Any]:
        """(W1's stream, W2's stream): both priority 0, or W1 at the device's greatest priority."""
        torch = self.torch
        return (torch.cuda.Stream(priority=self.greatest_priority if high else 0), torch.cuda.Stream(priority=0))

    # ------------------------------------------------------------------ W1 (calling thread)
    def w1_process(self, x: np.ndarray) -> np.ndarray:
        """One W1 block on the current stream: a view of the pinned output (copy to keep it)."""
        return self.w1.process(x)

    def w1_reset(self) -> None:
        self.w1.reset()

    def w1_run(self, stream: Any, fn: Callable[[], T]) -> T:
        """Call ``fn`` with ``stream`` as this thread's current stream, W1 reset first."""
        with self.torch.cuda.stream(stream):
            self.w1.reset()
            return fn()

    # ------------------------------------------------------------------ W2 (background thread)
    def w2_pump(self, stream: Any, blocks: list[np.ndarray]) -> Callable[["Pump"], None]:
        """The body of a W2 thread: the checked blocks from reset (through host memory), then
        resident blocks on ``stream``, two in flight, until ``pump.stop``."""
        torch = self.torch
        w2 = self.w2

        def body(pump: "Pump") -> None:
            perf = time.perf_counter_ns
            with torch.cuda.stream(stream):
                w2.reset()
                pump.outputs = [np.array(w2.process(b), copy=True) for b in blocks]
                if self.w2_graph:
                    step = w2.g.replay  # static_in holds the last checked block
                else:
                    xd = torch.from_numpy(blocks[0]).to(w2.dev)

                    def step() -> None:
                        w2._compute(xd)
                events = [torch.cuda.Event() for _ in range(W2_IN_FLIGHT)]
                pending: deque[Any] = deque()
                i = 0
                pump.started.set()
                try:
                    while not pump.stop.is_set():
                        while len(pending) < W2_IN_FLIGHT:
                            step()
                            ev = events[i % W2_IN_FLIGHT]
                            i += 1
                            ev.record(stream)
                            pending.append(ev)
                        pending.popleft().synchronize()
                        pump.stamps.append(perf())
                finally:
                    stream.synchronize()
        return body

    def close(self) -> None:
        torch = self.torch
        torch.cuda.synchronize()
        self.w1.close()
        self.w2.close()
        torch.cuda.empty_cache()
