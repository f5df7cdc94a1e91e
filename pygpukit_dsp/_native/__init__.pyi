# Type stubs for the private pybind11 module pygpukit_dsp._native (native/bindings/*.cpp).
# pygpukit-dsp native layer: CUDA driver, NVRTC, cuFFT and cuBLAS loaded at run time.
# Importing it opens no CUDA library; the first call that needs one does. Native errors are
# raised as pygpukit_dsp.errors.{CompileError, UnsupportedError, DeviceError, GkError}.
# A stub package because the module has a submodule: instrument.pyi (the benchmarks' apparatus).
from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np
import numpy.typing as npt
from typing_extensions import Buffer, CapsuleType, Self, TypeAlias

from . import instrument as instrument

# (channels, items, bins, dtype); dtype is 'float32' or 'complex64'.
_Layout: TypeAlias = tuple[int, int, int, str]
# A block of an engine's input/output layout: (channels, n) or (channels, n, bins), C-contiguous.
_Block: TypeAlias = npt.NDArray[np.float32] | npt.NDArray[np.complex64]
# Grid / block dimensions: an int or 1 to 3 ints, each in [1, 2**31 - 1].
_Dim3: TypeAlias = int | tuple[int] | tuple[int, int] | tuple[int, int, int] | list[int]

MIN_SM: tuple[int, int]  # (8, 0): oldest supported compute capability

# --- loader, capabilities (module.cpp) ---
def set_library_dirs(dirs: Sequence[str]) -> None: ...  # searched first for NVRTC/cuFFT/cuBLAS
def library_dirs() -> list[str]: ...

# {'driver', 'nvrtc' (+ 'archs': list[int]), 'cufft', 'cublas': {found, path, version, reason},
#  'gpus': [{index, name, sm, arch, memory_bytes, multiprocessors, usable, reason}], 'gpus_reason'};
# never raises.
def capabilities(math_libraries: bool = True) -> dict[str, Any]: ...  # + "kernels"; no cufft/cublas keys without math_libraries
def device_count() -> int: ...  # raises DeviceError without a driver
def sm_refusal(index: int, name: str, sm_major: int, sm_minor: int) -> str | None: ...

# --- JIT (bind_jit.cpp) ---
def compile(
    name: str,
    source: str,
    arch: str,
    *,
    fast_math: bool = False,
    line_info: bool = False,
    options: Sequence[str] = [],
) -> CompileResult: ...  # CUDA C -> CUBIN for arch ('sm_80', 'sm_90'); raises CompileError
def compile_embedded(
    name: str,
    arch: str,
    *,
    fast_math: bool = False,
    line_info: bool = False,
    options: Sequence[str] = [],
) -> CompileResult: ...
def embedded_kernels() -> dict[str, str]: ...  # {name: source} of the embedded kernel files
def embedded_headers() -> dict[str, str]: ...  # {file name: source} every compile can #include
def nvrtc_options(
    arch: str, *, fast_math: bool = False, line_info: bool = False, options: Sequence[str] = []
) -> list[str]: ...
def jit_cache_dir() -> str: ...  # '' when the disk cache is off
def jit_stats() -> dict[str, int]: ...
def clear_jit_memory_cache() -> None: ...
# kernels compiled at wheel build time (pygpukit_dsp/_kernels/, native/jit/shipped.cpp)
def shipped_kernels() -> dict[str, Any]: ...  # summary + 'images': [{kernel, arch, kind, file, bytes, sha256, source_sha256, key, options, current}]
def shipped_kernels_dir() -> str: ...
def kernel_sources(arch: str) -> list[dict[str, str]]: ...  # [{kernel, source: shipped|disk|nvrtc|unavailable, image, note}]
def kernel_loads() -> list[dict[str, Any]]: ...  # modules loaded in this process: {kernel, device, device_arch, source, image, note, fetch_ms, load_ms}
def clear_kernel_loads() -> None: ...

# --- engine (bind_engine.cpp) ---
def registered_ops() -> list[str]: ...  # op kinds this build implements on CUDA (sorted)
def monotonic_ns() -> int: ...  # CLOCK_MONOTONIC ns (time.perf_counter_ns's clock)
def wait_until(t_ns: int, spin_us: int = 0) -> None: ...  # sleep (GIL released) to spin_us + the wake guard before t_ns, then spin
def wake_guard_us() -> float: ...  # the calling thread's learned wake-up lateness (native/engine/wake.h)
def set_wake_guard_us(us: float) -> None: ...  # tests
def wake_guard_next(guard_ns: int, late_ns: int) -> int: ...  # tests: the learning rule
def copy_threads() -> int: ...  # threads a large copy into pinned memory uses, the caller included
def set_copy_threads(n: int) -> None: ...  # 0: the default (GK_COPY_THREADS, or a quarter of the cores, 1..4)
def copy_stats() -> dict[str, int]: ...  # split_copies, chunks, helper_chunks, helper_spin_us
def copy_bytes(dst: np.ndarray, src: np.ndarray) -> None: ...  # a slot fill's copy (tests, benchmarks)
# admission's rehearsal (and the capacity study); an engine or an instrument.RoundTripFloor per stream
def run_paced(engines: list[StreamEngine | instrument.RoundTripFloor], periods_ns: list[int], phases_ns: list[int], inputs: list[list[np.ndarray]],
              warmup_s: float, seconds: float, threads: int = 2, spin_us: int = 100,
              watch_gap_us: float = 0.0) -> dict[str, Any]: ...

class Device:
    """One GPU with its primary context (refused below SM 8.0)."""

    def __init__(self, index: int = 0) -> None: ...
    @property
    def index(self) -> int: ...
    @property
    def name(self) -> str: ...
    @property
    def arch(self) -> str: ...  # 'sm_90'
    @property
    def sm(self) -> tuple[int, int]: ...
    @property
    def highest_stream_priority(self) -> int: ...
    @property
    def lowest_stream_priority(self) -> int: ...
    def properties(self) -> dict[str, Any]: ...  # ints, plus name/arch: str, sm/pci_bus: tuple, 3 bools
    def memory_info(self) -> tuple[int, int]: ...  # (free, total) bytes
    def synchronize(self) -> None: ...
    def memory_stats(self) -> dict[str, int]: ...  # pool byte counts and counters (grants, granted_bytes); 'caching' is a bool
    def reserve_memory(self, sizes: Sequence[int]) -> int: ...  # one up-front grant for these sizes; bytes granted
    def library_objects(self) -> dict[str, int]: ...  # cuFFT plans / cuBLAS handles: made, reused, destroyed, idle
    def clear_library_objects(self) -> None: ...
    def cached_blocks(self) -> list[tuple[int, int]]: ...  # [(size-class bytes, count)]
    def trim_memory_cache(self, keep_bytes: int = 0) -> int: ...  # returns bytes freed
    def set_memory_caching(self, enabled: bool) -> None: ...
    def load_module(
        self, name: str, *, fast_math: bool = False, line_info: bool = False, options: Sequence[str] = []
    ) -> Module: ...  # compile (or fetch from cache) an embedded kernel file and load it
    def load_cubin(self, cubin: bytes, name: str = "module") -> Module: ...
    def __eq__(self, other: object) -> bool: ...  # identity of the underlying device
    def __hash__(self) -> int: ...

class DeviceBuffer:
    """Device memory from the GPU's pool (freed back to it when dropped)."""

    def __init__(self, device: Device, nbytes: int) -> None: ...
    @property
    def nbytes(self) -> int: ...
    @property
    def ptr(self) -> int: ...  # CUdeviceptr
    @property
    def device(self) -> Device: ...
    # src/dst: any C-contiguous buffer (NumPy array, PinnedBuffer); dst must be writable.
    def copy_from_host(self, src: Buffer, *, offset: int = 0, stream: Stream | None = None) -> None: ...
    def copy_to_host(self, dst: Buffer, *, offset: int = 0, stream: Stream | None = None) -> None: ...
    def copy_from(
        self,
        src: DeviceBuffer,
        *,
        nbytes: int | None = None,  # None: the rest of src from src_offset
        dst_offset: int = 0,
        src_offset: int = 0,
        stream: Stream | None = None,
    ) -> None: ...
    def memset(
        self, value: int = 0, *, nbytes: int | None = None, offset: int = 0, stream: Stream | None = None
    ) -> None: ...  # value: a byte (0-255); nbytes None: to the end
    def __len__(self) -> int: ...

class PinnedBuffer:
    """Page-locked host memory; numpy.frombuffer(buf, dtype) views it without a copy."""

    def __init__(self, device: Device, nbytes: int) -> None: ...
    def __buffer__(self, flags: int, /) -> memoryview: ...  # buffer protocol (1-D uint8)
    @property
    def nbytes(self) -> int: ...
    @property
    def ptr(self) -> int: ...  # host address
    @property
    def device(self) -> Device: ...
    def __len__(self) -> int: ...

class Stream:
    """Non-blocking CUDA stream; lower priority numbers run first."""

    def __init__(self, device: Device, priority: int = 0) -> None: ...
    @property
    def handle(self) -> int: ...  # CUstream address
    @property
    def priority(self) -> int: ...
    @property
    def device(self) -> Device: ...
    def synchronize(self) -> None: ...
    def query(self) -> bool: ...  # True when all queued work has finished
    def wait(self, event: Event) -> None: ...  # later work on this stream waits for the event

class Event:
    def __init__(self, device: Device, timing: bool = False, blocking_sync: bool = False) -> None: ...
    @property
    def timing(self) -> bool: ...
    def record(self, stream: Stream | None = None) -> None: ...
    def synchronize(self) -> None: ...
    def query(self) -> bool: ...
    @staticmethod
    def elapsed_ms(start: Event, end: Event) -> float: ...  # both timing events, both completed

class CompileResult:
    """A CUBIN from NVRTC or from a cache."""

    @property
    def name(self) -> str: ...
    @property
    def arch(self) -> str: ...
    @property
    def key(self) -> str: ...
    @property
    def log(self) -> str: ...
    @property
    def cache(self) -> str: ...  # 'compiled', 'memory' or 'disk'
    @property
    def cache_path(self) -> str: ...
    @property
    def cubin(self) -> bytes: ...

class Module:
    @property
    def name(self) -> str: ...
    @property
    def device(self) -> Device: ...
    def function(self, name: str) -> Kernel: ...  # the extern "C" __global__ function of that name

class Kernel:
    @property
    def name(self) -> str: ...
    @property
    def max_threads_per_block(self) -> int: ...
    @property
    def parameter_sizes(self) -> list[int] | None: ...  # bytes per parameter; None when driver < 12.4
    def attributes(self) -> dict[str, int]: ...
    def set_max_dynamic_shared_memory(self, nbytes: int) -> None: ...
    # args: DeviceBuffer (its pointer), NumPy scalars (np.float32(x), ...) or bytes (a struct);
    # Python int/float are refused (ambiguous C type).
    def launch(
        self,
        grid: _Dim3,
        block: _Dim3,
        args: Sequence[DeviceBuffer | np.generic | bytes],
        stream: Stream | None = None,
        shared_mem: int = 0,
    ) -> None: ...

class StreamEngine:
    """One pipeline's ops on one GPU, fed through pinned slots by a native worker thread."""

    # ops: [{'kind', 'name', 'in': _Layout, 'out': _Layout, 'params': {...}}]; inline_submit:
    # process() runs an idle engine's block on the calling thread; mapped_io (single_stream only):
    # kernels move blocks through device-mapped pinned slots; direct_output: the last op writes the
    # mapped output itself; zero_nonfinite: NaN/Inf input samples become 0 on the GPU; graph: a
    # flowgraph's memory plan (cuda_graph_plan.GraphPlan.native(); docs/cuda.md, "The engine's DAG").
    def __init__(
        self,
        device: Device,
        ops: list[dict[str, Any]],
        slots: int = 2,
        priority: int = 0,
        use_graph: bool = True,
        spin_us: int = 200,
        single_stream: bool = False,
        inline_submit: bool = False,
        mapped_io: bool = False,
        direct_output: bool = True,
        zero_nonfinite: bool = False,
        graph: dict[str, Any] | None = None,
    ) -> None: ...
    @property
    def slots(self) -> int: ...
    @property
    def input_layout(self) -> _Layout: ...  # of a full input block
    @property
    def output_layout(self) -> _Layout: ...  # of a full output block
    @property
    def use_graph(self) -> bool: ...
    @property
    def priority(self) -> int: ...
    @property
    def spin_us(self) -> int: ...
    @property
    def mapped_io(self) -> bool: ...
    @property
    def direct_output(self) -> bool: ...  # the last op writes the mapped output (no push kernel)
    @property
    def single_stream(self) -> bool: ...
    @property
    def inline_submit(self) -> bool: ...
    @property
    def inline_blocks(self) -> int: ...  # blocks process() ran on the calling thread
    @property
    def closed(self) -> bool: ...
    @property
    def stages(self) -> list[tuple[str, str]]: ...  # [(op kind, stage name)] in order
    @property
    def units_per_block(self) -> int: ...  # the scheduler's units_per_block
    @property
    def is_graph(self) -> bool: ...  # built from a flowgraph's plan
    @property
    def block_items(self) -> int: ...  # items of a full source block
    def sink_items(self, slot: int) -> list[int]: ...  # a graph's valid items of each sink
    def process_filled(self, slot: int, n_valid: int, final: bool = False) -> int: ...
    # a graph's full block: sources into their slices, run, each sink's block into outs (plan order)
    def process_graph(self, slot: int, ins: Sequence[_Block], outs: Sequence[_Block]) -> int: ...
    def process_split_filled(self, slot: int, n_valid: int, final: bool, cuts: Sequence[int]) -> int: ...
    @property
    def attached(self) -> bool: ...
    def input_slot(self, slot: int) -> _Block: ...  # writable view of the slot's pinned input
    def output_slot(self, slot: int) -> _Block: ...  # view of the slot's pinned output
    # uint32, one word per slot (64-byte stride): non-zero once a block in it held NaN/Inf input
    @property
    def nonfinite_flags(self) -> npt.NDArray[np.uint32]: ...
    def take_nonfinite(self, slot: int) -> tuple[int, int]: ...  # (count, first float32 word); clears it
    def submit(self, slot: int, n_valid: int, final: bool = False) -> None: ...  # non-blocking
    # a new array, or `out` (the full output block's shape) filled (a view of its valid items)
    def process(self, slot: int, block: _Block, final: bool = False, out: _Block | None = None) -> _Block: ...
    def try_wait(self, slot: int) -> int | None: ...  # valid output items once done, else None
    def fill(self, slot: int, block: _Block) -> None: ...  # copy in and zero the tail
    def fill_bytes(self, slot: int, offset: int, block: _Block) -> None: ...  # an array's bytes at a byte offset
    def wait(self, slot: int) -> int: ...  # valid output items of the slot's block
    def reset(self) -> None: ...
    def close(self) -> None: ...
    def set_gpu_timing(self, on: bool) -> None: ...  # events around each block process() runs itself
    @property
    def last_gpu_ns(self) -> int: ...  # GPU time of the last block timed; 0: none or not timed
    @property
    def last_launch_ns(self) -> int: ...  # host time queueing the last timed block took
    def set_trace(self, capacity: int) -> None: ...  # last `capacity` process() calls; 0: off
    # (n, 9): call, filled, launch_begin, launched, done_seen, woke (ns), gpu_ns, scheduled, copied (ns).
    def trace(self) -> npt.NDArray[np.uint64]: ...
    def counters(self) -> dict[str, int]: ...
    @property
    def build_timings(self) -> list[tuple[str, float]]: ...  # [(constructor step, ms)]
    def process_split(self, slot: int, block: _Block, final: bool, cuts: Sequence[int]) -> _Block: ...
    def attach(self, dispatcher: Dispatcher, sched_stream: int) -> None: ...
    def detach(self) -> None: ...  # back to the engine's own worker
    def __enter__(self) -> Self: ...
    def __exit__(self, *args: object) -> None: ...  # close()

# --- dispatch (bind_dispatch.cpp) ---
class Dispatcher:
    """One native worker thread launching attached StreamEngines' blocks in a Scheduler's order."""

    # scheduler_capsule: pygpukit_dsp_core.Scheduler.capsule()
    def __init__(self, device: Device, scheduler_capsule: CapsuleType, spin_us: int = 200) -> None: ...
    def close(self) -> None: ...  # drain every handed-over block, then stop the worker
    @property
    def closed(self) -> bool: ...
    @property
    def device(self) -> Device: ...  # one dispatcher per GPU: the GPU whose engines it launches
    @property
    def device_index(self) -> int: ...
    def stats(self) -> dict[str, Any]: ...  # counters; slow_steps and longest_step_ns by kind of step
    @property
    def time_every(self) -> int: ...  # one whole block in every time_every timed, after a stream's first 16
    @time_every.setter
    def time_every(self, n: int) -> None: ...
    def start_timeline(self) -> None: ...  # record each timed chunk's (start, stop) on the GPU from now
    def stop_timeline(self) -> np.ndarray: ...  # int64 (k, 2): ns after start_timeline's reference event
    def watch_off_cpu(self, gap_us: float) -> None: ...
    def off_cpu_gaps(self) -> np.ndarray: ...  # int64 (k, 6), instrument.OffCpuMeter.gaps' columns
    @staticmethod
    def now_ns() -> int: ...  # the scheduler's clock (CLOCK_MONOTONIC), ns
