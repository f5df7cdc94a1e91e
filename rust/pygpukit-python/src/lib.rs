//! `pygpukit_dsp_core._pygpukit_dsp_core`: the PyO3 module (feature `python`) and the C ABI
//! (always built) over `pygpukit-core`.
//!
//! One file per exposed concept: [`capi`] (the `gk_sched_abi_v1` table and the structs of
//! `sched_abi.h`), and with the `python` feature `histogram`, `scheduler`, `pool`, `records`
//! (the dicts the classes return, one function per record) and `module` (the definition).

pub mod capi;

#[cfg(feature = "python")]
mod histogram;
#[cfg(feature = "python")]
mod module;
#[cfg(feature = "python")]
mod pool;
#[cfg(feature = "python")]
mod records;
#[cfg(feature = "python")]
mod scheduler;
