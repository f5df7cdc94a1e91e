//! The module definition (its export list is the whole native surface), its exceptions, and
//! the argument check the classes share.

use std::ffi::c_void;
use std::ptr::NonNull;

use pyo3::create_exception;
use pyo3::exceptions::{PyRuntimeError, PyValueError};
use pyo3::prelude::*;
use pyo3::types::PyCapsule;

use crate::capi;

create_exception!(
    pygpukit_dsp_core,
    SchedulerError,
    PyRuntimeError,
    "A scheduler call failed (unknown stream or task, duplicate name, blocks out of order, ...)."
);
create_exception!(
    pygpukit_dsp_core,
    AdmissionRefused,
    SchedulerError,
    "A stream was not admitted; the attributes carry the figures behind the refusal."
);
create_exception!(
    pygpukit_dsp_core,
    IllegalTransition,
    SchedulerError,
    "A task state change that the state machine does not allow."
);
create_exception!(pygpukit_dsp_core, PoolError, PyRuntimeError, "A memory-pool policy call failed.");
create_exception!(
    pygpukit_dsp_core,
    PoolBudgetExceeded,
    PoolError,
    "In-use blocks alone leave no room for the request under the device budget."
);

/// The C ABI function table (`gk_sched_abi_v1`) in a capsule named `pygpukit_dsp_core._sched_abi_v1`.
#[pyfunction]
pub fn sched_abi_capsule(py: Python<'_>) -> PyResult<Bound<'_, PyCapsule>> {
    let table = NonNull::from(&capi::SCHED_ABI_V1).cast::<c_void>();
    // SAFETY: the table is a `static`, valid for the life of the process; C only reads it.
    unsafe { PyCapsule::new_with_pointer(py, table, capi::GK_SCHED_ABI_CAPSULE_NAME) }
}

/// `int` >= 0 from a Python object, with an error that names the value.
pub(crate) fn non_negative(value: &Bound<'_, PyAny>, what: &str) -> PyResult<u64> {
    match value.extract::<u64>() {
        Ok(v) => Ok(v),
        Err(err) => match value.extract::<i64>() {
            Ok(v) if v < 0 => Err(PyValueError::new_err(format!("{what} must be >= 0, got {v}"))),
            _ => Err(err),
        },
    }
}

#[pymodule]
fn _pygpukit_dsp_core(m: &Bound<'_, PyModule>) -> PyResult<()> {
    let py = m.py();
    m.add("__version__", env!("CARGO_PKG_VERSION"))?;
    m.add("ABI_VERSION", capi::GK_SCHED_ABI_VERSION)?;
    m.add("SCHED_ABI_CAPSULE_NAME", capi::GK_SCHED_ABI_CAPSULE_NAME.to_str().expect("ascii"))?;
    m.add("SCHED_HANDLE_CAPSULE_NAME", capi::GK_SCHED_HANDLE_CAPSULE_NAME.to_str().expect("ascii"))?;
    m.add("POOL_HANDLE_CAPSULE_NAME", capi::GK_POOL_HANDLE_CAPSULE_NAME.to_str().expect("ascii"))?;
    m.add("SchedulerError", py.get_type::<SchedulerError>())?;
    m.add("AdmissionRefused", py.get_type::<AdmissionRefused>())?;
    m.add("IllegalTransition", py.get_type::<IllegalTransition>())?;
    m.add("PoolError", py.get_type::<PoolError>())?;
    m.add("PoolBudgetExceeded", py.get_type::<PoolBudgetExceeded>())?;
    m.add_class::<crate::histogram::PyLatencyHistogram>()?;
    m.add_class::<crate::scheduler::PyScheduler>()?;
    m.add_class::<crate::scheduler::PyDecision>()?;
    m.add_class::<crate::scheduler::PyCompletion>()?;
    m.add_class::<crate::pool::PyMemoryPoolPolicy>()?;
    m.add_class::<crate::pool::PyGrant>()?;
    m.add_function(wrap_pyfunction!(sched_abi_capsule, m)?)?;
    m.add_function(wrap_pyfunction!(crate::records::_record_fields, m)?)?;
    Ok(())
}
