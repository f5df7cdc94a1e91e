"""What this machine offers for the CUDA backend, and why not when it doesn't.

``capabilities()`` works everywhere: without a GPU, without a driver, even without the native
module; every missing piece comes with a reason. ``cuda_usable()`` reduces it to the one answer
``backend: auto`` needs::

    >>> ok, why = cuda_usable()
    >>> ok, why
    (False, 'CUDA driver not detected (libcuda.so.1: cannot open shared object file: ...)')
"""

from __future__ import annotations

from typing import Any

_LIBRARIES = ("driver", "nvrtc", "cufft", "cublas")


def _missing(reason: str) -> dict[str, Any]:
    return {"found": False, "path": "", "version": "", "reason": reason}


def _without_native(reason: str) -> dict[str, Any]:
    caps: dict[str, Any] = {name: _missing(reason) for name in _LIBRARIES}
    caps["nvrtc"]["archs"] = []
    caps["native"] = _missing(reason)
    caps["kernels"] = {"found": False, "enabled": False, "dir": "", "nvrtc": "", "archs": [], "ptx": [],
                       "images": 0, "kernels": 0, "reason": reason}
    caps["gpus"] = []
    caps["gpus_reason"] = reason
    return caps


def capabilities(math_libraries: bool = True) -> dict[str, Any]:
    """Driver, NVRTC, cuFFT, cuBLAS and GPUs, each with ``found``/``usable`` and a ``reason``.

    Keys: ``native``, ``driver``, ``nvrtc`` (plus ``archs``), ``cufft``, ``cublas``: each
    ``{found, path, version, reason}``; ``kernels``: the kernel images shipped in the wheel
    (``{found, enabled, dir, nvrtc, archs, ptx, images, kernels, reason}``); ``gpus``: one entry
    per GPU of the host, ``[{index, name, sm, arch, memory_bytes, multiprocessors, pci_bus_id,
    clock_mhz, memory_clock_mhz, memory_bus_width_bits, memory_bandwidth_gbs, l2_cache_bytes,
    copy_engines, usable, reason}]``; ``gpus_reason``: why ``gpus`` is empty.

    ``math_libraries=False`` leaves cuFFT and cuBLAS unopened (no ``cufft``/``cublas`` keys):
    they are large libraries whose loading costs a first block that does not use them, and the
    ops that use them check them. :func:`cuda_usable` asks that way.
    """
    try:
        from pygpukit_dsp import _native
    except ImportError as exc:
        return _without_native(
            f"the native module pygpukit_dsp._native is not available ({exc}); "
            "reinstall pygpukit-dsp so that it is built")
    from pygpukit_dsp._libs import configure_native

    configure_native()
    caps = dict(_native.capabilities(math_libraries=math_libraries))
    caps["native"] = {"found": True, "path": str(getattr(_native, "__file__", "")), "version": "",
                      "reason": ""}
    return caps


def usable_from(caps: dict[str, Any], device: int = 0) -> tuple[bool, str]:
    """The verdict of :func:`cuda_usable` for an already collected ``capabilities()`` dict."""
    native = caps.get("native", {"found": True})
    if not native.get("found", False):
        return False, native.get("reason", "the native module is not available")
    driver = caps["driver"]
    if not driver["found"]:
        return False, f"CUDA driver not detected ({driver['reason']})"
    gpus = caps.get("gpus", [])
    if not gpus:
        return False, caps.get("gpus_reason") or "No GPU devices found"
    if device < 0 or device >= len(gpus):
        return False, (f"GPU {device} does not exist: this machine has {len(gpus)} GPU(s) "
                       f"(0..{len(gpus) - 1})")
    gpu = gpus[device]
    if not gpu["usable"]:
        return False, gpu["reason"]
    nvrtc = caps["nvrtc"]
    major, minor = gpu["sm"]
    shipped = shipped_image_for(caps.get("kernels"), major * 10 + minor)
    if not nvrtc["found"]:
        if shipped is None:
            return False, f"NVRTC JIT compiler not available ({nvrtc['reason']})"
        # the built-in stages load the kernels shipped in the wheel; a custom kernel stage still
        # needs NVRTC and says so when its engine is built
        return True, (f"GPU {gpu['index']} ({gpu['name']}), SM {major}.{minor}, "
                      f"driver {driver['version']}, kernels shipped ({shipped}); no NVRTC")
    return True, (f"GPU {gpu['index']} ({gpu['name']}), SM {major}.{minor}, "
                  f"driver {driver['version']}, NVRTC {nvrtc['version']}")


def shipped_image_for(kernels: dict[str, Any] | None, sm: int) -> str | None:
    """The shipped architecture a GPU of SM ``sm`` (e.g. 90) loads: its own CUBIN ("sm_90"), else
    the newest PTX not newer than it ("compute_90"); None when the wheel has none for it (or
    shipped kernels are off)."""
    if not kernels or not kernels.get("found") or not kernels.get("enabled", True):
        return None
    if f"sm_{sm}" in kernels.get("archs", []):
        return f"sm_{sm}"
    ptx = [int(p.split("_")[1]) for p in kernels.get("ptx", []) if p.split("_")[-1].isdigit()]
    ptx = [p for p in ptx if p <= sm]
    return f"compute_{max(ptx)}" if ptx else None


def usable_gpus(caps: dict[str, Any] | None = None) -> list[int]:
    """Indices of the GPUs the cuda backend can use (driver, SM >= 8.0, NVRTC or kernels shipped
    for it): where ``device: auto`` may place a stream. Empty without a usable CUDA."""
    caps = capabilities(math_libraries=False) if caps is None else caps
    return [g["index"] for g in caps.get("gpus", []) if usable_from(caps, g["index"])[0]]


def cuda_usable(device: int = 0) -> tuple[bool, str]:
    """``(True, "GPU 0 (NVIDIA H100 ...), SM 9.0, driver 13.0, NVRTC 13.0")`` or ``(False, why)``.

    Needs the driver, a GPU of SM 8.0 or newer, and NVRTC or kernels shipped in the wheel for
    the GPU. cuFFT and cuBLAS are not opened here: the stages that use them check them.
    """
    return usable_from(capabilities(math_libraries=False), device)


def kernels_text(kernels: dict[str, Any]) -> str:
    """One line on the kernels shipped in the wheel (``capabilities()["kernels"]``)."""
    if not kernels.get("found"):
        return f"none shipped ({kernels.get('reason', '')})"
    text = (f"{kernels['images']} images of {kernels['kernels']} kernels shipped: "
            f"{' '.join(kernels['archs'])}" + (f" + PTX {' '.join(kernels['ptx'])}" if kernels["ptx"] else "")
            + f" (NVRTC {kernels['nvrtc']})")
    if not kernels.get("enabled", True):
        text += ", ignored (GK_SHIPPED_KERNELS=0)"
    return text


def summary_lines(caps: dict[str, Any]) -> list[str]:
    """Human-readable lines for ``gk-stream devices`` and run summaries."""
    lines = []
    for name in ("native",) + _LIBRARIES:
        entry = caps.get(name)
        if entry is None:
            continue
        if entry["found"]:
            detail = " ".join(x for x in (entry.get("version", ""), entry.get("path", "")) if x)
            lines.append(f"{name}: found {detail}".rstrip())
        else:
            lines.append(f"{name}: missing ({entry['reason']})")
    kernels = caps.get("kernels")
    if kernels is not None:
        lines.append(f"kernels: {kernels_text(kernels)}")
    for gpu in caps.get("gpus", []):
        major, minor = gpu["sm"]
        state = "usable" if gpu["usable"] else f"unusable: {gpu['reason']}"
        lines.append(f"GPU {gpu['index']}: {gpu['name']}, SM {major}.{minor}, "
                     f"{gpu['memory_bytes'] / 2**30:.1f} GiB, {gpu['multiprocessors']} SMs{gpu_figures(gpu)} "
                     f"({state})")
    if not caps.get("gpus") and caps.get("gpus_reason"):
        lines.append(f"GPUs: none ({caps['gpus_reason']})")
    return lines


def kernel_sources(caps: dict[str, Any]) -> dict[int, list[dict[str, str]]]:
    """For each usable GPU: where each built-in kernel comes from in a fresh process
    (``_native.kernel_sources``: shipped image, disk cache, NVRTC at first use, or unavailable)."""
    try:
        from pygpukit_dsp import _native
    except ImportError:
        return {}
    return {gpu["index"]: list(_native.kernel_sources(gpu["arch"]))
            for gpu in caps.get("gpus", []) if gpu.get("usable")}


def gpu_figures(gpu: dict[str, Any]) -> str:
    """", PCI 0000:1b:00.0, 1980 MHz, 3352 GB/s, 50 MiB L2, 3 copy engines" (what is known)."""
    parts = []
    if gpu.get("pci_bus_id"):
        parts.append(f"PCI {gpu['pci_bus_id']}")
    if gpu.get("clock_mhz"):
        parts.append(f"{gpu['clock_mhz']} MHz")
    if gpu.get("memory_bandwidth_gbs", 0) >= 1:
        parts.append(f"{gpu['memory_bandwidth_gbs']:.0f} GB/s")
    if gpu.get("l2_cache_bytes"):
        parts.append(f"{gpu['l2_cache_bytes'] / 2**20:.0f} MiB L2")
    if gpu.get("copy_engines"):
        parts.append(f"{gpu['copy_engines']} copy engines")
    return "".join(", " + p for p in parts)


__all__ = ["capabilities", "cuda_usable", "usable_from", "usable_gpus", "summary_lines", "gpu_figures",
           "shipped_image_for", "kernels_text", "kernel_sources"]
