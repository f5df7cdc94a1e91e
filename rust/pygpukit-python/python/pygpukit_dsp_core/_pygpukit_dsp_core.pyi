"""Type stubs of the compiled module (Rust, PyO3). All times are int nanoseconds."""

from collections.abc import Iterable, Sequence
from typing_extensions import CapsuleType
from typing import Literal, NotRequired, TypedDict, final

__version__: str
ABI_VERSION: int
SCHED_ABI_CAPSULE_NAME: str
SCHED_HANDLE_CAPSULE_NAME: str
POOL_HANDLE_CAPSULE_NAME: str

QosName = Literal["realtime", "throughput", "best_effort"]
TaskStateName = Literal["pending", "ready", "dispatched", "completed", "missed", "dropped", "cancelled"]

class LatencySummary(TypedDict):
    count: int
    min: int
    max: int
    mean: float
    p50: int
    p90: int
    p99: int
    p999: int
    clamped: int

class StreamStats(TypedDict):
    id: int
    name: str
    qos: QosName
    admitted: bool
    period_ns: int | None
    deadline_ns: int | None
    min_rate_hz: float | None
    units_per_block: int
    cost_ns: int | None
    declared_cost_ns: int | None
    measured_cost_ns: int | None
    declared_latency_ns: int | None
    measured_cost_max_ns: int
    cost_samples: int
    utilisation: float
    submitted: int
    completed: int
    missed: int
    dropped: int
    cancelled: int
    live: int
    chunks: int
    busy_ns: int
    achieved_rate_hz: float
    latency: LatencySummary

class SchedulerStats(TypedDict):
    now_ns: int
    u_max: float
    realtime_utilisation: float
    throughput_reserved: float
    over_bound: bool
    launches: int
    waits: int
    idles: int
    paced: int
    live_tasks: int
    in_flight: int
    device_free_estimate_ns: int
    streams: list[StreamStats]

class SchedulerConfig(TypedDict):
    u_max: float
    quantum_ns: int
    safety_margin_ns: int
    ewma_alpha: float
    max_chunks_in_flight: int
    clock: Literal["monotonic", "simulated"]

class AdmissionFigures(TypedDict):
    stream_utilisation: float
    current_total: float
    bound: float
    stream_cost_ns: int
    cost_sum_ns: int
    safety_margin_ns: int
    shortest_deadline_ns: int  # response bound: the binding stream's (least deadline - latency excess)
    latency_excess_ns: int     # response bound: that stream's own latency beyond its cost
    # the response bound with release phases (streams of one period that declare phase_ns):
    phased_phase_ns: NotRequired[int]  # the binding stream's phase,
    phased_period_ns: NotRequired[int]  # its period,
    phased_cost_ns: NotRequired[int]  # its cost,
    phased_ahead_ns: NotRequired[int]  # and the other streams' work that can be in front of its block

class Admitted(TypedDict):
    stream_utilisation: float
    realtime_total: float
    reserved_total: float

class BlockInfo(TypedDict):
    block: int
    bytes: int
    requested: int
    state: Literal["in_use", "cached"]

class PoolStats(TypedDict):
    hits: int
    misses: int
    evictions: int
    bytes_in_use: int
    bytes_cached: int
    blocks_in_use: int
    blocks_cached: int
    bytes_requested_in_use: int
    peak_bytes_in_use: int
    peak_bytes_reserved: int
    cache_budget_bytes: int
    device_budget_bytes: int | None
    to_free: int

class SchedulerError(RuntimeError):
    """A scheduler call failed (unknown stream or task, duplicate name, blocks out of order...)."""

class AdmissionRefused(SchedulerError):
    """A stream was not admitted. ``reason`` is one of utilisation_bound, device_capacity,
    response_bound; the figures say why (see docs/scheduler.md)."""

    stream: str
    reason: Literal["utilisation_bound", "device_capacity", "response_bound"]
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

class LatencyHistogram:
    """HDR latency histogram in ns: fixed relative precision, exact count/min/max/mean.

    Values above ``highest_ns`` are recorded as ``highest_ns`` and counted in ``clamped``.
    """

    def __init__(
        self, lowest_ns: int = 1, highest_ns: int = 3_600_000_000_000, significant_figures: int = 3
    ) -> None: ...
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
    """

    def __init__(
        self,
        *,
        u_max: float = 0.9,
        quantum_ns: int = 250_000,
        safety_margin_ns: int = 50_000,
        ewma_alpha: float = 0.2,
        clock: Literal["monotonic", "simulated"] = "monotonic",
        start_ns: int = 0,
        max_chunks_in_flight: int = 2,
    ) -> None: ...
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
    ) -> int:
        """Register a stream; returns its id. Raises AdmissionRefused when it does not fit.

        ``cost_ns``: device time of one block (events); ``latency_ns`` (realtime): one block's
        own latency alone, release to done, when more than its cost; the response bound adds the
        excess to the stream's own wait (default: the cost). ``phase_ns`` (realtime, below the
        period): the offset within its period at which its blocks are released on a clock the
        other streams share; streams of one period that declare phases are bounded by the work
        that can be in front of each block, not by every stream's block at once (default: unknown)."""
    def unregister_stream(self, stream: int) -> StreamStats: ...
    def stream_id(self, name: str) -> int | None: ...
    def admit(self, stream: int) -> Admitted: ...
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

    def __init__(
        self,
        *,
        cache_budget_bytes: int = 268_435_456,
        device_budget_bytes: int | None = None,
        min_block_bytes: int = 256,
        steps_per_doubling: int = 4,
    ) -> None: ...
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
