//! The C ABI of `native/include/gk/sched_abi.h`, version 1: `#[repr(C)]` mirrors of its
//! structs and one static table of `extern "C"` functions ([`SCHED_ABI_V1`]).
//!
//! Rules every function follows: null pointers and short structs are refused with a status
//! code; errors leave a message in a thread-local (`last_error`); panics are caught at the
//! boundary (`GK_ERR_PANIC`) and a handle whose mutex a panic poisoned answers
//! `GK_ERR_POISONED` from then on. Handles are `Arc`s handed out with `Arc::into_raw`.

#![allow(unsafe_code)]
// The table's function pointers dereference raw pointers handed over by C; each function
// checks for null before doing so, and documents the remaining contract in the header.
#![allow(clippy::missing_safety_doc)]
// The bodies of these `unsafe extern "C"` functions are the unsafe contract itself.
#![allow(unsafe_op_in_unsafe_fn)]

use std::cell::RefCell;
use std::collections::VecDeque;
use std::ffi::{c_char, CStr};
use std::mem::size_of;
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::sync::{Arc, Mutex, MutexGuard};

use pygpukit_core::clock::{Clock, MonotonicClock, SimulatedClock};
use pygpukit_core::histogram::HistogramSummary;
use pygpukit_core::memory::{BlockId, MemoryPool, PoolConfig, PoolError, PoolStats, SizeClasses};
use pygpukit_core::scheduler::{
    AdmissionRefused, Decision, Qos, SchedError, Scheduler, SchedulerConfig, SchedulerStats, StreamSpec, StreamStats,
};

pub const GK_SCHED_ABI_VERSION: u32 = 1;
pub const GK_SCHED_ABI_CAPSULE_NAME: &CStr = c"pygpukit_dsp_core._sched_abi_v1";
pub const GK_SCHED_HANDLE_CAPSULE_NAME: &CStr = c"pygpukit_dsp_core._sched_handle_v1";
pub const GK_POOL_HANDLE_CAPSULE_NAME: &CStr = c"pygpukit_dsp_core._pool_handle_v1";

pub const GK_TIME_NOW: u64 = u64::MAX;
pub const GK_NO_TIME: u64 = u64::MAX;
/// As `complete`'s measured cost: the chunk was not timed.
pub const GK_COST_UNMEASURED: u64 = u64::MAX;

pub const GK_OK: i32 = 0;
pub const GK_ERR_INVALID_ARGUMENT: i32 = -1;
pub const GK_ERR_ADMISSION_REFUSED: i32 = -5;
pub const GK_ERR_NULL_POINTER: i32 = -12;
pub const GK_ERR_STRUCT_SIZE: i32 = -13;
pub const GK_ERR_POISONED: i32 = -14;
pub const GK_ERR_WRONG_CLOCK: i32 = -15;
pub const GK_ERR_PANIC: i32 = -99;

pub const GK_CLOCK_MONOTONIC: u32 = 0;
pub const GK_CLOCK_SIMULATED: u32 = 1;

pub const GK_DECISION_IDLE: i32 = 0;
pub const GK_DECISION_LAUNCH: i32 = 1;
pub const GK_DECISION_WAIT: i32 = 2;

// ---- structs (field for field as in sched_abi.h) -----------------------------------------

#[repr(C)]
#[derive(Clone, Copy, Debug)]
pub struct GkSchedConfig {
    pub struct_size: u32,
    pub clock: u32,
    pub u_max: f64,
    pub quantum_ns: u64,
    pub safety_margin_ns: u64,
    pub ewma_alpha: f64,
    pub simulated_start_ns: u64,
    /// Appended after v1 ([`GK_SCHED_CONFIG_V1_SIZE`]): lookahead; 0 = the default (2).
    pub max_chunks_in_flight: u32,
}

/// `sizeof(gk_sched_config)` before `max_chunks_in_flight` was appended: the smallest
/// `struct_size` accepted; fields past `struct_size` take their defaults.
pub const GK_SCHED_CONFIG_V1_SIZE: usize = 48;

impl GkSchedConfig {
    /// The documented defaults, on the monotonic clock.
    pub fn defaults() -> Self {
        let d = SchedulerConfig::default();
        GkSchedConfig {
            struct_size: size_of::<GkSchedConfig>() as u32,
            clock: GK_CLOCK_MONOTONIC,
            u_max: d.u_max,
            quantum_ns: d.quantum_ns,
            safety_margin_ns: d.safety_margin_ns,
            ewma_alpha: d.ewma_alpha,
            simulated_start_ns: 0,
            max_chunks_in_flight: d.max_chunks_in_flight,
        }
    }
}

#[repr(C)]
#[derive(Clone, Copy, Debug)]
pub struct GkStreamSpec {
    pub struct_size: u32,
    pub qos: i32,
    pub name: *const c_char,
    pub period_ns: u64,
    pub deadline_ns: u64,
    pub min_rate_hz: f64,
    pub cost_ns: u64,
    pub units_per_block: u32,
    pub reserved0: u32,
}

#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct GkAdmissionRefusal {
    pub reason: i32,
    pub reserved0: u32,
    pub stream_utilisation: f64,
    pub current_total: f64,
    pub bound: f64,
    pub stream_cost_ns: u64,
    pub cost_sum_ns: u64,
    pub safety_margin_ns: u64,
    pub shortest_deadline_ns: u64,
}

#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct GkDecision {
    pub kind: i32,
    pub stream: u32,
    pub task: u64,
    pub chunk_begin: u32,
    pub chunk_end: u32,
    pub deadline_ns: u64,
    pub est_cost_ns: u64,
    pub wait_until_ns: u64,
    pub is_final: u32,
    pub reserved0: u32,
}

#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct GkCompletion {
    pub state: i32,
    pub remaining_units: u32,
    pub latency_ns: u64,
}

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
    pub clamped: u64,
    pub mean_ns: f64,
}

#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct GkStreamStats {
    pub stream: u32,
    pub qos: i32,
    pub admitted: u32,
    pub units_per_block: u32,
    pub period_ns: u64,
    pub deadline_ns: u64,
    pub min_rate_hz: f64,
    pub cost_ns: u64,
    pub declared_cost_ns: u64,
    pub measured_cost_ns: u64,
    pub measured_cost_max_ns: u64,
    pub cost_samples: u64,
    pub utilisation: f64,
    pub submitted: u64,
    pub completed: u64,
    pub missed: u64,
    pub dropped: u64,
    pub cancelled: u64,
    pub live: u64,
    pub chunks: u64,
    pub busy_ns: u64,
    pub achieved_rate_hz: f64,
    pub latency: GkLatencySummary,
}

#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct GkSchedStats {
    pub now_ns: u64,
    pub u_max: f64,
    pub realtime_utilisation: f64,
    pub throughput_reserved: f64,
    pub over_bound: u32,
    pub streams: u32,
    pub launches: u64,
    pub waits: u64,
    pub idles: u64,
    pub paced: u64,
    pub live_tasks: u64,
    pub in_flight: u64,
    pub device_free_estimate_ns: u64,
}

#[repr(C)]
#[derive(Clone, Copy, Debug)]
pub struct GkPoolConfig {
    pub struct_size: u32,
    pub steps_per_doubling: u32,
    pub min_block_bytes: u64,
    pub cache_budget_bytes: u64,
    pub device_budget_bytes: u64,
}

#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct GkPoolGrant {
    pub block: u64,
    pub bytes: u64,
    pub reused: u32,
    pub to_free: u32,
}

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
    pub device_budget_bytes: u64,
    pub to_free: u64,
}

/// The function table. Field order is the ABI: append only, never reorder.
#[repr(C)]
pub struct GkSchedAbiV1 {
    pub abi_version: u32,
    pub struct_size: u32,
    pub last_error: unsafe extern "C" fn(*mut c_char, usize) -> usize,
    pub sched_create: unsafe extern "C" fn(*const GkSchedConfig, *mut *mut SchedHandle) -> i32,
    pub sched_retain: unsafe extern "C" fn(*mut SchedHandle),
    pub sched_release: unsafe extern "C" fn(*mut SchedHandle),
    pub sched_now_ns: unsafe extern "C" fn(*mut SchedHandle) -> u64,
    pub sched_set_time: unsafe extern "C" fn(*mut SchedHandle, u64) -> i32,
    pub register_stream:
        unsafe extern "C" fn(*mut SchedHandle, *const GkStreamSpec, *mut u32, *mut GkAdmissionRefusal) -> i32,
    pub unregister_stream: unsafe extern "C" fn(*mut SchedHandle, u32) -> i32,
    pub admit_stream: unsafe extern "C" fn(*mut SchedHandle, u32, *mut GkAdmissionRefusal) -> i32,
    pub update_cost: unsafe extern "C" fn(*mut SchedHandle, u32, u64, *mut u64) -> i32,
    pub submit: unsafe extern "C" fn(*mut SchedHandle, u32, u64, *mut u64, *mut u64) -> i32,
    pub next: unsafe extern "C" fn(*mut SchedHandle, u64, *mut GkDecision) -> i32,
    pub complete: unsafe extern "C" fn(*mut SchedHandle, u64, u64, u64, *mut GkCompletion) -> i32,
    pub drop_task: unsafe extern "C" fn(*mut SchedHandle, u64) -> i32,
    pub cancel_task: unsafe extern "C" fn(*mut SchedHandle, u64) -> i32,
    pub task_state: unsafe extern "C" fn(*mut SchedHandle, u64, *mut i32) -> i32,
    pub stats: unsafe extern "C" fn(*mut SchedHandle, *mut GkSchedStats) -> i32,
    pub stream_stats: unsafe extern "C" fn(*mut SchedHandle, u32, *mut GkStreamStats) -> i32,
    pub pool_create: unsafe extern "C" fn(*const GkPoolConfig, *mut *mut PoolHandle) -> i32,
    pub pool_retain: unsafe extern "C" fn(*mut PoolHandle),
    pub pool_release: unsafe extern "C" fn(*mut PoolHandle),
    pub pool_acquire_block: unsafe extern "C" fn(*mut PoolHandle, u64, *mut GkPoolGrant) -> i32,
    pub pool_release_block: unsafe extern "C" fn(*mut PoolHandle, u64, *mut u32) -> i32,
    pub pool_discard_block: unsafe extern "C" fn(*mut PoolHandle, u64) -> i32,
    pub pool_trim: unsafe extern "C" fn(*mut PoolHandle, u64, *mut u32) -> i32,
    pub pool_take_to_free: unsafe extern "C" fn(*mut PoolHandle, *mut u64, u32, *mut u32) -> i32,
    pub pool_stats: unsafe extern "C" fn(*mut PoolHandle, *mut GkPoolStats) -> i32,
}

/// The one table handed to C++ (through the `_sched_abi_v1` capsule).
pub static SCHED_ABI_V1: GkSchedAbiV1 = GkSchedAbiV1 {
    abi_version: GK_SCHED_ABI_VERSION,
    struct_size: size_of::<GkSchedAbiV1>() as u32,
    last_error: gk_last_error,
    sched_create: gk_sched_create,
    sched_retain: gk_sched_retain,
    sched_release: gk_sched_release,
    sched_now_ns: gk_sched_now_ns,
    sched_set_time: gk_sched_set_time,
    register_stream: gk_register_stream,
    unregister_stream: gk_unregister_stream,
    admit_stream: gk_admit_stream,
    update_cost: gk_update_cost,
    submit: gk_submit,
    next: gk_next,
    complete: gk_complete,
    drop_task: gk_drop_task,
    cancel_task: gk_cancel_task,
    task_state: gk_task_state,
    stats: gk_stats,
    stream_stats: gk_stream_stats,
    pool_create: gk_pool_create,
    pool_retain: gk_pool_retain,
    pool_release: gk_pool_release,
    pool_acquire_block: gk_pool_acquire_block,
    pool_release_block: gk_pool_release_block,
    pool_discard_block: gk_pool_discard_block,
    pool_trim: gk_pool_trim,
    pool_take_to_free: gk_pool_take_to_free,
    pool_stats: gk_pool_stats,
};

// ---- handles ------------------------------------------------------------------------------

/// A scheduler shared by Python and C: the `gk_sched*` of the header points at one of these.
#[derive(Debug)]
pub struct SchedHandle {
    inner: Mutex<Scheduler>,
    simulated: Option<SimulatedClock>,
}

/// Which clock a new scheduler runs on.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ClockChoice {
    Monotonic,
    Simulated { start_ns: u64 },
}

/// A handle whose mutex an earlier panic poisoned.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Poisoned;

impl std::fmt::Display for Poisoned {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("internal error: an earlier panic left this object unusable; create a new one")
    }
}

impl SchedHandle {
    pub fn new(config: SchedulerConfig, clock: ClockChoice) -> Result<Arc<SchedHandle>, SchedError> {
        let (scheduler, simulated) = match clock {
            ClockChoice::Monotonic => {
                let clock: Arc<dyn Clock> = Arc::new(MonotonicClock);
                (Scheduler::new(config, clock)?, None)
            }
            ClockChoice::Simulated { start_ns } => {
                let (s, c) = Scheduler::simulated(config, start_ns)?;
                (s, Some(c))
            }
        };
        Ok(Arc::new(SchedHandle { inner: Mutex::new(scheduler), simulated }))
    }

    pub fn lock(&self) -> Result<MutexGuard<'_, Scheduler>, Poisoned> {
        self.inner.lock().map_err(|_| Poisoned)
    }

    /// The simulated clock, if this scheduler runs on one.
    pub fn simulated_clock(&self) -> Option<&SimulatedClock> {
        self.simulated.as_ref()
    }
}

/// A pool shared by Python and C, with the queue of evicted ids C has not taken yet.
#[derive(Debug)]
pub struct PoolHandle {
    inner: Mutex<PoolState>,
}

#[derive(Debug)]
pub struct PoolState {
    pub pool: MemoryPool,
    pub to_free: VecDeque<BlockId>,
}

impl PoolHandle {
    pub fn new(config: PoolConfig) -> Result<Arc<PoolHandle>, PoolError> {
        Ok(Arc::new(PoolHandle {
            inner: Mutex::new(PoolState { pool: MemoryPool::new(config)?, to_free: VecDeque::new() }),
        }))
    }

    pub fn lock(&self) -> Result<MutexGuard<'_, PoolState>, Poisoned> {
        self.inner.lock().map_err(|_| Poisoned)
    }
}

// ---- error plumbing -----------------------------------------------------------------------

thread_local! {
    static LAST_ERROR: RefCell<String> = const { RefCell::new(String::new()) };
}

fn set_last_error(message: impl Into<String>) {
    let message = message.into();
    LAST_ERROR.with(|e| *e.borrow_mut() = message);
}

/// The last error message recorded on this thread (empty if none).
pub fn last_error_message() -> String {
    LAST_ERROR.with(|e| e.borrow().clone())
}

fn fail(code: i32, message: impl Into<String>) -> i32 {
    set_last_error(message);
    code
}

fn sched_fail(e: &SchedError) -> i32 {
    fail(e.code(), e.to_string())
}

fn pool_fail(e: &PoolError) -> i32 {
    fail(e.code(), e.to_string())
}

/// Run `body`, turning a panic into `GK_ERR_PANIC` with its message.
pub fn ffi_guard(body: impl FnOnce() -> i32) -> i32 {
    match catch_unwind(AssertUnwindSafe(body)) {
        Ok(code) => code,
        Err(payload) => {
            let what = payload
                .downcast_ref::<&str>()
                .map(|s| s.to_string())
                .or_else(|| payload.downcast_ref::<String>().cloned())
                .unwrap_or_else(|| "unknown panic".to_string());
            fail(GK_ERR_PANIC, format!("internal error in the Rust scheduler: {what}"))
        }
    }
}

macro_rules! non_null {
    ($($p:ident),+) => {
        $(if $p.is_null() {
            return fail(GK_ERR_NULL_POINTER, concat!("`", stringify!($p), "` must not be NULL"));
        })+
    };
}

macro_rules! struct_size {
    ($p:ident, $t:ty) => {
        if ((*$p).struct_size as usize) < size_of::<$t>() {
            return fail(
                GK_ERR_STRUCT_SIZE,
                format!(
                    concat!("`", stringify!($p), "`: struct_size {} is smaller than sizeof(", stringify!($t), ") = {}"),
                    (*$p).struct_size,
                    size_of::<$t>()
                ),
            );
        }
    };
}

macro_rules! locked {
    ($handle:ident) => {
        match (*$handle).lock() {
            Ok(guard) => guard,
            Err(p) => return fail(GK_ERR_POISONED, p.to_string()),
        }
    };
}

fn resolve(t: u64, s: &Scheduler) -> u64 {
    if t == GK_TIME_NOW {
        s.now()
    } else {
        t
    }
}

fn opt_time(t: Option<u64>) -> u64 {
    t.unwrap_or(GK_NO_TIME)
}

/// Fill `out` (if not null) from a refusal.
unsafe fn write_refusal(out: *mut GkAdmissionRefusal, r: &AdmissionRefused) {
    if !out.is_null() {
        *out = refusal_to_c(r);
    }
}

pub fn refusal_to_c(r: &AdmissionRefused) -> GkAdmissionRefusal {
    GkAdmissionRefusal {
        reason: r.reason as i32,
        reserved0: 0,
        stream_utilisation: r.stream_utilisation,
        current_total: r.current_total,
        bound: r.bound,
        stream_cost_ns: r.stream_cost_ns,
        cost_sum_ns: r.cost_sum_ns,
        safety_margin_ns: r.safety_margin_ns,
        shortest_deadline_ns: r.shortest_deadline_ns,
    }
}

pub fn decision_to_c(d: &Decision) -> GkDecision {
    match *d {
        Decision::Launch(l) => GkDecision {
            kind: GK_DECISION_LAUNCH,
            stream: l.stream,
            task: l.task,
            chunk_begin: l.chunk_begin,
            chunk_end: l.chunk_end,
            deadline_ns: opt_time(l.deadline_ns),
            est_cost_ns: l.est_cost_ns,
            wait_until_ns: GK_NO_TIME,
            is_final: u32::from(l.is_final),
            reserved0: 0,
        },
        Decision::WaitUntil(t) => {
            GkDecision { kind: GK_DECISION_WAIT, deadline_ns: GK_NO_TIME, wait_until_ns: t, ..GkDecision::default() }
        }
        Decision::Idle => GkDecision {
            kind: GK_DECISION_IDLE,
            deadline_ns: GK_NO_TIME,
            wait_until_ns: GK_NO_TIME,
            ..GkDecision::default()
        },
    }
}

fn summary_to_c(s: &HistogramSummary) -> GkLatencySummary {
    GkLatencySummary {
        count: s.count,
        min_ns: s.min,
        max_ns: s.max,
        p50_ns: s.p50,
        p90_ns: s.p90,
        p99_ns: s.p99,
        p999_ns: s.p999,
        clamped: s.clamped,
        mean_ns: s.mean,
    }
}

pub fn stream_stats_to_c(s: &StreamStats) -> GkStreamStats {
    GkStreamStats {
        stream: s.id,
        qos: s.class as i32,
        admitted: u32::from(s.admitted),
        units_per_block: s.units_per_block,
        period_ns: opt_time(s.period_ns),
        deadline_ns: opt_time(s.deadline_ns),
        min_rate_hz: s.min_rate_hz.unwrap_or(0.0),
        cost_ns: opt_time(s.cost_ns),
        declared_cost_ns: opt_time(s.declared_cost_ns),
        measured_cost_ns: opt_time(s.measured_cost_ns),
        measured_cost_max_ns: s.measured_cost_max_ns,
        cost_samples: s.cost_samples,
        utilisation: s.utilisation,
        submitted: s.submitted,
        completed: s.completed,
        missed: s.missed,
        dropped: s.dropped,
        cancelled: s.cancelled,
        live: s.live,
        chunks: s.chunks,
        busy_ns: s.busy_ns,
        achieved_rate_hz: s.achieved_rate_hz,
        latency: summary_to_c(&s.latency),
    }
}

pub fn sched_stats_to_c(s: &SchedulerStats) -> GkSchedStats {
    GkSchedStats {
        now_ns: s.now_ns,
        u_max: s.u_max,
        realtime_utilisation: s.realtime_utilisation,
        throughput_reserved: s.throughput_reserved,
        over_bound: u32::from(s.over_bound),
        streams: s.streams.len() as u32,
        launches: s.launches,
        waits: s.waits,
        idles: s.idles,
        paced: s.paced,
        live_tasks: s.live_tasks,
        in_flight: s.in_flight,
        device_free_estimate_ns: s.device_free_estimate_ns,
    }
}

pub fn pool_stats_to_c(s: &PoolStats, to_free: usize) -> GkPoolStats {
    GkPoolStats {
        hits: s.hits,
        misses: s.misses,
        evictions: s.evictions,
        bytes_in_use: s.bytes_in_use,
        bytes_cached: s.bytes_cached,
        blocks_in_use: s.blocks_in_use,
        blocks_cached: s.blocks_cached,
        bytes_requested_in_use: s.bytes_requested_in_use,
        peak_bytes_in_use: s.peak_bytes_in_use,
        peak_bytes_reserved: s.peak_bytes_reserved,
        cache_budget_bytes: s.cache_budget_bytes,
        device_budget_bytes: s.device_budget_bytes,
        to_free: to_free as u64,
    }
}

/// Turn a C stream spec into the core's, or say what is wrong with it.
unsafe fn stream_spec_from_c(spec: &GkStreamSpec) -> Result<StreamSpec, String> {
    if spec.name.is_null() {
        return Err("spec->name must not be NULL".into());
    }
    let name = CStr::from_ptr(spec.name).to_str().map_err(|_| "spec->name is not valid UTF-8".to_string())?.to_string();
    let optional = |d: u64| if d == 0 { None } else { Some(d) };
    let qos = match spec.qos {
        0 => Qos::realtime(spec.period_ns, optional(spec.deadline_ns)),
        1 => {
            let rate = spec.min_rate_hz;
            if !(rate.is_finite() && rate >= 0.0) {
                return Err(format!("stream '{name}': min_rate_hz must be a finite number >= 0 (0 = none), got {rate}"));
            }
            Qos::Throughput { min_rate_hz: if rate > 0.0 { Some(rate) } else { None }, deadline_ns: optional(spec.deadline_ns) }
        }
        2 => Qos::BestEffort { deadline_ns: optional(spec.deadline_ns) },
        other => {
            return Err(format!(
                "stream '{name}': qos {other} is not one of GK_QOS_REALTIME (0), GK_QOS_THROUGHPUT (1), GK_QOS_BEST_EFFORT (2)"
            ))
        }
    };
    // the C ABI declares no latency nor phase (v1 spec): the response bound takes the cost for
    // the latency and the critical instant for the phase
    Ok(StreamSpec {
        name,
        qos,
        cost_ns: optional(spec.cost_ns),
        latency_ns: None,
        units_per_block: spec.units_per_block,
        phase_ns: None,
    })
}

// ---- scheduler functions ------------------------------------------------------------------

unsafe extern "C" fn gk_last_error(buf: *mut c_char, cap: usize) -> usize {
    let message = last_error_message();
    if !buf.is_null() && cap > 0 {
        let n = message.len().min(cap - 1);
        std::ptr::copy_nonoverlapping(message.as_ptr().cast::<c_char>(), buf, n);
        *buf.add(n) = 0;
    }
    message.len()
}

unsafe extern "C" fn gk_sched_create(config: *const GkSchedConfig, out: *mut *mut SchedHandle) -> i32 {
    ffi_guard(|| {
        non_null!(config, out);
        let size = (*config).struct_size as usize;
        if size < GK_SCHED_CONFIG_V1_SIZE {
            return fail(
                GK_ERR_STRUCT_SIZE,
                format!(
                    "`config`: struct_size {size} is smaller than {GK_SCHED_CONFIG_V1_SIZE}, the size of the first \
                     gk_sched_config (sizeof(gk_sched_config) = {} now)",
                    size_of::<GkSchedConfig>()
                ),
            );
        }
        // An older, smaller struct: read only its bytes; the fields it lacks keep their defaults.
        let mut c = GkSchedConfig::defaults();
        std::ptr::copy_nonoverlapping(
            config.cast::<u8>(),
            std::ptr::addr_of_mut!(c).cast::<u8>(),
            size.min(size_of::<GkSchedConfig>()),
        );
        let clock = match c.clock {
            GK_CLOCK_MONOTONIC => ClockChoice::Monotonic,
            GK_CLOCK_SIMULATED => ClockChoice::Simulated { start_ns: c.simulated_start_ns },
            other => {
                return fail(
                    GK_ERR_INVALID_ARGUMENT,
                    format!("config->clock {other} is not GK_CLOCK_MONOTONIC (0) or GK_CLOCK_SIMULATED (1)"),
                )
            }
        };
        let sc = SchedulerConfig {
            u_max: c.u_max,
            quantum_ns: c.quantum_ns,
            safety_margin_ns: c.safety_margin_ns,
            ewma_alpha: c.ewma_alpha,
            // 0: a zero-initialised field means "the default", as elsewhere in this ABI.
            max_chunks_in_flight: match c.max_chunks_in_flight {
                0 => SchedulerConfig::default().max_chunks_in_flight,
                n => n,
            },
            ..SchedulerConfig::default()
        };
        match SchedHandle::new(sc, clock) {
            Ok(handle) => {
                *out = Arc::into_raw(handle).cast_mut();
                GK_OK
            }
            Err(e) => sched_fail(&e),
        }
    })
}

unsafe extern "C" fn gk_sched_retain(s: *mut SchedHandle) {
    if !s.is_null() {
        Arc::increment_strong_count(s.cast_const());
    }
}

unsafe extern "C" fn gk_sched_release(s: *mut SchedHandle) {
    if !s.is_null() {
        let _ = catch_unwind(AssertUnwindSafe(|| Arc::decrement_strong_count(s.cast_const())));
    }
}

unsafe extern "C" fn gk_sched_now_ns(s: *mut SchedHandle) -> u64 {
    if s.is_null() {
        return GK_NO_TIME;
    }
    catch_unwind(AssertUnwindSafe(|| (*s).lock().map(|g| g.now()).unwrap_or(GK_NO_TIME))).unwrap_or(GK_NO_TIME)
}

unsafe extern "C" fn gk_sched_set_time(s: *mut SchedHandle, t_ns: u64) -> i32 {
    ffi_guard(|| {
        non_null!(s);
        let Some(clock) = (*s).simulated_clock() else {
            return fail(GK_ERR_WRONG_CLOCK, "sched_set_time needs a scheduler created with GK_CLOCK_SIMULATED");
        };
        match clock.set(t_ns) {
            Ok(_) => GK_OK,
            Err(now) => fail(GK_ERR_INVALID_ARGUMENT, format!("cannot move the clock back from {now} ns to {t_ns} ns")),
        }
    })
}

unsafe extern "C" fn gk_register_stream(
    s: *mut SchedHandle,
    spec: *const GkStreamSpec,
    out_stream: *mut u32,
    out_refusal: *mut GkAdmissionRefusal,
) -> i32 {
    ffi_guard(|| {
        non_null!(s, spec, out_stream);
        struct_size!(spec, GkStreamSpec);
        let spec = match stream_spec_from_c(&*spec) {
            Ok(spec) => spec,
            Err(m) => return fail(GK_ERR_INVALID_ARGUMENT, m),
        };
        let mut sched = locked!(s);
        match sched.register_stream(spec) {
            Ok(id) => {
                *out_stream = id;
                GK_OK
            }
            Err(e) => {
                if let SchedError::Admission(r) = &e {
                    write_refusal(out_refusal, r);
                }
                sched_fail(&e)
            }
        }
    })
}

unsafe extern "C" fn gk_unregister_stream(s: *mut SchedHandle, stream: u32) -> i32 {
    ffi_guard(|| {
        non_null!(s);
        let mut sched = locked!(s);
        match sched.unregister_stream(stream) {
            Ok(_) => GK_OK,
            Err(e) => sched_fail(&e),
        }
    })
}

unsafe extern "C" fn gk_admit_stream(s: *mut SchedHandle, stream: u32, out_refusal: *mut GkAdmissionRefusal) -> i32 {
    ffi_guard(|| {
        non_null!(s);
        let mut sched = locked!(s);
        match sched.admit(stream) {
            Ok(_) => GK_OK,
            Err(e) => {
                if let SchedError::Admission(r) = &e {
                    write_refusal(out_refusal, r);
                }
                sched_fail(&e)
            }
        }
    })
}

unsafe extern "C" fn gk_update_cost(s: *mut SchedHandle, stream: u32, measured_ns: u64, out_cost: *mut u64) -> i32 {
    ffi_guard(|| {
        non_null!(s);
        let mut sched = locked!(s);
        match sched.update_cost(stream, measured_ns) {
            Ok(cost) => {
                if !out_cost.is_null() {
                    *out_cost = cost;
                }
                GK_OK
            }
            Err(e) => sched_fail(&e),
        }
    })
}

unsafe extern "C" fn gk_submit(
    s: *mut SchedHandle,
    stream: u32,
    arrival_ns: u64,
    out_task: *mut u64,
    out_deadline: *mut u64,
) -> i32 {
    ffi_guard(|| {
        non_null!(s, out_task);
        let mut sched = locked!(s);
        let arrival = resolve(arrival_ns, &sched);
        match sched.submit_at(stream, arrival) {
            Ok(sub) => {
                *out_task = sub.task;
                if !out_deadline.is_null() {
                    *out_deadline = opt_time(sub.deadline_ns);
                }
                GK_OK
            }
            Err(e) => sched_fail(&e),
        }
    })
}

unsafe extern "C" fn gk_next(s: *mut SchedHandle, now_ns: u64, out: *mut GkDecision) -> i32 {
    ffi_guard(|| {
        non_null!(s, out);
        let mut sched = locked!(s);
        let now = resolve(now_ns, &sched);
        *out = decision_to_c(&sched.next_decision_at(now));
        GK_OK
    })
}

unsafe extern "C" fn gk_complete(
    s: *mut SchedHandle,
    task: u64,
    measured_cost_ns: u64,
    finish_ns: u64,
    out: *mut GkCompletion,
) -> i32 {
    ffi_guard(|| {
        non_null!(s);
        let mut sched = locked!(s);
        let finish = resolve(finish_ns, &sched);
        let done = if measured_cost_ns == GK_COST_UNMEASURED {
            sched.complete_unmeasured(task, finish)
        } else {
            sched.complete(task, measured_cost_ns, finish)
        };
        match done {
            Ok(c) => {
                if !out.is_null() {
                    *out = GkCompletion {
                        state: c.state as i32,
                        remaining_units: c.remaining_units,
                        latency_ns: opt_time(c.latency_ns),
                    };
                }
                GK_OK
            }
            Err(e) => sched_fail(&e),
        }
    })
}

unsafe extern "C" fn gk_drop_task(s: *mut SchedHandle, task: u64) -> i32 {
    ffi_guard(|| {
        non_null!(s);
        let mut sched = locked!(s);
        match sched.drop_task(task) {
            Ok(()) => GK_OK,
            Err(e) => sched_fail(&e),
        }
    })
}

unsafe extern "C" fn gk_cancel_task(s: *mut SchedHandle, task: u64) -> i32 {
    ffi_guard(|| {
        non_null!(s);
        let mut sched = locked!(s);
        match sched.cancel(task) {
            Ok(()) => GK_OK,
            Err(e) => sched_fail(&e),
        }
    })
}

unsafe extern "C" fn gk_task_state(s: *mut SchedHandle, task: u64, out_state: *mut i32) -> i32 {
    ffi_guard(|| {
        non_null!(s, out_state);
        let sched = locked!(s);
        match sched.task_state(task) {
            Some(state) => {
                *out_state = state as i32;
                GK_OK
            }
            None => sched_fail(&SchedError::UnknownTask(task)),
        }
    })
}

unsafe extern "C" fn gk_stats(s: *mut SchedHandle, out: *mut GkSchedStats) -> i32 {
    ffi_guard(|| {
        non_null!(s, out);
        let sched = locked!(s);
        *out = sched_stats_to_c(&sched.stats());
        GK_OK
    })
}

unsafe extern "C" fn gk_stream_stats(s: *mut SchedHandle, stream: u32, out: *mut GkStreamStats) -> i32 {
    ffi_guard(|| {
        non_null!(s, out);
        let sched = locked!(s);
        match sched.stream_stats(stream) {
            Ok(st) => {
                *out = stream_stats_to_c(&st);
                GK_OK
            }
            Err(e) => sched_fail(&e),
        }
    })
}

// ---- pool functions -----------------------------------------------------------------------

/// The core pool configuration from the C one (`device_budget_bytes == 0` = unlimited).
pub fn pool_config(
    min_block_bytes: u64,
    steps_per_doubling: u32,
    cache_budget_bytes: u64,
    device_budget_bytes: Option<u64>,
) -> Result<PoolConfig, PoolError> {
    let size_classes = SizeClasses::new(min_block_bytes, steps_per_doubling)?;
    Ok(PoolConfig { size_classes, cache_budget_bytes, device_budget_bytes })
}

unsafe extern "C" fn gk_pool_create(config: *const GkPoolConfig, out: *mut *mut PoolHandle) -> i32 {
    ffi_guard(|| {
        non_null!(config, out);
        struct_size!(config, GkPoolConfig);
        let c = &*config;
        let budget = if c.device_budget_bytes == 0 { None } else { Some(c.device_budget_bytes) };
        match pool_config(c.min_block_bytes, c.steps_per_doubling, c.cache_budget_bytes, budget)
            .and_then(PoolHandle::new)
        {
            Ok(handle) => {
                *out = Arc::into_raw(handle).cast_mut();
                GK_OK
            }
            Err(e) => pool_fail(&e),
        }
    })
}

unsafe extern "C" fn gk_pool_retain(p: *mut PoolHandle) {
    if !p.is_null() {
        Arc::increment_strong_count(p.cast_const());
    }
}

unsafe extern "C" fn gk_pool_release(p: *mut PoolHandle) {
    if !p.is_null() {
        let _ = catch_unwind(AssertUnwindSafe(|| Arc::decrement_strong_count(p.cast_const())));
    }
}

unsafe extern "C" fn gk_pool_acquire_block(p: *mut PoolHandle, size: u64, out: *mut GkPoolGrant) -> i32 {
    ffi_guard(|| {
        non_null!(p, out);
        let mut state = locked!(p);
        match state.pool.acquire(size) {
            Ok(grant) => {
                state.to_free.extend(grant.evicted.iter().copied());
                *out = GkPoolGrant {
                    block: grant.block,
                    bytes: grant.bytes,
                    reused: u32::from(grant.reused),
                    to_free: state.to_free.len() as u32,
                };
                GK_OK
            }
            Err(e) => pool_fail(&e),
        }
    })
}

unsafe extern "C" fn gk_pool_release_block(p: *mut PoolHandle, block: u64, out_to_free: *mut u32) -> i32 {
    ffi_guard(|| {
        non_null!(p);
        let mut state = locked!(p);
        match state.pool.release(block) {
            Ok(evicted) => {
                state.to_free.extend(evicted);
                if !out_to_free.is_null() {
                    *out_to_free = state.to_free.len() as u32;
                }
                GK_OK
            }
            Err(e) => pool_fail(&e),
        }
    })
}

unsafe extern "C" fn gk_pool_discard_block(p: *mut PoolHandle, block: u64) -> i32 {
    ffi_guard(|| {
        non_null!(p);
        let mut state = locked!(p);
        match state.pool.discard(block) {
            Ok(()) => GK_OK,
            Err(e) => pool_fail(&e),
        }
    })
}

unsafe extern "C" fn gk_pool_trim(p: *mut PoolHandle, target: u64, out_to_free: *mut u32) -> i32 {
    ffi_guard(|| {
        non_null!(p);
        let mut state = locked!(p);
        let evicted = state.pool.trim(target);
        state.to_free.extend(evicted);
        if !out_to_free.is_null() {
            *out_to_free = state.to_free.len() as u32;
        }
        GK_OK
    })
}

unsafe extern "C" fn gk_pool_take_to_free(
    p: *mut PoolHandle,
    ids: *mut u64,
    capacity: u32,
    out_count: *mut u32,
) -> i32 {
    ffi_guard(|| {
        non_null!(p, out_count);
        if capacity > 0 && ids.is_null() {
            return fail(GK_ERR_NULL_POINTER, "`ids` must not be NULL when capacity > 0");
        }
        let mut state = locked!(p);
        let n = state.to_free.len().min(capacity as usize);
        for i in 0..n {
            *ids.add(i) = state.to_free.pop_front().expect("counted");
        }
        *out_count = n as u32;
        GK_OK
    })
}

unsafe extern "C" fn gk_pool_stats(p: *mut PoolHandle, out: *mut GkPoolStats) -> i32 {
    ffi_guard(|| {
        non_null!(p, out);
        let state = locked!(p);
        *out = pool_stats_to_c(&state.pool.stats(), state.to_free.len());
        GK_OK
    })
}

#[cfg(test)]
mod tests;
