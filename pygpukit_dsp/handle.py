"""RunHandle: a pipeline or a Session running on a background thread, for live use from Python.

::

    with pipeline.start(source=DuplexSource(device="system"), sink=DuplexSink()) as run:
        time.sleep(10)
        print(run.stats()["audio"]["adc_to_dac_ms"])
    print(run.summary.format())          # leaving the block stops: drain, flush, finalise

    with pipeline.start(source=AudioDeviceSource()) as run:   # no sink: iterate the output
        for block in run:
            ...

Blocks go to the iterator through a bounded queue: a consumer that falls behind holds the
stream back (a sound card's ring then overruns, counted), it never drops blocks silently.
"""

from __future__ import annotations

import queue
import threading
from typing import TYPE_CHECKING, Any, Iterator

import numpy as np

if TYPE_CHECKING:
    from .summary import RunSummary
    from .session import Session

QUEUE_BLOCKS = 64  # output blocks held for the iterator before the stream waits for it


class RunHandle:
    """Returned by :meth:`Pipeline.start` and :meth:`Session.start`; the run starts at once.

    * :meth:`stats`: live figures (blocks, samples, latency, misses, source/sink counters, audio);
    * :meth:`stop`: stop after the current block, drain, flush, finalise; returns the summaries;
    * :meth:`wait`: wait for the run to end by itself (source end, a block or duration limit);
    * iteration: the output blocks (``(pipeline name, block)`` pairs for a several-stream Session),
      when the run was started with ``tap`` (the default when there is no sink).

    A fault in the run is raised by :meth:`stop`, :meth:`wait`, at the end of the iteration and
    when the ``with`` block exits.
    """

    def __init__(self, session: "Session", *, blocks: int | None = None, duration: float | None = None,
                 tap: bool = False, single: bool | None = None):
        self.session = session
        self.single = len(session.pipelines) == 1 if single is None else single
        self._queue: queue.Queue | None = queue.Queue(maxsize=QUEUE_BLOCKS) if tap else None
        self.unconsumed_blocks = 0  # blocks the iterator never took because the run was stopped
        self._summaries: list[RunSummary] | None = None
        self._error: BaseException | None = None
        self._done = threading.Event()
        self._thread = threading.Thread(target=self._run, args=(blocks, duration), daemon=True,
                                        name="gk-run-handle")
        self._thread.start()

    # ---------------------------------------------------------------- the run
    def _run(self, blocks: int | None, duration: float | None) -> None:
        try:
            self._summaries = self.session.run(blocks=blocks, duration=duration,
                                               tap=self._tap if self._queue is not None else None)
        except BaseException as exc:  # handed to the caller by stop()/wait()/iteration
            self._error = exc
        finally:
            self._done.set()

    def _tap(self, name: str, block: np.ndarray) -> None:
        # a copy: the engine reuses its output buffers (a graph's several sinks: a dict of blocks)
        item = (name, {k: np.array(v) for k, v in block.items()} if isinstance(block, dict) else np.array(block))
        while True:
            try:
                self._queue.put(item, timeout=0.1)
                return
            except queue.Full:
                if self.session.stopping:
                    self.unconsumed_blocks += 1
                    return

    # ---------------------------------------------------------------- API
    @property
    def running(self) -> bool:
        return not self._done.is_set()

    def stats(self) -> dict[str, Any]:
        """Live figures: one stream's dict, or {pipeline name: dict} for several (see
        StreamRunner.live_stats); empty while the streams are still being opened."""
        st = self.session.live_stats()
        if self.single:
            return next(iter(st.values()), {})
        return st

    def stop(self, *, abort: bool = False, timeout: float | None = None) -> "list[RunSummary]":
        """Stop after the current block (drain, flush, finalise; ``abort``: do not wait for queued
        output to play) and return the summaries, or raise the run's fault."""
        if self.running:
            self.session.stop("stop", abort=abort)
        return self.wait(timeout)

    def wait(self, timeout: float | None = None) -> "list[RunSummary]":
        if not self._done.wait(timeout):
            raise TimeoutError(f"the run did not end within {timeout} s")
        self._thread.join()
        if self._error is not None:
            raise self._error
        assert self._summaries is not None
        return self._summaries

    @property
    def summaries(self) -> "list[RunSummary]":
        return self.wait(0)

    @property
    def summary(self) -> "RunSummary":
        """The summary of a one-pipeline run, once it ended."""
        return self.summaries[0]

    def __iter__(self) -> Iterator[Any]:
        if self._queue is None:
            raise RuntimeError("this run was started with a sink and without tap=True: its blocks go to the "
                               "sink only (start(..., tap=True) to iterate over them as well)")
        while True:
            try:
                name, block = self._queue.get(timeout=0.05)
            except queue.Empty:
                if self._done.is_set() and self._queue.empty():
                    break
                continue
            yield block if self.single else (name, block)
        if self._error is not None:
            raise self._error

    def __enter__(self) -> "RunHandle":
        return self

    def __exit__(self, exc_type, exc, tb) -> None:
        if exc is not None and self.running:
            self.session.stop("stop")
            self._done.wait()
            return  # the with block's own exception wins
        self.stop()

    def __repr__(self) -> str:
        names = [p.name for p in self.session.pipelines]
        return f"RunHandle(pipelines={names!r}, state={'running' if self.running else 'ended'!r})"
