"""Session: several pipelines running at once, each as its own stream."""

from __future__ import annotations

import threading
from typing import Sequence

from .errors import GkError, StreamFault
from .pipeline import Pipeline
from .runner import ProgressFn, RunSummary, StreamRunner


class Session:
    """Runs several pipelines concurrently, one thread per stream.

    Every pipeline is opened (sources, sinks, backends, spec checks) before any block
    flows, so a configuration error in one stops all of them before they start.
    """

    def __init__(self, pipelines: Sequence[Pipeline], *, backend: str | None = None):
        if not pipelines:
            raise ValueError("a Session needs at least one pipeline")
        self.pipelines = list(pipelines)
        self.backend = backend
        self._stop = threading.Event()

    def stop(self) -> None:
        """Ask every stream to stop after its current block (they drain and finalise)."""
        self._stop.set()

    def run(self, *, blocks: int | None = None, duration: float | None = None,
            progress: ProgressFn | None = None) -> list[RunSummary]:
        from .admission import admit

        runners: list[StreamRunner] = []
        try:
            for p in self.pipelines:
                runners.append(StreamRunner(p, backend=self.backend))
            self.scheduler = admit(runners)  # AdmissionError before the first block
        except BaseException:
            for r in runners:
                r._close(quiet=True)
            raise
        if len(runners) == 1:
            return [runners[0].run(blocks=blocks, duration=duration, progress=progress,
                                   stop=self._stop.is_set)]

        results: list[RunSummary | BaseException | None] = [None] * len(runners)

        def work(i: int, r: StreamRunner) -> None:
            try:
                results[i] = r.run(blocks=blocks, duration=duration, progress=progress,
                                   stop=self._stop.is_set)
            except BaseException as exc:  # reported by the caller's thread below
                results[i] = exc
                self._stop.set()

        threads = [threading.Thread(target=work, args=(i, r), name=f"gk-{r.pipeline.name}", daemon=True)
                   for i, r in enumerate(runners)]
        for t in threads:
            t.start()
        try:
            for t in threads:
                while t.is_alive():
                    t.join(0.1)
        except KeyboardInterrupt:
            self._stop.set()
            for t in threads:
                t.join()
        summaries: list[RunSummary] = []
        for p, res in zip(self.pipelines, results):
            if isinstance(res, GkError):
                raise res
            if isinstance(res, BaseException):
                raise StreamFault(f"pipeline '{p.name}' failed: {res}") from res
            assert res is not None
            summaries.append(res)
        return summaries
