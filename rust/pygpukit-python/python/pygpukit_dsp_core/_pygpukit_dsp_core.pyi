"""Type stubs of the compiled module (Rust, PyO3). All times are int nanoseconds."""

from collections.abc import Iterable, Sequence
from typing import Literal, NotRequired, TypedDict, final, type_check_only

from typing_extensions import CapsuleType, Self

__version__: str
ABI_VERSION: int
SCHED_ABI_CAPSULE_NAME: str
SCHED_HANDLE_CAPSULE_NAME: str
POOL_HANDLE_CAPSULE_NAME: str

QosName = Literal["realtime", "throughput", "best_effort"]
TaskStateName = Literal["pending", "ready", "dispatched", "completed", "missed", "dropped", "cancelled"]

# The records the methods return, as dicts. They exist only for type checking (there is no
# such class at run time); tests/core/test_records.py checks them field by field against the
# keys the native side reports (``_record_fields()``) and returns.

@type_check_only
class LatencySummary(TypedDict):
    """Release-to-finish latency of finished blocks (ns), from an HDR histogram."""

    count: int
    """Values recorded."""
    min: int
    """Smallest value (exact); 0 when empty."""
    max: int
    """Largest value (exact; a clamped value counts as ``highest_ns``)."""
    mean: float
    """Mean (exact)."""
    p50: int
    """Median, to the histogram's precision."""
    p90: int
    """90th percentile."""
    p99: int
    """99th percentile."""
    p999: int
    """99.9th percentile."""
    clamped: int
    """Values above the histogram's range, recorded as its highest value."""

@type_check_only
class StreamStats(TypedDict):
    """Figures of one stream (``Scheduler.stream_stats``, ``unregister_stream``)."""

    id: int
    """The stream id ``register_stream`` returned."""
    name: str
    """Its unique name."""
    qos: QosName
    """Its QoS class."""
    admitted: bool
    """False while calibrating (its blocks run as best effort until ``admit``)."""
    period_ns: int | None
    """Realtime: the period of its blocks; None for the other classes."""
    deadline_ns: int | None
    """Relative deadline of a block; None if it has none."""
    min_rate_hz: float | None
    """Throughput: the blocks per second it reserves; None if it reserves none."""
    units_per_block: int
    """Independently launchable units of a block (chunks are unit ranges)."""
    cost_ns: int | None
    """Device time of one block used for admission and pacing (larger of declared and measured); None if unknown."""
    declared_cost_ns: int | None
    """The cost declared at registration; None if none."""
    measured_cost_ns: int | None
    """EWMA of measured block costs; None before the first measurement."""
    declared_latency_ns: int | None
    """Realtime: a block's own latency alone, declared at registration (the response bound's); None if not declared."""
    measured_cost_max_ns: int
    """Largest measured block cost; 0 before the first measurement."""
    cost_samples: int
    """Measurements folded into the EWMA."""
    utilisation: float
    """Share of the device it reserves at its current cost (0 if not admitted or reserving nothing)."""
    submitted: int
    """Blocks submitted."""
    completed: int
    """Blocks finished by their deadline (or without one)."""
    missed: int
    """Blocks finished after their deadline."""
    dropped: int
    """Blocks abandoned (``drop``)."""
    cancelled: int
    """Blocks withdrawn (``cancel``, ``unregister_stream``)."""
    live: int
    """Blocks not finished yet."""
    chunks: int
    """Launches (a realtime block is one)."""
    busy_ns: int
    """Device time reported at completion (the estimate for chunks not timed)."""
    achieved_rate_hz: float
    """Finished blocks per second between the first release and the last finish."""
    latency: LatencySummary
    """Release-to-finish latency of its finished blocks."""

@type_check_only
class SchedulerStats(TypedDict):
    """Figures of the whole scheduler (``Scheduler.stats``)."""

    now_ns: int
    """The scheduler's clock."""
    u_max: float
    """The realtime utilisation bound."""
    realtime_utilisation: float
    """Sum of cost / period over admitted realtime streams, at current costs."""
    throughput_reserved: float
    """Sum of cost * min_rate over admitted throughput streams."""
    over_bound: bool
    """Realtime costs have grown past ``u_max`` since admission."""
    launches: int
    """``next`` calls that launched a chunk."""
    waits: int
    """``next`` calls that answered wait."""
    idles: int
    """``next`` calls that answered idle."""
    paced: int
    """``next`` calls where pacing held every candidate chunk back."""
    live_tasks: int
    """Tasks not finished yet."""
    in_flight: int
    """Chunks launched and not completed."""
    device_free_estimate_ns: int
    """When the device is expected to finish what was launched."""
    streams: list[StreamStats]
    """Every registered stream."""

@type_check_only
class SchedulerConfig(TypedDict):
    """The configuration a scheduler was created with (``Scheduler.config``)."""

    u_max: float
    """Realtime utilisation bound, (0, 1]."""
    quantum_ns: int
    """Target device time of one non-realtime chunk."""
    safety_margin_ns: int
    """Slack kept before realtime deadlines by pacing and admission."""
    ewma_alpha: float
    """Weight of a new cost measurement, (0, 1]."""
    max_chunks_in_flight: int
    """Lookahead: chunks of one non-realtime block on the device at once."""
    dispatcher_busy_cap: float
    """The device model: the most of its time the dispatcher's lock may be held by realtime blocks, (0, 1]."""
    dispatcher_hold_ns: int
    """The device model: how long a block may find the dispatcher's lock held (0: no hold known)."""
    clock: Literal["monotonic", "simulated"]
    """The clock it runs on."""

@type_check_only
class AdmissionFigures(TypedDict):
    """The figures behind a refusal (``AdmissionRefused.figures``; see docs/scheduler.md)."""

    stream_utilisation: float
    """The stream's share (response bound: its cost / the binding deadline)."""
    current_total: float
    """The admitted total before it (response bound: (cost sum + margin) / deadline)."""
    bound: float
    """``u_max``, or 1.0 for the device's capacity."""
    stream_cost_ns: int
    """The stream's block cost."""
    cost_sum_ns: int
    """Sum of the admitted realtime streams' block costs (without the stream's own)."""
    safety_margin_ns: int
    """The scheduler's safety margin."""
    shortest_deadline_ns: int
    """Response bound: the binding stream's (least deadline - latency excess)."""
    latency_excess_ns: int
    """Response bound: that stream's own latency beyond its cost."""
    phased_phase_ns: NotRequired[int]
    """Response bound with release phases (streams of one period that declare phase_ns): the binding stream's phase."""
    phased_period_ns: NotRequired[int]
    """Its period."""
    phased_cost_ns: NotRequired[int]
    """Its cost."""
    phased_ahead_ns: NotRequired[int]
    """The other streams' work that can be in front of its block."""
    dispatcher_share: NotRequired[float]
    """Where the device model counted the dispatcher: the share of its time its lock may be held (0 for dispatcher_hold)."""
    dispatcher_hold_ns: NotRequired[int]
    """The hold behind that share."""
    dispatch_ns: NotRequired[int]
    """The stream's dispatcher work per block as measured (0: not counted for it)."""
    dispatch_counted_ns: NotRequired[int]
    """That work as counted against u_max."""
    tail_reach_ns: NotRequired[int]
    """latency_tail: how far the stream's latency from release reaches (its deadline: shortest_deadline_ns)."""

@type_check_only
class Admitted(TypedDict):
    """What ``Scheduler.admit`` did: the totals with the stream included."""

    stream_utilisation: float
    """The stream's reserved share of the device."""
    realtime_total: float
    """Sum of cost / period over admitted realtime streams."""
    reserved_total: float
    """Realtime plus reserved throughput share."""

@type_check_only
class StreamAdmission(TypedDict):
    """What admission counts for one stream (``Scheduler.stream_admission``; docs/scheduler.md)."""

    stream: str
    """Its name."""
    cost_ns: int | None
    """The cost it is admitted and paced with: its device time or its dispatcher work as counted, the larger."""
    device_cost_ns: int | None
    """Its device time per block (declared, or measured when larger)."""
    dispatch_ns: int | None
    """Its dispatcher work per block as measured (None: not counted)."""
    dispatch_counted_ns: int | None
    """That work as counted against u_max at the dispatcher share."""
    dispatcher_share: float
    """The share of its time the device's dispatcher may be busy, at its shortest realtime deadline."""
    tail_reach_ns: int | None
    """How far its latency from release reaches, as measured (None: not measured)."""

@type_check_only
class BlockInfo(TypedDict):
    """One block of the pool (``MemoryPoolPolicy.block_info``)."""

    block: int
    """Its id."""
    bytes: int
    """Its size (its class size)."""
    requested: int
    """Bytes its current (or last) user asked for."""
    state: Literal["in_use", "cached"]
    """In use, or cached for reuse."""

@type_check_only
class PoolStats(TypedDict):
    """Figures of the pool (``MemoryPoolPolicy.stats``)."""

    hits: int
    """Requests served by a cached block."""
    misses: int
    """Requests that needed a new allocation."""
    evictions: int
    """Cached blocks evicted (to stay under a budget, or by ``trim``)."""
    bytes_in_use: int
    """Bytes of the blocks in use (class sizes)."""
    bytes_cached: int
    """Bytes of the cached blocks."""
    blocks_in_use: int
    """Blocks in use."""
    blocks_cached: int
    """Blocks cached."""
    bytes_requested_in_use: int
    """Bytes the in-use blocks' users asked for (vs ``bytes_in_use``: the rounding waste)."""
    peak_bytes_in_use: int
    """Most bytes in use at once."""
    peak_bytes_reserved: int
    """Most bytes in use + cached at once: the most device memory the pool held."""
    cache_budget_bytes: int
    """Most idle bytes kept cached."""
    device_budget_bytes: int | None
    """Cap on in-use + cached bytes; None when unlimited."""
    to_free: int
    """Evicted ids the C side has not taken yet (``pool_take_to_free``)."""

class SchedulerError(RuntimeError):
    """A scheduler call failed (unknown stream or task, duplicate name, blocks out of order...)."""

class AdmissionRefused(SchedulerError):
    """A stream was not admitted. ``reason`` is one of utilisation_bound, device_capacity,
    response_bound, dispatcher_hold, latency_tail; the figures say why (see docs/scheduler.md)."""

    stream: str
    reason: Literal["utilisation_bound", "device_capacity", "response_bound", "dispatcher_hold", "latency_tail"]
    stream_utilisation: float
    current_total: float
    bound: float
    stream_cost_ns: int
    cost_sum_ns: int
    safety_margin_ns: int
    shortest_deadline_ns: int  # response bound: the binding stream's (least deadline - latency excess)
    latency_excess_ns: int     # response bound: that stream's own latency beyond its cost
    figures: AdmissionFigures

class IllegalTransition(SchedulerError):
    task: int
    from_state: TaskStateName
    to_state: TaskStateName

class PoolError(RuntimeError):
    """A memory-pool policy call failed (unknown block, double release)."""

class PoolBudgetExceeded(PoolError):
    requested: int
    in_use: int
    budget: int

@final
class LatencyHistogram:
    """HDR latency histogram in ns: fixed relative precision, exact count/min/max/mean.

    Values above ``highest_ns`` are recorded as ``highest_ns`` and counted in ``clamped``.
    """

    def __new__(
        cls, lowest_ns: int = 1, highest_ns: int = 3_600_000_000_000, significant_figures: int = 3
    ) -> Self: ...
    def record(self, ns: int) -> None: ...
    def record_n(self, ns: int, count: int) -> None: ...
    def record_many(self, values: Iterable[int]) -> None: ...
    def percentile(self, p: float) -> int:
        """Nearest-rank value at percentile ``p`` (0..100); 0 when empty."""
    @property
    def count(self) -> int: ...
    @property
    def min(self) -> int: ...
    @property
    def max(self) -> int: ...
    @property
    def mean(self) -> float: ...
    @property
    def clamped(self) -> int: ...
    @property
    def lowest_ns(self) -> int: ...
    @property
    def highest_ns(self) -> int: ...
    @property
    def significant_figures(self) -> int: ...
    def reset(self) -> None: ...
    def merge(self, other: LatencyHistogram) -> None: ...
    def summary(self) -> LatencySummary: ...
    def __len__(self) -> int: ...

@final
class Decision:
    """What to do now: launch a chunk, wait until a time, or idle."""

    kind: Literal["launch", "wait", "idle"]
    task: int | None
    stream: int | None
    chunk_begin: int | None
    chunk_end: int | None
    is_final: bool | None
    deadline_ns: int | None
    est_cost_ns: int | None
    wait_until_ns: int | None

@final
class Completion:
    task: int
    state: Literal["dispatched", "ready", "completed", "missed"]
    latency_ns: int | None
    remaining_units: int

@final
class Scheduler:
    """QoS scheduler: admission, EDF dispatch, pacing, accounting. Thread-safe.

    ``clock="simulated"`` starts a clock at ``start_ns`` that moves only with
    ``advance``/``set_time``; the default reads CLOCK_MONOTONIC.
    ``max_chunks_in_flight`` (>= 1) is the lookahead: how many chunks of one non-realtime
    block may be launched before the oldest completes; ``complete`` retires the oldest.
    ``dispatcher_busy_cap`` and ``dispatcher_hold_ns`` are admission's model of the dispatcher
    (docs/scheduler.md, "The device model"): the most of its time its lock may be held by
    realtime blocks, and how long a block may find it held; the defaults (1.0, 0) leave the
    queue's checks alone.
    """

    def __new__(
        cls,
        *,
        u_max: float = 0.9,
        quantum_ns: int = 250_000,
        safety_margin_ns: int = 50_000,
        ewma_alpha: float = 0.2,
        clock: Literal["monotonic", "simulated"] = "monotonic",
        start_ns: int = 0,
        max_chunks_in_flight: int = 2,
        dispatcher_busy_cap: float = 1.0,
        dispatcher_hold_ns: int = 0,
    ) -> Self: ...
    @property
    def config(self) -> SchedulerConfig: ...
    @property
    def simulated(self) -> bool: ...
    def now_ns(self) -> int: ...
    def advance(self, delta_ns: int) -> int: ...
    def set_time(self, t_ns: int) -> int: ...
    def register_stream(
        self,
        name: str,
        qos: QosName,
        *,
        period_ns: int | None = None,
        deadline_ns: int | None = None,
        min_rate_hz: float | None = None,
        cost_ns: int | None = None,
        latency_ns: int | None = None,
        units_per_block: int = 1,
        phase_ns: int | None = None,
        dispatch_ns: int | None = None,
        tail_reach_ns: int | None = None,
    ) -> int:
        """Register a stream; returns its id. Raises AdmissionRefused when it does not fit.

        ``cost_ns``: device time of one block (events); ``latency_ns`` (realtime): one block's
        own latency alone, release to done, when more than its cost; the response bound adds the
        excess to the stream's own wait (default: the cost). ``phase_ns`` (realtime, below the
        period): the offset within its period at which its blocks are released on a clock the
        other streams share; streams of one period that declare phases are bounded by the work
        that can be in front of each block, not by every stream's block at once (default: unknown).
        ``dispatch_ns`` (realtime): the dispatcher's serial work per block, measured among the
        device's streams; the stream is admitted by the larger of its cost and that work as
        counted against u_max at the dispatcher share. ``tail_reach_ns`` (realtime): how far its
        latency from release reaches, measured; ``check_latency_tails`` compares it with the
        deadline."""
    def unregister_stream(self, stream: int) -> StreamStats: ...
    def stream_id(self, name: str) -> int | None: ...
    def admit(self, stream: int) -> Admitted: ...
    def check_dispatcher_hold(self) -> float:
        """The dispatcher share at the admitted realtime streams' shortest deadline; AdmissionRefused
        (dispatcher_hold) when the deadline is within the hold."""
    def check_latency_tails(self) -> None:
        """AdmissionRefused (latency_tail) naming the last admitted stream whose tail_reach_ns passes its deadline."""
    def dispatcher_share(self, deadline_ns: int | None = None) -> float:
        """min(dispatcher_busy_cap, 1 - dispatcher_hold_ns / deadline), at least 0 (None: the admitted streams' shortest)."""
    def counted_dispatch_ns(self, dispatch_ns: int, deadline_ns: int | None = None) -> int:
        """``dispatch_ns`` as counted against u_max at that share; ValueError where the share is 0."""
    def counted_cost_ns(self, cost_ns: int, dispatch_ns: int | None = None, deadline_ns: int | None = None) -> int:
        """The larger of ``cost_ns`` and ``dispatch_ns`` as counted at that share (None: ``cost_ns``); ValueError where the share is 0."""
    def stream_admission(self, stream: int) -> StreamAdmission: ...
    def update_cost(self, stream: int, measured_ns: int) -> int: ...
    def calibrate(self, stream: int, samples_ns: Sequence[int]) -> int: ...
    def submit(self, stream: int, arrival_ns: int | None = None) -> tuple[int, int | None]: ...
    def next(self, now_ns: int | None = None) -> Decision: ...
    def complete(self, task: int, measured_cost_ns: int | None, finish_ns: int | None = None) -> Completion:
        """Retire the task's oldest chunk in flight. ``measured_cost_ns`` None: the chunk was not
        timed (its estimate stands in for the device's busy time; the cost model learns nothing)."""
        ...
    def drop(self, task: int) -> None: ...
    def cancel(self, task: int) -> None: ...
    def task_state(self, task: int) -> TaskStateName | None: ...
    def stream_stats(self, stream: int) -> StreamStats: ...
    def stats(self) -> SchedulerStats: ...
    def capsule(self) -> CapsuleType:
        """``gk_sched*`` in a capsule named ``pygpukit_dsp_core._sched_handle_v1``."""

@final
class Grant:
    block: int
    bytes: int
    reused: bool
    evicted: list[int]

@final
class MemoryPoolPolicy:
    """Device memory-pool policy: size classes, reuse, LRU eviction. Tracks ids only."""

    def __new__(
        cls,
        *,
        cache_budget_bytes: int = 268_435_456,
        device_budget_bytes: int | None = None,
        min_block_bytes: int = 256,
        steps_per_doubling: int = 4,
    ) -> Self: ...
    def class_size(self, size: int) -> int: ...
    def acquire(self, size: int) -> Grant: ...
    def release(self, block: int) -> list[int]: ...
    def discard(self, block: int) -> None: ...
    def trim(self, target_cached_bytes: int = 0) -> list[int]: ...
    def block_info(self, block: int) -> BlockInfo | None: ...
    def cached_lru_order(self) -> list[int]: ...
    def stats(self) -> PoolStats: ...
    def capsule(self) -> CapsuleType:
        """``gk_pool*`` in a capsule named ``pygpukit_dsp_core._pool_handle_v1``."""

def sched_abi_capsule() -> CapsuleType:
    """The ``gk_sched_abi_v1`` function table, in a capsule named ``pygpukit_dsp_core._sched_abi_v1``."""

def _record_fields() -> dict[str, dict[str, bool]]:
    """Each record's keys in order, mapped to whether the key is always present (the drift test's reference)."""
