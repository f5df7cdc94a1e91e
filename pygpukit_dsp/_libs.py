"""Where NVIDIA's pip wheels put their shared libraries, for the native loader.

The native module opens NVRTC, cuFFT and cuBLAS at run time. It tries the folders listed here
first, then the system search path. CUDA 13 wheels install into ``nvidia/cu13/lib``; CUDA 12
wheels into one folder per library (``nvidia/cuda_nvrtc/lib``, ``nvidia/cufft/lib``, ...).
``$GK_CUDA_LIB_DIRS`` (``os.pathsep``-separated) comes before all of them.
"""

from __future__ import annotations

import os
import sys
import threading
from pathlib import Path

# Relative to each sys.path entry; newest layout first.
WHEEL_LIB_SUBDIRS: tuple[str, ...] = (
    "nvidia/cu13/lib",
    "nvidia/cu12/lib",
    "nvidia/cuda_nvrtc/lib",
    "nvidia/cufft/lib",
    "nvidia/cublas/lib",
    "nvidia/cuda_runtime/lib",
)

_configured = False
_lock = threading.Lock()


def nvidia_library_dirs(search_path: list[str] | None = None,
                        env: dict[str, str] | None = None) -> list[str]:
    """Existing NVIDIA library folders: ``$GK_CUDA_LIB_DIRS`` first, then wheel folders on sys.path."""
    environ = os.environ if env is None else env
    dirs: list[str] = []
    for entry in environ.get("GK_CUDA_LIB_DIRS", "").split(os.pathsep):
        if entry:
            dirs.append(os.path.abspath(entry))
    for entry in sys.path if search_path is None else search_path:
        base = Path(entry or ".")
        for sub in WHEEL_LIB_SUBDIRS:
            candidate = base / sub
            if candidate.is_dir():
                dirs.append(str(candidate.resolve()))
    unique: list[str] = []
    for d in dirs:
        if d not in unique:
            unique.append(d)
    return unique


def configure_native() -> list[str]:
    """Hand the folders to ``pygpukit_dsp._native`` once per process; returns them.

    The native module calls this itself before it first opens a library, so callers rarely need to.
    """
    global _configured
    from pygpukit_dsp import _native

    with _lock:
        if _configured:
            return list(_native.library_dirs())
        dirs = nvidia_library_dirs()
        _native.set_library_dirs(dirs)
        _configured = True
        return dirs


__all__ = ["WHEEL_LIB_SUBDIRS", "nvidia_library_dirs", "configure_native"]
