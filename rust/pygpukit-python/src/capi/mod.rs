//! The C ABI of `native/include/gk/sched_abi.h`, version 1: one static table of
//! `extern "C"` functions ([`SCHED_ABI_V1`]) over the core scheduler and memory pool.
//!
//! Rules every function follows: null pointers and short structs are refused with a status
//! code; errors leave a message in a thread-local (`last_error`); panics are caught at the
//! boundary (`GK_ERR_PANIC`) and a handle whose mutex a panic poisoned answers
//! `GK_ERR_POISONED` from then on. Handles are `Arc`s handed out with `Arc::into_raw`.
//!
//! One file per part; this one lists them and holds the table:
//!
//! * `abi.rs`: every constant and `#[repr(C)]` struct, the header's one source (cbindgen).
//! * `handles.rs`: the objects behind `gk_sched*` and `gk_pool*`, shared with Python.
//! * `ffi.rs`: the boundary itself: the thread's last error, the panic guard, and the
//!   pointer checks every function starts with.
//! * `convert.rs`: core records to their C structs, and C inputs to core types.
//! * `sched.rs`, `pool.rs`: the table's functions.
//! * `header.rs` (tests only): the committed header is what cbindgen generates from `abi.rs`.

#![allow(unsafe_code)]
// The table's function pointers dereference raw pointers handed over by C; each function
// checks for null before doing so, and documents the remaining contract in the header.
#![allow(clippy::missing_safety_doc)]
// The bodies of these `unsafe extern "C"` functions are the unsafe contract itself.
#![allow(unsafe_op_in_unsafe_fn)]

use std::mem::size_of;

mod abi;
mod convert;
#[macro_use]
mod ffi;
mod handles;
mod pool;
mod sched;

#[cfg(test)]
mod header;

pub use abi::*;
pub use convert::{decision_to_c, pool_stats_to_c, refusal_to_c, sched_stats_to_c, stream_stats_to_c};
pub use ffi::{ffi_guard, last_error_message};
pub use handles::{ClockChoice, Poisoned, PoolHandle, PoolState, SchedHandle};
pub use pool::pool_config;

use pool::*;
use sched::*;

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

#[cfg(test)]
mod tests;
