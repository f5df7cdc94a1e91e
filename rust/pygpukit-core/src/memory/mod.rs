//! Device memory-pool *policy*: which buffer to reuse, when to allocate, what to free.
//!
//! The policy never touches device memory. It hands out block ids and byte
//! counts; the caller (the C++ engine) maps ids to device pointers, calls
//! `cuMemAlloc` when told to allocate and `cuMemFree` for every evicted id.

pub mod pool;
pub mod size_class;

pub use pool::{BlockId, BlockInfo, BlockState, Grant, MemoryPool, PoolConfig, PoolError, PoolStats};
pub use size_class::{SizeClassError, SizeClasses};
