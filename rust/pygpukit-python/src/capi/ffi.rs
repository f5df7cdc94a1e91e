//! The boundary itself, in one place: the thread's last error message, the guard that turns
//! a panic into `GK_ERR_PANIC`, and the checks every function starts with (`non_null!`,
//! `struct_size!`, `locked!`).

use std::cell::RefCell;
use std::panic::{catch_unwind, AssertUnwindSafe};

use pygpukit_core::memory::PoolError;
use pygpukit_core::scheduler::SchedError;

use super::abi::GK_ERR_PANIC;

thread_local! {
    static LAST_ERROR: RefCell<String> = const { RefCell::new(String::new()) };
}

pub(super) fn set_last_error(message: impl Into<String>) {
    let message = message.into();
    LAST_ERROR.with(|e| *e.borrow_mut() = message);
}

/// The last error message recorded on this thread (empty if none).
pub fn last_error_message() -> String {
    LAST_ERROR.with(|e| e.borrow().clone())
}

pub(super) fn fail(code: i32, message: impl Into<String>) -> i32 {
    set_last_error(message);
    code
}

pub(super) fn sched_fail(e: &SchedError) -> i32 {
    fail(e.code(), e.to_string())
}

pub(super) fn pool_fail(e: &PoolError) -> i32 {
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
            return $crate::capi::ffi::fail($crate::capi::GK_ERR_NULL_POINTER, concat!("`", stringify!($p), "` must not be NULL"));
        })+
    };
}

macro_rules! struct_size {
    ($p:ident, $t:ty) => {
        if ((*$p).struct_size as usize) < ::std::mem::size_of::<$t>() {
            return $crate::capi::ffi::fail(
                $crate::capi::GK_ERR_STRUCT_SIZE,
                format!(
                    concat!("`", stringify!($p), "`: struct_size {} is smaller than sizeof(", stringify!($t), ") = {}"),
                    (*$p).struct_size,
                    ::std::mem::size_of::<$t>()
                ),
            );
        }
    };
}

macro_rules! locked {
    ($handle:ident) => {
        match (*$handle).lock() {
            Ok(guard) => guard,
            Err(p) => return $crate::capi::ffi::fail($crate::capi::GK_ERR_POISONED, p.to_string()),
        }
    };
}
