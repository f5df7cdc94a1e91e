//! Every constant and `#[repr(C)]` struct of the C ABI, version 1, and the table type.
//!
//! This file is the one definition: cbindgen generates `native/include/gk/sched_abi.h`
//! from it (with the opaque handle types of `handles.rs`; settings and the header's
//! overview in `rust/pygpukit-python/cbindgen.toml`), and `capi::header` fails
//! `cargo test` when the committed header differs. The doc comments here are the
//! header's comments. Regenerate after a change:
//!
//! ```text
//! cd rust && GK_WRITE_ABI_HEADER=1 cargo test -p pygpukit-python --lib capi::header
//! ```
//!
//! Layout rules: structs only grow at the end (`struct_size` versioning), and the table's
//! field order is the ABI (append only, never reorder).

use std::ffi::{c_char, CStr};

use super::handles::{PoolHandle, SchedHandle};

/// Version of the table; a caller checks `abi_version` against it.
pub const GK_SCHED_ABI_VERSION: u32 = 1u32;
// Capsule names (`GK_*_CAPSULE_NAME` in the header: cbindgen has no C-string constants, so
// `capi::header` writes these three defines from the values here).
/// Name of the capsule holding the `gk_sched_abi_v1` table.
pub const GK_SCHED_ABI_CAPSULE_NAME: &CStr = c"pygpukit_dsp_core._sched_abi_v1";
/// Name of the capsule holding a `gk_sched*` (`Scheduler.capsule()`).
pub const GK_SCHED_HANDLE_CAPSULE_NAME: &CStr = c"pygpukit_dsp_core._sched_handle_v1";
/// Name of the capsule holding a `gk_pool*` (`MemoryPoolPolicy.capsule()`).
pub const GK_POOL_HANDLE_CAPSULE_NAME: &CStr = c"pygpukit_dsp_core._pool_handle_v1";

/// As a time argument: use the scheduler's clock.
pub const GK_TIME_NOW: u64 = u64::MAX;
/// As a deadline or time result: none.
pub const GK_NO_TIME: u64 = u64::MAX;
/// As complete()'s measured_cost_ns: the chunk was not timed (its estimate stands in for the
/// device's busy time; the stream's cost model learns nothing from it).
pub const GK_COST_UNMEASURED: u64 = u64::MAX;

// ---- status codes -------------------------------------------------------------------------

/// Success.
pub const GK_OK: i32 = 0;
/// A parameter out of range; last_error() says which.
pub const GK_ERR_INVALID_ARGUMENT: i32 = -1;
/// No registered stream has this id.
pub const GK_ERR_UNKNOWN_STREAM: i32 = -2;
/// No live or recently finished task has this id.
pub const GK_ERR_UNKNOWN_TASK: i32 = -3;
/// A task state change the state machine does not allow, e.g. complete() on a task that is
/// not dispatched.
pub const GK_ERR_ILLEGAL_TRANSITION: i32 = -4;
/// The stream was not admitted; the figures are in gk_admission_refusal.
pub const GK_ERR_ADMISSION_REFUSED: i32 = -5;
/// A stream of this name is already registered.
pub const GK_ERR_DUPLICATE_STREAM: i32 = -6;
/// admit_stream() before any cost is known.
pub const GK_ERR_NO_COST_SAMPLE: i32 = -7;
/// A block released before the stream's previous one.
pub const GK_ERR_OUT_OF_ORDER: i32 = -8;
/// The pool knows no block with this id.
pub const GK_ERR_UNKNOWN_BLOCK: i32 = -9;
/// pool_release_block() on a block that is not in use (released twice).
pub const GK_ERR_BLOCK_NOT_IN_USE: i32 = -10;
/// In-use blocks alone exceed the device budget.
pub const GK_ERR_OVER_BUDGET: i32 = -11;
/// A required pointer argument is NULL.
pub const GK_ERR_NULL_POINTER: i32 = -12;
/// An input struct's struct_size is smaller than this version's struct.
pub const GK_ERR_STRUCT_SIZE: i32 = -13;
/// An earlier internal panic left the handle unusable.
pub const GK_ERR_POISONED: i32 = -14;
/// sched_set_time() on a scheduler with a real clock.
pub const GK_ERR_WRONG_CLOCK: i32 = -15;
/// Internal error caught at the boundary.
pub const GK_ERR_PANIC: i32 = -99;

// ---- enumerations -------------------------------------------------------------------------

/// QoS class: periodic blocks with deadlines, admitted against u_max, run first (EDF).
pub const GK_QOS_REALTIME: i32 = 0;
/// QoS class: chunks paced around realtime work, optionally with a reserved minimum rate.
pub const GK_QOS_THROUGHPUT: i32 = 1;
/// QoS class: chunks paced around realtime work, nothing reserved.
pub const GK_QOS_BEST_EFFORT: i32 = 2;

/// gk_sched_config.clock: CLOCK_MONOTONIC (std::chrono::steady_clock on Linux).
pub const GK_CLOCK_MONOTONIC: u32 = 0u32;
/// gk_sched_config.clock: a clock that moves only with sched_set_time().
pub const GK_CLOCK_SIMULATED: u32 = 1u32;

/// Nothing to launch until a submit or a completion.
pub const GK_DECISION_IDLE: i32 = 0;
/// Launch units [chunk_begin, chunk_end) of task.
pub const GK_DECISION_LAUNCH: i32 = 1;
/// Nothing may launch before wait_until_ns (or a submit/completion).
pub const GK_DECISION_WAIT: i32 = 2;

/// Task state: submitted, its release time not reached yet.
pub const GK_TASK_PENDING: i32 = 0;
/// Task state: released, units left to launch.
pub const GK_TASK_READY: i32 = 1;
/// Task state: chunks launched and in flight.
pub const GK_TASK_DISPATCHED: i32 = 2;
/// Task state: finished by its deadline (or without one).
pub const GK_TASK_COMPLETED: i32 = 3;
/// Task state: finished after its deadline.
pub const GK_TASK_MISSED: i32 = 4;
/// Task state: abandoned (drop_task), counted as a drop.
pub const GK_TASK_DROPPED: i32 = 5;
/// Task state: withdrawn (cancel_task or unregister_stream), not counted as a drop.
pub const GK_TASK_CANCELLED: i32 = 6;

/// Refusal: sum cost/period would exceed u_max.
pub const GK_REFUSED_UTILISATION_BOUND: i32 = 1;
/// Refusal: realtime + reserved throughput would exceed 1.
pub const GK_REFUSED_DEVICE_CAPACITY: i32 = 2;
/// Refusal: sum of realtime costs + margin > shortest deadline.
pub const GK_REFUSED_RESPONSE_BOUND: i32 = 3;
/// Refusal: the shortest realtime deadline is within the dispatcher's hold, where its work counts.
pub const GK_REFUSED_DISPATCHER_HOLD: i32 = 4;
/// Refusal: a measured latency tail reaches past its deadline (not reached through this ABI).
pub const GK_REFUSED_LATENCY_TAIL: i32 = 5;

// ---- scheduler structs --------------------------------------------------------------------

/// Configuration of sched_create(). sizeof 56 (48 + 4 + padding).
#[repr(C)]
#[derive(Clone, Copy, Debug)]
pub struct GkSchedConfig {
    /// sizeof(gk_sched_config); any value >= GK_SCHED_CONFIG_V1_SIZE is accepted.
    pub struct_size: u32,
    /// GK_CLOCK_MONOTONIC or GK_CLOCK_SIMULATED.
    pub clock: u32,
    /// Realtime utilisation bound, (0, 1]; e.g. 0.9.
    pub u_max: f64,
    /// Target device time of one non-realtime chunk; e.g. 250000.
    pub quantum_ns: u64,
    /// Slack kept before realtime deadlines; e.g. 50000.
    pub safety_margin_ns: u64,
    /// Weight of a new cost measurement, (0, 1]; e.g. 0.2.
    pub ewma_alpha: f64,
    /// Start time of a simulated clock.
    pub simulated_start_ns: u64,
    /// Appended after v1: read only when struct_size covers it, else the default. Lookahead:
    /// chunks of one non-realtime task on the device at once; 1 = the next after the previous
    /// completed; 0 = the default (2).
    pub max_chunks_in_flight: u32,
}

/// sizeof(gk_sched_config) before max_chunks_in_flight: the smallest struct_size accepted;
/// fields past struct_size are not read and take their defaults.
pub const GK_SCHED_CONFIG_V1_SIZE: u32 = 48u32;

/// A stream to register_stream().
#[repr(C)]
#[derive(Clone, Copy, Debug)]
pub struct GkStreamSpec {
    /// sizeof(gk_stream_spec).
    pub struct_size: u32,
    /// GK_QOS_*.
    pub qos: i32,
    /// UTF-8, NUL-terminated, unique among registered streams.
    pub name: *const c_char,
    /// Realtime: block_size / sample_rate; otherwise ignored.
    pub period_ns: u64,
    /// Relative; 0 = the period (realtime) or none (others).
    pub deadline_ns: u64,
    /// Throughput: blocks/s to reserve; 0 = no reservation.
    pub min_rate_hz: f64,
    /// Declared device time of one block; 0 = measure it.
    pub cost_ns: u64,
    /// >= 1: independently launchable units (chunks are unit ranges).
    pub units_per_block: u32,
    /// Set to 0.
    pub reserved0: u32,
}

/// Why a stream was not admitted, filled on GK_ERR_ADMISSION_REFUSED.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct GkAdmissionRefusal {
    /// GK_REFUSED_*.
    pub reason: i32,
    pub reserved0: u32,
    /// The stream's share (response bound: cost / shortest deadline).
    pub stream_utilisation: f64,
    /// Admitted total before it (response bound: (sum + margin) / deadline).
    pub current_total: f64,
    /// u_max, or 1.0.
    pub bound: f64,
    pub stream_cost_ns: u64,
    /// Sum of admitted realtime block costs.
    pub cost_sum_ns: u64,
    pub safety_margin_ns: u64,
    /// Including the stream's own.
    pub shortest_deadline_ns: u64,
}

/// The answer of next(): launch a chunk, wait, or idle.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct GkDecision {
    /// GK_DECISION_*.
    pub kind: i32,
    /// LAUNCH: the task's stream.
    pub stream: u32,
    /// LAUNCH: task id; else 0.
    pub task: u64,
    /// LAUNCH: first unit.
    pub chunk_begin: u32,
    /// LAUNCH: one past the last unit.
    pub chunk_end: u32,
    /// LAUNCH: absolute deadline or GK_NO_TIME.
    pub deadline_ns: u64,
    /// LAUNCH: estimated device time of the chunk.
    pub est_cost_ns: u64,
    /// WAIT: earliest time anything may launch; else GK_NO_TIME.
    pub wait_until_ns: u64,
    /// LAUNCH: 1 if this chunk finishes the block.
    pub is_final: u32,
    pub reserved0: u32,
}

/// What complete() did.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct GkCompletion {
    /// GK_TASK_DISPATCHED (a later chunk still in flight), GK_TASK_READY (none in flight,
    /// units remain), GK_TASK_COMPLETED or GK_TASK_MISSED.
    pub state: i32,
    pub remaining_units: u32,
    /// Release-to-finish once finished; else GK_NO_TIME.
    pub latency_ns: u64,
}

/// Release-to-finish latency of a stream's finished blocks (an HDR histogram's summary).
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct GkLatencySummary {
    pub count: u64,
    pub min_ns: u64,
    pub max_ns: u64,
    pub p50_ns: u64,
    pub p90_ns: u64,
    pub p99_ns: u64,
    pub p999_ns: u64,
    /// Values above the histogram range, recorded as its highest value.
    pub clamped: u64,
    pub mean_ns: f64,
}

/// Figures of one stream (stream_stats()).
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct GkStreamStats {
    pub stream: u32,
    /// GK_QOS_*.
    pub qos: i32,
    /// 0 while calibrating (runs as best effort).
    pub admitted: u32,
    pub units_per_block: u32,
    /// GK_NO_TIME unless realtime.
    pub period_ns: u64,
    /// Relative; GK_NO_TIME if none.
    pub deadline_ns: u64,
    /// 0 if none.
    pub min_rate_hz: f64,
    /// Used for admission and pacing; GK_NO_TIME if unknown.
    pub cost_ns: u64,
    /// GK_NO_TIME if not declared.
    pub declared_cost_ns: u64,
    /// EWMA; GK_NO_TIME if not measured yet.
    pub measured_cost_ns: u64,
    pub measured_cost_max_ns: u64,
    pub cost_samples: u64,
    /// Reserved share of the device.
    pub utilisation: f64,
    pub submitted: u64,
    /// Finished by the deadline (or without one).
    pub completed: u64,
    /// Finished after the deadline.
    pub missed: u64,
    pub dropped: u64,
    pub cancelled: u64,
    /// Tasks not finished yet.
    pub live: u64,
    /// Launches.
    pub chunks: u64,
    /// Measured device time.
    pub busy_ns: u64,
    /// Finished blocks per second.
    pub achieved_rate_hz: f64,
    pub latency: GkLatencySummary,
}

/// Figures of the whole scheduler (stats()).
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct GkSchedStats {
    pub now_ns: u64,
    pub u_max: f64,
    pub realtime_utilisation: f64,
    pub throughput_reserved: f64,
    /// Realtime costs grew past u_max after admission.
    pub over_bound: u32,
    pub streams: u32,
    pub launches: u64,
    pub waits: u64,
    pub idles: u64,
    /// Decisions where pacing held every candidate chunk back.
    pub paced: u64,
    pub live_tasks: u64,
    pub in_flight: u64,
    pub device_free_estimate_ns: u64,
}

// ---- pool structs -------------------------------------------------------------------------

/// Configuration of pool_create().
#[repr(C)]
#[derive(Clone, Copy, Debug)]
pub struct GkPoolConfig {
    /// sizeof(gk_pool_config).
    pub struct_size: u32,
    /// Size classes per power of two: 1, 2, 4 (default), ... 64.
    pub steps_per_doubling: u32,
    /// Smallest class, a power of two, e.g. 256.
    pub min_block_bytes: u64,
    /// Most idle bytes kept cached.
    pub cache_budget_bytes: u64,
    /// Cap on in-use + cached bytes; 0 = unlimited.
    pub device_budget_bytes: u64,
}

/// The answer of pool_acquire_block().
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct GkPoolGrant {
    /// Id of the block to use.
    pub block: u64,
    /// Its size (the request rounded up to its class).
    pub bytes: u64,
    /// 1: a cached block, its device memory is already allocated; 0: allocate `bytes` for the
    /// new id, after freeing the to_free ids.
    pub reused: u32,
    /// Ids waiting in the pool's free queue (take them with pool_take_to_free).
    pub to_free: u32,
}

/// Figures of a pool (pool_stats()).
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct GkPoolStats {
    pub hits: u64,
    pub misses: u64,
    pub evictions: u64,
    pub bytes_in_use: u64,
    pub bytes_cached: u64,
    pub blocks_in_use: u64,
    pub blocks_cached: u64,
    pub bytes_requested_in_use: u64,
    pub peak_bytes_in_use: u64,
    pub peak_bytes_reserved: u64,
    pub cache_budget_bytes: u64,
    /// 0 = unlimited.
    pub device_budget_bytes: u64,
    /// Evicted ids not taken yet.
    pub to_free: u64,
}

// ---- the table ----------------------------------------------------------------------------

/// The function table, exported once in the GK_SCHED_ABI_CAPSULE_NAME capsule. Field order is
/// the ABI: append only, never reorder. Out-parameters documented as nullable may be NULL.
#[repr(C)]
pub struct GkSchedAbiV1 {
    /// GK_SCHED_ABI_VERSION.
    pub abi_version: u32,
    /// sizeof(gk_sched_abi_v1) of the provider; >= yours.
    pub struct_size: u32,
    /// Message of the last failed call on this thread, NUL-terminated into buf (truncated to
    /// cap - 1 bytes). Returns the full message length; 0 if none. buf may be NULL to query it.
    pub last_error: unsafe extern "C" fn(buf: *mut c_char, cap: usize) -> usize,
    /// A new scheduler, one reference.
    pub sched_create: unsafe extern "C" fn(config: *const GkSchedConfig, out: *mut *mut SchedHandle) -> i32,
    /// Adds a reference.
    pub sched_retain: unsafe extern "C" fn(s: *mut SchedHandle),
    /// Drops a reference; the last one frees the scheduler.
    pub sched_release: unsafe extern "C" fn(s: *mut SchedHandle),
    /// The scheduler's clock.
    pub sched_now_ns: unsafe extern "C" fn(s: *mut SchedHandle) -> u64,
    /// Simulated clock only (GK_ERR_WRONG_CLOCK otherwise); never backwards.
    pub sched_set_time: unsafe extern "C" fn(s: *mut SchedHandle, t_ns: u64) -> i32,
    /// Registers a stream; GK_ERR_ADMISSION_REFUSED fills out_refusal (nullable).
    pub register_stream: unsafe extern "C" fn(
        s: *mut SchedHandle,
        spec: *const GkStreamSpec,
        out_stream: *mut u32,
        out_refusal: *mut GkAdmissionRefusal,
    ) -> i32,
    /// Removes a stream; cancels its live tasks.
    pub unregister_stream: unsafe extern "C" fn(s: *mut SchedHandle, stream: u32) -> i32,
    /// Admits a calibrating stream with its measured cost; out_refusal is nullable.
    pub admit_stream:
        unsafe extern "C" fn(s: *mut SchedHandle, stream: u32, out_refusal: *mut GkAdmissionRefusal) -> i32,
    /// Folds a measured whole-block cost into the EWMA; out_cost_ns (nullable) gets the cost now used.
    pub update_cost:
        unsafe extern "C" fn(s: *mut SchedHandle, stream: u32, measured_block_ns: u64, out_cost_ns: *mut u64) -> i32,
    /// One block released at arrival_ns (or GK_TIME_NOW); out_deadline_ns (nullable) gets its
    /// absolute deadline, GK_NO_TIME if none.
    pub submit: unsafe extern "C" fn(
        s: *mut SchedHandle,
        stream: u32,
        arrival_ns: u64,
        out_task: *mut u64,
        out_deadline_ns: *mut u64,
    ) -> i32,
    /// What to do at now_ns (or GK_TIME_NOW): LAUNCH, WAIT or IDLE.
    pub next: unsafe extern "C" fn(s: *mut SchedHandle, now_ns: u64, out: *mut GkDecision) -> i32,
    /// Retires the task's oldest chunk in flight (once per chunk, in launch order), finished at
    /// finish_ns (or GK_TIME_NOW); measured_cost_ns may be GK_COST_UNMEASURED; out is nullable.
    pub complete: unsafe extern "C" fn(
        s: *mut SchedHandle,
        task: u64,
        measured_cost_ns: u64,
        finish_ns: u64,
        out: *mut GkCompletion,
    ) -> i32,
    /// Abandons a task, counted as a drop.
    pub drop_task: unsafe extern "C" fn(s: *mut SchedHandle, task: u64) -> i32,
    /// Withdraws a task, not counted as a drop.
    pub cancel_task: unsafe extern "C" fn(s: *mut SchedHandle, task: u64) -> i32,
    /// GK_TASK_* of a live or recently finished task.
    pub task_state: unsafe extern "C" fn(s: *mut SchedHandle, task: u64, out_state: *mut i32) -> i32,
    /// Figures of the whole scheduler.
    pub stats: unsafe extern "C" fn(s: *mut SchedHandle, out: *mut GkSchedStats) -> i32,
    /// Figures of one stream.
    pub stream_stats: unsafe extern "C" fn(s: *mut SchedHandle, stream: u32, out: *mut GkStreamStats) -> i32,
    /// A new memory-pool policy, one reference (ids only: the caller does every
    /// cuMemAlloc/cuMemFree).
    pub pool_create: unsafe extern "C" fn(config: *const GkPoolConfig, out: *mut *mut PoolHandle) -> i32,
    /// Adds a reference.
    pub pool_retain: unsafe extern "C" fn(p: *mut PoolHandle),
    /// Drops a reference; the last one frees the pool.
    pub pool_release: unsafe extern "C" fn(p: *mut PoolHandle),
    /// A block of at least size bytes: a cached one, or a new id to allocate.
    pub pool_acquire_block: unsafe extern "C" fn(p: *mut PoolHandle, size: u64, out: *mut GkPoolGrant) -> i32,
    /// Caches a block; evicted ids go to the free queue, whose length goes to out_to_free
    /// (nullable).
    pub pool_release_block: unsafe extern "C" fn(p: *mut PoolHandle, block: u64, out_to_free: *mut u32) -> i32,
    /// Forgets a block the caller freed (or whose allocation failed).
    pub pool_discard_block: unsafe extern "C" fn(p: *mut PoolHandle, block: u64) -> i32,
    /// Evicts down to target_cached_bytes; out_to_free (nullable) as for pool_release_block.
    pub pool_trim: unsafe extern "C" fn(p: *mut PoolHandle, target_cached_bytes: u64, out_to_free: *mut u32) -> i32,
    /// Moves up to capacity evicted ids (least recently used first) into ids; free each one.
    pub pool_take_to_free:
        unsafe extern "C" fn(p: *mut PoolHandle, ids: *mut u64, capacity: u32, out_count: *mut u32) -> i32,
    /// Figures of the pool.
    pub pool_stats: unsafe extern "C" fn(p: *mut PoolHandle, out: *mut GkPoolStats) -> i32,
}
