//! The table's memory-pool functions (ids only: the caller does every cuMemAlloc/cuMemFree).

use std::panic::{catch_unwind, AssertUnwindSafe};
use std::sync::Arc;

use pygpukit_core::memory::{PoolConfig, PoolError, SizeClasses};

use super::abi::*;
use super::convert::pool_stats_to_c;
use super::ffi::{fail, ffi_guard, pool_fail};
use super::handles::PoolHandle;

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

pub(super) unsafe extern "C" fn gk_pool_create(config: *const GkPoolConfig, out: *mut *mut PoolHandle) -> i32 {
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

pub(super) unsafe extern "C" fn gk_pool_retain(p: *mut PoolHandle) {
    if !p.is_null() {
        Arc::increment_strong_count(p.cast_const());
    }
}

pub(super) unsafe extern "C" fn gk_pool_release(p: *mut PoolHandle) {
    if !p.is_null() {
        let _ = catch_unwind(AssertUnwindSafe(|| Arc::decrement_strong_count(p.cast_const())));
    }
}

pub(super) unsafe extern "C" fn gk_pool_acquire_block(p: *mut PoolHandle, size: u64, out: *mut GkPoolGrant) -> i32 {
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

pub(super) unsafe extern "C" fn gk_pool_release_block(p: *mut PoolHandle, block: u64, out_to_free: *mut u32) -> i32 {
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

pub(super) unsafe extern "C" fn gk_pool_discard_block(p: *mut PoolHandle, block: u64) -> i32 {
    ffi_guard(|| {
        non_null!(p);
        let mut state = locked!(p);
        match state.pool.discard(block) {
            Ok(()) => GK_OK,
            Err(e) => pool_fail(&e),
        }
    })
}

pub(super) unsafe extern "C" fn gk_pool_trim(p: *mut PoolHandle, target: u64, out_to_free: *mut u32) -> i32 {
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

pub(super) unsafe extern "C" fn gk_pool_take_to_free(
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

pub(super) unsafe extern "C" fn gk_pool_stats(p: *mut PoolHandle, out: *mut GkPoolStats) -> i32 {
    ffi_guard(|| {
        non_null!(p, out);
        let state = locked!(p);
        *out = pool_stats_to_c(&state.pool.stats(), state.to_free.len());
        GK_OK
    })
}
