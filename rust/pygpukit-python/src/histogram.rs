//! `LatencyHistogram`: the HDR histogram of `pygpukit_core::histogram`.

use pyo3::exceptions::PyValueError;
use pyo3::prelude::*;
use pyo3::types::PyDict;

use pygpukit_core::histogram::LatencyHistogram;

use crate::module::non_negative;
use crate::records::latency_summary_dict;

#[pyclass(name = "LatencyHistogram", module = "pygpukit_dsp_core")]
pub struct PyLatencyHistogram {
    inner: LatencyHistogram,
}

#[pymethods]
impl PyLatencyHistogram {
    #[new]
    #[pyo3(signature = (lowest_ns = 1, highest_ns = 3_600_000_000_000, significant_figures = 3))]
    fn new(lowest_ns: u64, highest_ns: u64, significant_figures: u8) -> PyResult<Self> {
        LatencyHistogram::new(lowest_ns, highest_ns, significant_figures)
            .map(|inner| PyLatencyHistogram { inner })
            .map_err(|e| PyValueError::new_err(e.to_string()))
    }

    fn record(&mut self, ns: &Bound<'_, PyAny>) -> PyResult<()> {
        let v = non_negative(ns, "latency (ns)")?;
        self.inner.record(v);
        Ok(())
    }

    fn record_n(&mut self, ns: &Bound<'_, PyAny>, count: &Bound<'_, PyAny>) -> PyResult<()> {
        let v = non_negative(ns, "latency (ns)")?;
        let n = non_negative(count, "count")?;
        self.inner.record_n(v, n);
        Ok(())
    }

    /// Record every int of an iterable. Validated first: on a bad value nothing is recorded.
    fn record_many(&mut self, values: &Bound<'_, PyAny>) -> PyResult<()> {
        let mut parsed = Vec::new();
        for (i, item) in values.try_iter()?.enumerate() {
            parsed.push(non_negative(&item?, &format!("latency at index {i} (ns)"))?);
        }
        self.inner.record_many(&parsed);
        Ok(())
    }

    fn percentile(&self, p: f64) -> PyResult<u64> {
        self.inner.percentile(p).map_err(|e| PyValueError::new_err(e.to_string()))
    }

    #[getter]
    fn count(&self) -> u64 {
        self.inner.count()
    }

    #[getter]
    fn min(&self) -> u64 {
        self.inner.min()
    }

    #[getter]
    fn max(&self) -> u64 {
        self.inner.max()
    }

    #[getter]
    fn mean(&self) -> f64 {
        self.inner.mean()
    }

    #[getter]
    fn clamped(&self) -> u64 {
        self.inner.clamped()
    }

    #[getter]
    fn lowest_ns(&self) -> u64 {
        self.inner.lowest()
    }

    #[getter]
    fn highest_ns(&self) -> u64 {
        self.inner.highest()
    }

    #[getter]
    fn significant_figures(&self) -> u8 {
        self.inner.significant_figures()
    }

    fn reset(&mut self) {
        self.inner.reset();
    }

    /// Add every value of `other` (which may be this histogram itself).
    fn merge(slf: &Bound<'_, Self>, other: &Bound<'_, PyLatencyHistogram>) -> PyResult<()> {
        let copy = other.try_borrow()?.inner.clone();
        slf.try_borrow_mut()?.inner.merge(&copy);
        Ok(())
    }

    fn summary<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyDict>> {
        latency_summary_dict(py, &self.inner.summary())
    }

    fn __len__(&self) -> usize {
        self.inner.count() as usize
    }

    fn __repr__(&self) -> String {
        let s = self.inner.summary();
        format!(
            "LatencyHistogram(count={}, min={}, p50={}, p99={}, max={}, clamped={})",
            s.count, s.min, s.p50, s.p99, s.max, s.clamped
        )
    }
}
