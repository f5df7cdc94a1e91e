"""Scheduled dispatch of CPU streams: one dispatcher thread runs every CPU block of a session.

An attached engine's ``process(block, final)`` no longer runs the block on the caller's thread:
it submits a task of the engine's stream to the scheduler (arrival = now), hands the block
over and waits. The dispatcher thread asks ``scheduler.next()``:

* ``launch``: runs that task's block through the engine (a whole block: CPU streams are
  registered with ``units_per_block=1``), measures its time, reports ``complete(task, ns)`` and
  hands the output back to the waiting caller;
* ``wait``: sleeps until ``wait_until_ns`` or the next hand-over, whichever is first;
* ``idle``: sleeps until the next hand-over.

So the scheduler decides the order (realtime blocks first, earliest deadline first; the others
paced so that no admitted realtime block misses because of them) and accounts every block's
latency, misses and busy time exactly as for GPU streams. A block that raises is dropped in
the scheduler (a drop) and the caller gets the same exception. Blocks of one stream run in
order, one at a time; no block is run twice or lost: ``stats()`` counts them.

When an engine is closed (its runner is done) or the dispatcher is closed, the stream is
detached and unregistered: its reservation no longer holds back the others (a CPU block
cannot be split, so a block that does not fit next to a live realtime stream waits until it
does), and its final figures stay readable through :meth:`CpuDispatcher.stream_stats`.
"""

from __future__ import annotations

import contextlib

import threading
import time
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from ..errors import StreamFault

if TYPE_CHECKING:
    import numpy as np
    from pygpukit_dsp_core import Scheduler

# Shortest sleep on a ``wait`` decision: the scheduler never asks for a wait in the past, but
# if it did, this keeps the dispatcher from spinning on a 2-core machine.
MIN_WAIT_NS = 20_000


# A process-directed signal (Ctrl-C) may be delivered to any thread; Python runs its handler on
# the main thread only when that thread wakes. A caller's wait wakes this often, so that a Ctrl-C
# raises there even when another thread took the signal.
SIGNAL_POLL_S = 0.05


def _wait_awake(event: threading.Event) -> None:
    while not event.wait(SIGNAL_POLL_S):
        pass


@dataclass(eq=False)
class _Stream:
    """An attached engine: its stream id and the methods the hooks replaced."""

    engine: Any
    stream: int
    name: str
    process: Any              # the engine's own process(block, final)
    close: Any                # the engine's own close()
    saved: dict[str, Any]     # instance attributes the hooks shadowed (restored on detach)
    live: int = 0             # handed over, not yet handed back


@dataclass(eq=False)
class _Block:
    stream: _Stream
    data: "np.ndarray"
    final: bool
    task: int = -1
    handed: bool = False      # counted in its stream's live blocks (the caller's side)
    running: bool = False     # taken by the dispatcher thread
    result: Any = None
    error: BaseException | None = None
    done: threading.Event = field(default_factory=threading.Event)


class CpuDispatcher:
    """Runs the blocks of every attached CPU engine on one thread, in the scheduler's order.

    ::

        sched = pygpukit_dsp_core.Scheduler()
        sid = sched.register_stream("audio", "realtime", period_ns=10_000_000, cost_ns=80_000)
        disp = CpuDispatcher(sched)
        disp.attach(engine, sid)      # engine.process now goes through the dispatcher
        y = engine.process(x)         # same result as before, run on the dispatcher thread
        disp.stream_stats(sid)        # the scheduler's accounting of the stream
        disp.close()                  # drains, stops the thread, detaches every engine
    """

    def __init__(self, scheduler: "Scheduler", *, name: str = "gk-cpu-dispatch"):
        self.scheduler = scheduler
        self._cv = threading.Condition()
        self._streams: dict[int, _Stream] = {}       # id(engine) -> attached stream
        self._ready: dict[int, _Block] = {}          # task -> block handed over, not yet launched
        self._final_stats: dict[int, dict[str, Any]] = {}  # stream id -> figures at detach
        self._closing = False
        self._closed = False
        self._fault: BaseException | None = None
        self._abandoned = 0  # withdrawn blocks whose task id the interrupted submit never returned
        self._counts = {"submitted": 0, "launched": 0, "completed": 0, "failed": 0, "cancelled": 0,
                        "waits": 0, "idles": 0}
        self._thread = threading.Thread(target=self._main, name=name, daemon=True)
        self._thread.start()

    # ------------------------------------------------------------------ engines
    def attach(self, engine: Any, stream: int) -> None:
        """Route ``engine.process`` (and ``engine.close``) through this dispatcher as ``stream``."""
        st = self.scheduler.stream_stats(stream)  # ValueError/SchedulerError for an unknown id
        if st["units_per_block"] != 1:
            raise ValueError(f"stream '{st['name']}' is registered with units_per_block="
                             f"{st['units_per_block']}; a CPU engine runs whole blocks: register it with 1")
        with self._cv:
            self._check_open()
            if id(engine) in self._streams:
                raise ValueError(f"engine {engine!r} is already attached (stream "
                                 f"'{self._streams[id(engine)].name}')")
            saved = {k: vars(engine)[k] for k in ("process", "close") if k in vars(engine)}
            rec = _Stream(engine, stream, st["name"], engine.process, engine.close, saved)
            self._streams[id(engine)] = rec

        def process(block: "np.ndarray", final: bool = False) -> Any:
            return self._run_block(rec, block, final)

        def close() -> None:
            self._detach(rec)
            rec.close()

        engine.process, engine.close = process, close

    def detach(self, engine: Any) -> None:
        """Give the engine its own methods back and unregister its stream (figures are kept)."""
        rec = self._streams.get(id(engine))
        if rec is None:
            raise ValueError(f"engine {engine!r} is not attached")
        self._detach(rec)

    def _detach(self, rec: _Stream) -> None:
        with self._cv:
            # the runner closes its engine after its last block came back; anything else waits
            self._cv.wait_for(lambda: rec.live == 0 or self._fault is not None)
            self._detach_locked(rec)

    def _detach_locked(self, rec: _Stream) -> None:
        if self._streams.pop(id(rec.engine), None) is None:
            return
        for k in ("process", "close"):
            if k in rec.saved:
                setattr(rec.engine, k, rec.saved[k])
            else:
                vars(rec.engine).pop(k, None)
        # already gone (unregistered by its owner): keep what is readable
        with contextlib.suppress(Exception):
            self._final_stats[rec.stream] = dict(self.scheduler.unregister_stream(rec.stream))
        self._cv.notify_all()  # a released reservation may let a held-back block run

    # ------------------------------------------------------------------ the caller's side
    def _check_open(self) -> None:
        if self._fault is not None:
            raise StreamFault(f"the CPU dispatcher failed: {self._fault}") from self._fault
        if self._closing:
            raise StreamFault("the CPU dispatcher is closed")

    def _run_block(self, rec: _Stream, data: "np.ndarray", final: bool) -> Any:
        blk = _Block(rec, data, bool(final))
        # A signal (Ctrl-C) raises at any bytecode, also between the hand-over and the wait: the
        # whole hand-over is inside the try, so an interrupted block is always withdrawn (else
        # the scheduler keeps a task nobody waits for, and close() would drain it forever).
        try:
            with self._cv:
                self._check_open()
                if self._streams.get(id(rec.engine)) is not rec:
                    raise StreamFault(f"stream '{rec.name}' is detached from the CPU dispatcher")
                rec.live += 1
                blk.handed = True
                blk.task, _ = self.scheduler.submit(rec.stream)
                self._ready[blk.task] = blk
                self._counts["submitted"] += 1
                self._cv.notify_all()
            _wait_awake(blk.done)
        except BaseException:  # e.g. Ctrl-C on the main thread: withdraw or let it finish
            if blk.handed:
                self._withdraw(blk)
            raise
        if blk.error is not None:
            raise blk.error
        return blk.result

    def _withdraw(self, blk: _Block) -> None:
        with self._cv:
            if blk.done.is_set():
                return
            if not blk.running:  # handed over (maybe not yet submitted or queued), not taken
                self._ready.pop(blk.task, None)
                try:
                    if blk.task >= 0:
                        self.scheduler.cancel(blk.task)
                    else:  # interrupted inside submit: its task (if made) is cancelled when it comes up
                        self._abandoned += 1
                finally:
                    self._counts["cancelled"] += 1
                    self._finish_locked(blk)
                return
        _wait_awake(blk.done)  # it is running: the engine must be idle before it closes

    def _finish_locked(self, blk: _Block) -> None:
        blk.stream.live -= 1
        blk.done.set()
        self._cv.notify_all()

    # ------------------------------------------------------------------ the dispatcher thread
    def _main(self) -> None:
        try:
            while True:
                with self._cv:
                    blk = self._next_block()
                if blk is None:
                    return
                self._execute(blk)
        except BaseException as exc:  # a broken scheduler invariant: fail every waiting block
            with self._cv:
                self._fault = exc
                fault = StreamFault(f"the CPU dispatcher failed: {exc}")
                for b in list(self._ready.values()):
                    b.error = fault
                    self._finish_locked(b)
                self._ready.clear()
                self._cv.notify_all()

    def _next_block(self) -> _Block | None:
        """Under the lock: the next block to run, or None once closing and drained."""
        sched = self.scheduler
        while True:
            d = sched.next()
            if d.kind == "launch":
                blk = self._ready.pop(d.task, None)
                if blk is not None:
                    blk.running = True
                elif self._abandoned:  # the task of a block withdrawn before its id was known
                    self._abandoned -= 1
                    try:
                        sched.cancel(d.task)
                    except Exception:
                        sched.drop(d.task)
                    continue
                if blk is None:
                    raise RuntimeError(f"the scheduler launched task {d.task}, which no CPU stream "
                                       "handed over (is this scheduler shared with another dispatcher?)")
                if d.chunk_begin != 0 or not d.is_final:
                    raise RuntimeError(f"the scheduler launched units [{d.chunk_begin}, {d.chunk_end}) "
                                       f"of task {d.task}; a CPU block runs whole")
                self._counts["launched"] += 1
                return blk
            if d.kind == "wait":
                self._counts["waits"] += 1
                self._cv.wait(max(d.wait_until_ns - sched.now_ns(), MIN_WAIT_NS) / 1e9)
                continue
            if self._ready:
                raise RuntimeError(f"the scheduler is idle with {len(self._ready)} blocks handed over")
            if self._closing:
                return None
            self._counts["idles"] += 1
            self._cv.wait()

    def _execute(self, blk: _Block) -> None:
        rec = blk.stream
        t0 = time.perf_counter_ns()
        try:
            blk.result = rec.process(blk.data, blk.final)
        except BaseException as exc:
            blk.error = exc
        measured = max(1, time.perf_counter_ns() - t0)
        with self._cv:
            try:
                if blk.error is None:
                    self.scheduler.complete(blk.task, measured)
                    self._counts["completed"] += 1
                else:
                    self.scheduler.drop(blk.task)
                    self._counts["failed"] += 1
            finally:
                blk.data = None  # the caller's array: keep no reference
                self._finish_locked(blk)

    # ------------------------------------------------------------------ figures, shutdown
    def stream_stats(self, stream: int) -> dict[str, Any]:
        """The scheduler's figures of a stream (final ones once it is detached)."""
        with self._cv:
            if stream in self._final_stats:
                return dict(self._final_stats[stream])
        return dict(self.scheduler.stream_stats(stream))

    def stats(self) -> dict[str, int]:
        """Blocks submitted, launched, completed, failed (dropped), cancelled; waits, idles."""
        with self._cv:
            return {**self._counts, "attached": len(self._streams), "pending": len(self._ready)}

    def close(self) -> None:
        """Run every block handed over, stop the thread, detach every engine. Idempotent."""
        with self._cv:
            if self._closed:
                return
            self._closing = True
            # No new block can come: streams with nothing handed over leave the scheduler now, so
            # their reservations do not hold back the blocks still to drain.
            for rec in [r for r in self._streams.values() if r.live == 0]:
                self._detach_locked(rec)
            self._cv.notify_all()
        if threading.current_thread() is not self._thread:
            self._thread.join()
        with self._cv:
            for rec in list(self._streams.values()):
                self._detach_locked(rec)
            self._closed = True

    @property
    def closed(self) -> bool:
        return self._closed

    def __enter__(self) -> "CpuDispatcher":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
