"""Session: several pipelines running at once, each as its own stream, under the scheduler.

Executor layer: it imports the description (Pipeline, Graph) only for typing. A pipeline is a
Pipeline or a Graph (graph_runner.open_runner picks the runner of each).
"""

from __future__ import annotations

import threading
from typing import TYPE_CHECKING, Any, Callable, Sequence

from .admission import DEFAULT_POLICY, DEFAULT_U_MAX, AdmissionPolicy, admit, start_clocks
from .errors import GkError, StreamFault
from .graph_runner import open_runner
from .runner import StreamRunner
from .summary import ProgressFn, RunSummary, SchedulerAccounting, StopRequest

if TYPE_CHECKING:
    from pygpukit_dsp_core import Scheduler

    from .dispatch import Dispatch
    from .graph import Graph
    from .pipeline import Pipeline


class Session:
    """Runs several pipelines concurrently, one thread per stream, blocks dispatched by the scheduler.

    Every pipeline is opened (sources, sinks, backends, spec checks) before any block flows, so
    a configuration error in one stops all of them before they start. Then every stream is
    admitted by the scheduler of its device (AdmissionError with the figures on a refusal) and
    its engine attached to that device's dispatcher: the scheduler decides the order of all
    blocks (realtime first, earliest deadline first; the others paced) and accounts them.

    Each GPU has its own scheduler and dispatcher. A pipeline's ``device`` picks its GPU
    (default 0); with ``device: auto`` (or ``Session(..., device="auto")`` for all of them) the
    session places each stream on the GPU with the most admission headroom that admits it, and
    each summary says where it ran and why (``RunSummary.gpu``, ``.placement``)::

        s = Session([audio, spectrum])
        for summary in s.run():
            print(summary.pipeline, summary.scheduler.latency_us["p99"], summary.scheduler.missed)
        s.stream_stats("audio")          # the scheduler's raw figures (ns)

    ``u_max``: the utilisation bound of every device's admission (default 0.9; docs/scheduler.md,
    "Admission"): the share of a device realtime streams may reserve, by their calibrated device
    time. Under load a GPU block's device time grows past its calibration (W1 on the H100:
    10.9-11.6 us alone, 12-15 us among hundreds of streams), so when a GPU's realtime streams fill
    more than half a bound, admission rehearses them together first and admits them by their
    device time among each other (``admission.rehearse``; docs/scheduler.md, "Admission").
    ``policy``: every tunable of admission (an ``admission.AdmissionPolicy``; ``u_max`` replaces its
    bound); each stream's decision is its runner's ``admission`` (an ``AdmissionResult``).

    Realtime streams whose clocks the session paces itself (sources with ``rate: realtime``) and
    that share a block period are released at phases staggered evenly over it, on one epoch, and
    admission knows it: a block then waits only behind the work that can be in front of it, not
    behind one block of every stream (docs/scheduler.md, "Release phases"). Streams on a device's
    clock, the network or the caller's pushes may all release at once, and are admitted so.
    """

    def __init__(self, pipelines: Sequence["Pipeline | Graph"], *, backend: str | None = None,
                 device: int | str | None = None, u_max: float | None = None,
                 policy: AdmissionPolicy | None = None):
        if not pipelines:
            raise ValueError("a Session needs at least one pipeline")
        from .devices import check_device

        self.pipelines = list(pipelines)
        self.backend = backend
        self.device = check_device(device, "Session(device=...)")  # overrides every pipeline's
        self.policy = (policy or DEFAULT_POLICY).with_u_max(u_max, "Session(u_max=...)")
        self.u_max = self.policy.u_max
        self._stop = StopRequest()
        self._runners: list[StreamRunner] = []
        self.schedulers: dict[str, "Scheduler"] = {}  # device ("cpu" | "cuda" | "cuda:N") -> its scheduler
        self.dispatch: "Dispatch | None" = None

    def __repr__(self) -> str:
        names = [p.name for p in self.pipelines]
        u_max = "" if self.u_max == DEFAULT_U_MAX else f", u_max={self.u_max!r}"
        return f"Session(pipelines={names!r}, backend={self.backend!r}, device={self.device!r}{u_max})"

    @property
    def scheduler(self) -> "Scheduler":
        """The scheduler of this session's streams, when they all run on one device."""
        if len(self.schedulers) == 1:
            return next(iter(self.schedulers.values()))
        if not self.schedulers:
            raise AttributeError("the session has no scheduler before run() admitted its streams")
        raise AttributeError(f"this session runs streams on several devices ({', '.join(self.schedulers)}), "
                             "each with its own scheduler: use Session.schedulers[device]")

    def stream_stats(self, name: str) -> dict[str, Any]:
        """The scheduler's figures (ns) of the stream of pipeline ``name``, during or after run()."""
        if self.dispatch is None:
            raise RuntimeError("the session has not started: call run() first")
        return self.dispatch.stream_stats(name)

    def stop(self, reason: str = "stop", *, abort: bool = False) -> None:
        """Ask every stream to stop after its current block; they drain, flush and finalise.

        ``reason`` becomes each summary's ``ended_by`` ("SIGINT" from gk-stream's signal handler).
        ``abort`` does not wait for queued output to play out (files are still finalised).
        Safe from any thread and from a signal handler.
        """
        self._stop.set(reason, abort=abort)
        for r in list(self._runners):
            r.interrupt(abort=abort)

    @property
    def stopping(self) -> bool:
        return self._stop.is_set()

    @property
    def interruptible(self) -> bool:
        """True while one stream runs on the caller's thread and has not begun closing: raising
        KeyboardInterrupt there abandons its current block without harm to its files."""
        return len(self._runners) == 1 and not self._runners[0].closing

    def live_stats(self) -> dict[str, dict[str, Any]]:
        """Each running stream's figures so far, by pipeline name (see StreamRunner.live_stats)."""
        return {r.pipeline.name: r.live_stats() for r in list(self._runners)}

    def start(self, *, blocks: int | None = None, duration: float | None = None, tap: bool = False):
        """Run on a background thread; returns a :class:`~pygpukit_dsp.handle.RunHandle`.

        ``with session.start() as run:`` ... ``run.stats()``, ``run.stop()``; with ``tap=True`` the
        handle also iterates over ``(pipeline name, block)`` of every output block.
        """
        from .handle import RunHandle

        return RunHandle(self, blocks=blocks, duration=duration, tap=tap)

    def run(self, *, blocks: int | None = None, duration: float | None = None,
            progress: ProgressFn | None = None,
            tap: "Callable[[str, Any], None] | None" = None) -> list[RunSummary]:
        """Open, admit and run every stream until each ends; one summary per pipeline.

        ``tap(name, block)`` receives every output block (after the sink took it).
        """
        from .dispatch import start_dispatch

        runners: list[StreamRunner] = []
        self._runners = runners
        try:
            gpus = self._auto_gpus()
            for p in self.pipelines:
                runners.append(open_runner(p, backend=self.backend, device=self.device,
                                           gpu=self._first_guess(runners, gpus)))
            admitted = admit(runners, policy=self.policy, gpus=gpus)  # AdmissionError before the first block
            self.schedulers = admitted.schedulers
            for r in runners:
                r.admission = admitted.results[r.pipeline.name]
            self.dispatch = start_dispatch(runners, self.schedulers)
            start_clocks(runners)  # the clocks admission phased (assign_phases), on one epoch
        except BaseException:
            for r in runners:
                r._close(quiet=True)
            raise
        dispatch = self.dispatch

        results: list[RunSummary | BaseException | None] = [None] * len(runners)

        def work(i: int, r: StreamRunner) -> None:
            name = r.pipeline.name
            stream_tap = None if tap is None else (lambda block: tap(name, block))
            try:
                results[i] = r.run(blocks=blocks, duration=duration, progress=progress,
                                   stop=self._stop, tap=stream_tap)
            except BaseException as exc:  # reported by the caller's thread below
                results[i] = exc
                self.stop(f"stop (pipeline '{name}' failed)")

        close_error: BaseException | None = None
        try:
            if len(runners) == 1:
                work(0, runners[0])  # on the caller's thread: Ctrl-C reaches the runner
                if isinstance(results[0], KeyboardInterrupt):
                    raise results[0]
            else:
                self._run_threads(runners, work)
        finally:
            try:
                dispatch.close()  # after the runners finished: drains, stops the dispatchers
            except Exception as exc:
                close_error = exc

        for res in results:  # a fault's summary (StreamFault.summary) gets them too
            summary = res if isinstance(res, RunSummary) else getattr(res, "summary", None)
            if isinstance(summary, RunSummary):
                self._add_scheduler_figures(summary)
        summaries: list[RunSummary] = []
        for p, res in zip(self.pipelines, results):
            if isinstance(res, GkError) or (len(runners) == 1 and isinstance(res, BaseException)):
                raise res  # one pipeline: its own exception, as StreamRunner.run raised it
            if isinstance(res, BaseException):
                raise StreamFault(f"pipeline '{p.name}' failed: {res}") from res
            assert res is not None
            summaries.append(res)
        if close_error is not None:
            raise close_error
        return summaries

    def latency_histograms(self) -> dict[str, Any]:
        """Each stream's host latency histogram of the last run() (``LatencyHistogram``, ns): merge
        them to aggregate streams (benchmarks/multi_gpu.py does, per GPU)."""
        return {r.pipeline.name: r.hist for r in self._runners if r.hist is not None}

    def placements(self) -> dict[str, Any]:
        """Each stream's :class:`~pygpukit_dsp.admission.Placement` (after run() admitted them)."""
        return {r.pipeline.name: r.admission.placement if r.admission else None for r in self._runners}

    def _auto_gpus(self) -> list[int] | None:
        """The GPUs ``device: auto`` may use, when a pipeline asks for it (else None: not needed)."""
        wants = [self.device if self.device is not None else p.device for p in self.pipelines]
        if "auto" not in wants or self.backend == "cpu":
            return None
        from .capabilities import usable_gpus

        return usable_gpus()

    @staticmethod
    def _first_guess(runners: list[StreamRunner], gpus: list[int] | None) -> int | None:
        """Where an auto stream's engine opens before admission places it: the GPU with the
        fewest streams opened so far (then the lowest index), so that streams alike need no move."""
        if not gpus:
            return None
        count = {g: 0 for g in gpus}
        for r in runners:
            choice = r.engine.choice if r.engine is not None else None
            if choice is not None and choice.name == "cuda" and (choice.device or 0) in count:
                count[choice.device or 0] += 1
        return min(gpus, key=lambda g: (count[g], g))

    def _run_threads(self, runners: list[StreamRunner], work: Any) -> None:
        threads = [threading.Thread(target=work, args=(i, r), name=f"gk-{r.pipeline.name}", daemon=True)
                   for i, r in enumerate(runners)]
        for t in threads:
            t.start()
        try:
            for t in threads:
                while t.is_alive():
                    t.join(0.1)
        except KeyboardInterrupt:
            self.stop("interrupted")
            for t in threads:
                t.join()

    def _add_scheduler_figures(self, summary: RunSummary) -> None:
        assert self.dispatch is not None
        try:
            stats = self.dispatch.stream_stats(summary.pipeline)
        except Exception:  # the dispatcher failed; the runner's own figures still stand
            return
        summary.scheduler = SchedulerAccounting.from_stats(self.dispatch.device_of(summary.pipeline), stats)
