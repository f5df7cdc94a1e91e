//! The table's scheduler functions: lifetime and clock, streams, blocks, statistics.

use std::ffi::c_char;
use std::mem::size_of;
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::sync::Arc;

use pygpukit_core::scheduler::{SchedError, SchedulerConfig};

use super::abi::*;
use super::convert::{
    decision_to_c, opt_time, resolve, sched_stats_to_c, stream_spec_from_c, stream_stats_to_c, write_refusal,
};
use super::ffi::{fail, ffi_guard, last_error_message, sched_fail};
use super::handles::{ClockChoice, SchedHandle};

pub(super) unsafe extern "C" fn gk_last_error(buf: *mut c_char, cap: usize) -> usize {
    let message = last_error_message();
    if !buf.is_null() && cap > 0 {
        let n = message.len().min(cap - 1);
        std::ptr::copy_nonoverlapping(message.as_ptr().cast::<c_char>(), buf, n);
        *buf.add(n) = 0;
    }
    message.len()
}

pub(super) unsafe extern "C" fn gk_sched_create(config: *const GkSchedConfig, out: *mut *mut SchedHandle) -> i32 {
    ffi_guard(|| {
        non_null!(config, out);
        let size = (*config).struct_size as usize;
        if size < GK_SCHED_CONFIG_V1_SIZE as usize {
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

pub(super) unsafe extern "C" fn gk_sched_retain(s: *mut SchedHandle) {
    if !s.is_null() {
        Arc::increment_strong_count(s.cast_const());
    }
}

pub(super) unsafe extern "C" fn gk_sched_release(s: *mut SchedHandle) {
    if !s.is_null() {
        let _ = catch_unwind(AssertUnwindSafe(|| Arc::decrement_strong_count(s.cast_const())));
    }
}

pub(super) unsafe extern "C" fn gk_sched_now_ns(s: *mut SchedHandle) -> u64 {
    if s.is_null() {
        return GK_NO_TIME;
    }
    catch_unwind(AssertUnwindSafe(|| (*s).lock().map(|g| g.now()).unwrap_or(GK_NO_TIME))).unwrap_or(GK_NO_TIME)
}

pub(super) unsafe extern "C" fn gk_sched_set_time(s: *mut SchedHandle, t_ns: u64) -> i32 {
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

pub(super) unsafe extern "C" fn gk_register_stream(
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

pub(super) unsafe extern "C" fn gk_unregister_stream(s: *mut SchedHandle, stream: u32) -> i32 {
    ffi_guard(|| {
        non_null!(s);
        let mut sched = locked!(s);
        match sched.unregister_stream(stream) {
            Ok(_) => GK_OK,
            Err(e) => sched_fail(&e),
        }
    })
}

pub(super) unsafe extern "C" fn gk_admit_stream(
    s: *mut SchedHandle,
    stream: u32,
    out_refusal: *mut GkAdmissionRefusal,
) -> i32 {
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

pub(super) unsafe extern "C" fn gk_update_cost(
    s: *mut SchedHandle,
    stream: u32,
    measured_ns: u64,
    out_cost: *mut u64,
) -> i32 {
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

pub(super) unsafe extern "C" fn gk_submit(
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

pub(super) unsafe extern "C" fn gk_next(s: *mut SchedHandle, now_ns: u64, out: *mut GkDecision) -> i32 {
    ffi_guard(|| {
        non_null!(s, out);
        let mut sched = locked!(s);
        let now = resolve(now_ns, &sched);
        *out = decision_to_c(&sched.next_decision_at(now));
        GK_OK
    })
}

pub(super) unsafe extern "C" fn gk_complete(
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

pub(super) unsafe extern "C" fn gk_drop_task(s: *mut SchedHandle, task: u64) -> i32 {
    ffi_guard(|| {
        non_null!(s);
        let mut sched = locked!(s);
        match sched.drop_task(task) {
            Ok(()) => GK_OK,
            Err(e) => sched_fail(&e),
        }
    })
}

pub(super) unsafe extern "C" fn gk_cancel_task(s: *mut SchedHandle, task: u64) -> i32 {
    ffi_guard(|| {
        non_null!(s);
        let mut sched = locked!(s);
        match sched.cancel(task) {
            Ok(()) => GK_OK,
            Err(e) => sched_fail(&e),
        }
    })
}

pub(super) unsafe extern "C" fn gk_task_state(s: *mut SchedHandle, task: u64, out_state: *mut i32) -> i32 {
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

pub(super) unsafe extern "C" fn gk_stats(s: *mut SchedHandle, out: *mut GkSchedStats) -> i32 {
    ffi_guard(|| {
        non_null!(s, out);
        let sched = locked!(s);
        *out = sched_stats_to_c(&sched.stats());
        GK_OK
    })
}

pub(super) unsafe extern "C" fn gk_stream_stats(s: *mut SchedHandle, stream: u32, out: *mut GkStreamStats) -> i32 {
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
