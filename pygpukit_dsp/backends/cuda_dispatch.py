"""Several CUDA engines on one GPU under the Rust scheduler.

A :class:`CudaDispatch` owns one native worker thread (``_native.Dispatcher``, C++) that
launches the blocks of every attached :class:`~pygpukit_dsp.backends.cuda_engine.CudaEngine`
in the order a ``pygpukit_dsp_core.Scheduler`` decides, through the scheduler's C ABI
(native/include/gk/sched_abi.h): every block handed over becomes a task (its hand-over time is
its arrival), realtime blocks go first by earliest deadline, throughput blocks run in chunks of
units that the scheduler releases only while no realtime deadline is endangered, and each
chunk's GPU time (CUDA events) feeds the scheduler's cost estimate and accounting (a stream's
first 16 whole blocks, then one in every ``time_every``: the events are serial work under the
dispatcher's lock; every paced chunk). No Python runs per block or chunk. ::

    sched = Scheduler(quantum_ns=100_000)
    rt = sched.register_stream("w1", "realtime", period_ns=5_333_333, deadline_ns=1_000_000,
                               cost_ns=40_000)
    tp = sched.register_stream("w2", "throughput", units_per_block=w2.units_per_block)
    with CudaDispatch(sched) as dispatch:
        dispatch.attach(w1, rt)
        dispatch.attach(w2, tp)
        out = w1.process(block)          # as before; launched by the dispatcher
    sched.stream_stats(rt)["latency"]["p99"]

When an engine is closed (its runner is done) or detached, or the dispatch is closed, its
stream is unregistered from the scheduler: its reservation no longer holds back the other
streams, and its final figures stay readable through :meth:`CudaDispatch.stream_stats`.

See docs/scheduler.md.
"""

from __future__ import annotations

import contextlib
import threading
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from .cuda_engine import CudaEngine

DEFAULT_SPIN_US = 200
DEFAULT_TIME_EVERY = 8


class CudaDispatch:
    """One native dispatcher thread for the engines of one GPU (see module doc).

    ``spin_us``: how long the worker spins after its last activity before it sleeps. A
    realtime stream whose period is longer than that pays a thread wake-up on each block;
    set it above the period to trade one busy CPU core for that latency.

    ``time_every``: after a stream's first 16 blocks, one block in every ``time_every`` is timed
    with CUDA events (its device time feeds the scheduler's cost model); the others complete
    unmeasured and the scheduler counts their estimate as busy time. 1 times every block, at
    about a third more serial work per block for the dispatcher (docs/scheduler.md).
    """

    def __init__(self, scheduler: Any, *, device_index: int = 0, spin_us: int = DEFAULT_SPIN_US,
                 time_every: int = DEFAULT_TIME_EVERY):
        import pygpukit_dsp_core  # noqa: F401  (the C ABI capsule's module must be imported)

        from .. import _native

        self.scheduler = scheduler
        self._engines: list[tuple["CudaEngine", int]] = []
        self._final_stats: dict[int, dict[str, Any]] = {}  # streams unregistered on detach/close
        self._lock = threading.Lock()  # _engines: runners close their engines from their own threads
        self._closed = False
        self._device = _native.Device(device_index)
        self._native = _native.Dispatcher(self._device, scheduler.capsule(), spin_us=int(spin_us))
        self.time_every = time_every

    def attach(self, engine: "CudaEngine", stream_id: int) -> None:
        """Launch ``engine``'s blocks through the scheduler as stream ``stream_id``.

        The stream must be registered with ``units_per_block`` 1 or ``engine.units_per_block``.
        The engine must be idle (nothing submitted and uncollected).
        """
        if self._closed:
            raise ValueError("this CudaDispatch is closed")
        engine.attach_native(self, self._native, int(stream_id))  # its close() detaches it first
        with self._lock:
            self._engines.append((engine, int(stream_id)))

    def detach(self, engine: "CudaEngine", missing_ok: bool = False) -> None:
        """Back to the engine's own worker, after its in-flight blocks finish; its stream is
        unregistered from the scheduler (figures kept: :meth:`stream_stats`). ``missing_ok``:
        nothing to do (instead of ValueError) when the engine is not attached, e.g. because a
        concurrent :meth:`close` took it first."""
        with self._lock:
            found = next(((i, sid) for i, (e, sid) in enumerate(self._engines) if e is engine), None)
            if found is None:
                if missing_ok:
                    return
                raise ValueError("this engine is not attached to this CudaDispatch")
            del self._engines[found[0]]
        self._release(engine, found[1])  # outside the lock: it waits for the engine's blocks

    def _release(self, engine: "CudaEngine", stream_id: int) -> None:
        try:
            engine.detach_native()
        finally:
            # already gone (unregistered by its owner): keep what is readable
            with contextlib.suppress(Exception):
                self._final_stats[stream_id] = dict(self.scheduler.unregister_stream(stream_id))

    def stats(self) -> dict[str, Any]:
        """The worker's counters: posted, launches (chunks), completed, waits, idles, cancelled,
        helped (turns run by a waiting caller's thread instead of the worker: launches and
        hand-backs that did not wait for the worker to get a CPU), and timed (chunks launched
        between timing events: see ``time_every``); ``slow_steps`` and
        ``longest_step_ns``, by kind of step (take_posts, poll, decide, launch): the steps of a
        turn that held the dispatcher's lock ``slow_step_ns`` (200 us) or more, every caller's
        hand-over waiting behind them, and the longest of each kind; ``step_ns`` and ``steps``: all
        the time in steps of each kind, and how many (where the dispatcher's time goes);
        ``slow_log``: (start ns, ns, kind) of the first 4096 slow steps, when each held the lock."""
        return dict(self._native.stats())

    @property
    def time_every(self) -> int:
        """One whole block in every ``time_every`` is timed after a stream's first 16 (class doc)."""
        return int(self._native.time_every)

    @time_every.setter
    def time_every(self, n: int) -> None:
        self._native.time_every = int(n)  # ValueError below 1 (the native dispatcher checks)

    def start_timeline(self) -> None:
        """From now on record each timed chunk's start and stop on the GPU (admission's rehearsal:
        the blocks' overlap, ``admission.gpu_overlap``); ValueError if it is already on."""
        self._native.start_timeline()

    def stop_timeline(self) -> Any:
        """Stop recording: the intervals since :meth:`start_timeline`, an int64 array (k, 2) of
        (start, stop) ns on the GPU."""
        return self._native.stop_timeline()

    def watch_off_cpu(self, gap_us: float) -> None:
        """From now on the worker records where its time went when it made no progress for
        ``gap_us`` between its sleeps (native/engine/off_cpu.h): :meth:`off_cpu_gaps`."""
        self._native.watch_off_cpu(float(gap_us))

    def off_cpu_gaps(self) -> Any:
        """The worker's gaps since :meth:`watch_off_cpu`: an int64 array, one row each (at_ns,
        gap_ns, window_ns, ran_ns, queued_ns, switches; bench/off_cpu.py reads them)."""
        return self._native.off_cpu_gaps()

    def stream_stats(self, stream_id: int) -> dict[str, Any]:
        """The scheduler's accounting of one stream (latency percentiles, misses, chunks...); its
        final figures once it was detached or the dispatch closed."""
        final = self._final_stats.get(int(stream_id))
        return dict(final) if final is not None else dict(self.scheduler.stream_stats(int(stream_id)))

    def close(self) -> None:
        """Drain what was handed over, stop the worker, detach every engine and unregister its
        stream. Idempotent."""
        if self._closed:
            return
        self._closed = True
        try:
            self._native.close()
        finally:
            with self._lock:
                engines, self._engines = self._engines, []
            for engine, sid in engines:
                self._release(engine, sid)

    def __enter__(self) -> "CudaDispatch":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def __repr__(self) -> str:
        names = ", ".join(str(sid) for _, sid in self._engines)
        return f"CudaDispatch(streams=[{names}], closed={self._closed})"
