//! `MemoryPoolPolicy` and `Grant`: thin wrappers over `pygpukit_core::memory`.

use std::ffi::c_void;
use std::ptr::NonNull;
use std::sync::{Arc, MutexGuard};

use pyo3::exceptions::{PyRuntimeError, PyValueError};
use pyo3::ffi;
use pyo3::prelude::*;
use pyo3::types::{PyCapsule, PyDict};

use pygpukit_core::memory::PoolError as CorePoolError;

use crate::capi::{self, PoolHandle, PoolState};
use crate::module::{PoolBudgetExceeded, PoolError};
use crate::records::{block_info_dict, pool_stats_dict};

fn pool_error(py: Python<'_>, e: CorePoolError) -> PyErr {
    match e {
        CorePoolError::InvalidConfig(_) | CorePoolError::Size(_) => PyValueError::new_err(e.to_string()),
        CorePoolError::OverBudget { requested, in_use, budget } => {
            let err = PoolBudgetExceeded::new_err(e.to_string());
            let value = err.value(py);
            let _ = value.setattr("requested", requested);
            let _ = value.setattr("in_use", in_use);
            let _ = value.setattr("budget", budget);
            err
        }
        other => PoolError::new_err(other.to_string()),
    }
}

/// Answer of `MemoryPoolPolicy.acquire()`.
#[pyclass(frozen, eq, name = "Grant", module = "pygpukit_dsp_core")]
#[derive(Clone, Debug, PartialEq)]
pub struct PyGrant {
    #[pyo3(get)]
    block: u64,
    #[pyo3(get)]
    bytes: u64,
    /// True: a cached block (memory already allocated). False: allocate `bytes` for it,
    /// after freeing the `evicted` blocks.
    #[pyo3(get)]
    reused: bool,
    #[pyo3(get)]
    evicted: Vec<u64>,
}

#[pymethods]
impl PyGrant {
    fn __repr__(&self) -> String {
        let reused = if self.reused { "True" } else { "False" };
        format!("Grant(block={}, bytes={}, reused={reused}, evicted={:?})", self.block, self.bytes, self.evicted)
    }
}

#[pyclass(frozen, name = "MemoryPoolPolicy", module = "pygpukit_dsp_core")]
pub struct PyMemoryPoolPolicy {
    handle: Arc<PoolHandle>,
}

impl PyMemoryPoolPolicy {
    fn lock(&self) -> PyResult<MutexGuard<'_, PoolState>> {
        self.handle.lock().map_err(|p| PyRuntimeError::new_err(p.to_string()))
    }
}

unsafe extern "C" fn drop_pool_handle(capsule: *mut ffi::PyObject) {
    // SAFETY: called once when the capsule dies; the pointer owns one `Arc` reference.
    unsafe {
        let p = ffi::PyCapsule_GetPointer(capsule, capi::GK_POOL_HANDLE_CAPSULE_NAME.as_ptr());
        if !p.is_null() {
            drop(Arc::from_raw(p.cast_const().cast::<PoolHandle>()));
        }
    }
}

#[pymethods]
impl PyMemoryPoolPolicy {
    #[new]
    #[pyo3(signature = (*, cache_budget_bytes = 268_435_456, device_budget_bytes = None, min_block_bytes = 256, steps_per_doubling = 4))]
    fn new(
        cache_budget_bytes: u64,
        device_budget_bytes: Option<u64>,
        min_block_bytes: u64,
        steps_per_doubling: u32,
    ) -> PyResult<Self> {
        let config = capi::pool_config(min_block_bytes, steps_per_doubling, cache_budget_bytes, device_budget_bytes)
            .map_err(|e| PyValueError::new_err(e.to_string()))?;
        let handle = PoolHandle::new(config).map_err(|e| PyValueError::new_err(e.to_string()))?;
        Ok(PyMemoryPoolPolicy { handle })
    }

    /// Bytes a request of `size` is rounded up to.
    fn class_size(&self, size: u64) -> PyResult<u64> {
        let state = self.lock()?;
        state.pool.config().size_classes.round_up(size).map_err(|e| PyValueError::new_err(e.to_string()))
    }

    fn acquire(&self, py: Python<'_>, size: u64) -> PyResult<PyGrant> {
        let g = self.lock()?.pool.acquire(size).map_err(|e| pool_error(py, e))?;
        Ok(PyGrant { block: g.block, bytes: g.bytes, reused: g.reused, evicted: g.evicted })
    }

    /// Cache a block; returns the blocks evicted to stay under the cache budget (free them).
    fn release(&self, py: Python<'_>, block: u64) -> PyResult<Vec<u64>> {
        self.lock()?.pool.release(block).map_err(|e| pool_error(py, e))
    }

    /// Forget a block its owner freed directly (or whose allocation failed).
    fn discard(&self, py: Python<'_>, block: u64) -> PyResult<()> {
        self.lock()?.pool.discard(block).map_err(|e| pool_error(py, e))
    }

    /// Evict least recently used cached blocks down to `target_cached_bytes`; returns them.
    #[pyo3(signature = (target_cached_bytes = 0))]
    fn trim(&self, target_cached_bytes: u64) -> PyResult<Vec<u64>> {
        Ok(self.lock()?.pool.trim(target_cached_bytes))
    }

    fn block_info<'py>(&self, py: Python<'py>, block: u64) -> PyResult<Option<Bound<'py, PyDict>>> {
        let Some(info) = self.lock()?.pool.block(block) else { return Ok(None) };
        Ok(Some(block_info_dict(py, &info)?))
    }

    /// Cached block ids, least recently used first (the eviction order).
    fn cached_lru_order(&self) -> PyResult<Vec<u64>> {
        Ok(self.lock()?.pool.cached_lru_order())
    }

    fn stats<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyDict>> {
        let state = self.lock()?;
        pool_stats_dict(py, &state.pool.stats(), state.to_free.len())
    }

    /// This pool as a `gk_pool*` capsule (`pygpukit_dsp_core._pool_handle_v1`) for the C ABI.
    fn capsule<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyCapsule>> {
        let raw = Arc::into_raw(Arc::clone(&self.handle)).cast_mut().cast::<c_void>();
        let pointer = NonNull::new(raw).expect("Arc pointers are not null");
        // SAFETY: `raw` owns one reference, released by `drop_pool_handle` when the capsule dies.
        let capsule = unsafe {
            PyCapsule::new_with_pointer_and_destructor(
                py,
                pointer,
                capi::GK_POOL_HANDLE_CAPSULE_NAME,
                Some(drop_pool_handle),
            )
        };
        if capsule.is_err() {
            // SAFETY: the capsule was not created, so the reference is still ours.
            unsafe { drop(Arc::from_raw(raw.cast_const().cast::<PoolHandle>())) };
        }
        capsule
    }

    fn __repr__(&self) -> PyResult<String> {
        let s = self.lock()?.pool.stats();
        Ok(format!(
            "MemoryPoolPolicy(in_use={} B, cached={} B, hits={}, misses={}, evictions={})",
            s.bytes_in_use, s.bytes_cached, s.hits, s.misses, s.evictions
        ))
    }
}
