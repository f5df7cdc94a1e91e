"""Size limits: absurd parameters are refused when they are validated, and a pipeline whose blocks
would not fit in memory is refused before its first block, naming the limit.

The per-parameter limits are far above any real use and exist so that a typo (``numtaps:
1000000000000``) is an error that names the limit, not an allocation that fails or swaps.
:func:`check_memory` is the one memory check: ``backends.open_backend`` calls it, and every
way of running a pipeline (``Pipeline.process``, ``StreamRunner``, ``gk-stream run``) opens its
engine there.
"""

from __future__ import annotations

import os
from typing import TYPE_CHECKING

from .errors import ConfigError

if TYPE_CHECKING:
    from .pipeline import Pipeline, SpecChain

MAX_CHANNELS = 65536        # channels of a pipeline, subchannels of a channelizer, a kernel's output
MAX_TAPS = 1 << 23          # filter length (fir, resample, channelizer prototype): 8388608 taps
MAX_FFT = 1 << 24           # fft/stft frame length: 16777216 samples
MAX_DELAY = 1 << 26         # delay line length: 67108864 samples (23 min at 48 kHz)
MAX_RESAMPLE_FACTOR = 1 << 18  # reduced up or down of a resampler: 262144 (default filter: 20x taps)
MAX_BLOCK_SIZE = 1 << 28    # samples per channel in one block: 268435456 (1 GiB of float32 per channel)


def limit(value: int, maximum: int, what: str, unit: str) -> int:
    """Field-validator body: ``value`` must not exceed ``maximum`` (the message names the limit)."""
    if value > maximum:
        raise ValueError(f"{what} {value} is above the limit of {maximum} {unit}")
    return value


def fmt_bytes(n: float) -> str:
    for unit in ("B", "KiB", "MiB", "GiB", "TiB", "PiB", "EiB"):
        if n < 1024 or unit == "EiB":
            return f"{n:.1f} {unit}" if unit != "B" else f"{int(n)} B"
        n /= 1024
    return f"{n:.1f} EiB"  # pragma: no cover


def available_host_memory() -> int | None:
    """Bytes the host can still give (MemAvailable), or None when it cannot be told."""
    try:
        with open("/proc/meminfo") as f:
            for line in f:
                if line.startswith("MemAvailable:"):
                    return int(line.split()[1]) * 1024
    except (OSError, ValueError, IndexError):
        pass
    try:
        return os.sysconf("SC_AVPHYS_PAGES") * os.sysconf("SC_PAGE_SIZE")
    except (ValueError, OSError, AttributeError):
        return None


def block_memory(pipeline: "Pipeline", chain: "SpecChain") -> list[tuple[int, str]]:
    """What one block needs, item by item: every edge's block and each stage's own state
    (:meth:`Stage.state_bytes`: filter histories, delay lines, work arrays). An estimate."""
    return [(n, label) for n, label, _ in _memory_items(pipeline, chain)]


def _memory_items(pipeline: "Pipeline", chain: "SpecChain") -> list[tuple[int, str, bool]]:
    """:func:`block_memory`'s items, each with whether it grows with block_size: the edges' blocks
    do, and a stage's state does when most of it is per block (a FIR's work arrays over the block)
    rather than set by the stage's own sizes (taps, a delay line)."""
    items = [(chain.input.block_nbytes, f"the input block ({chain.input.describe()})", True)]
    for st, spec_in, spec_out in zip(pipeline.stages, chain.specs[:-1], chain.specs[1:]):
        label = f"stage '{st.name}' ({st.type})"
        items.append((spec_out.block_nbytes, f"{label} output ({spec_out.describe()})", True))
        state = st.state_bytes(spec_in)
        if state:
            fixed = st.state_bytes(spec_in.with_(block_size=1))  # plain arithmetic: nothing allocated
            items.append((state, f"{label} state", 2 * (state - fixed) > state))
    return items


_DEVICES: dict[int, object] = {}  # kept: dropping the last Device releases the primary context,
# and the engine about to open would create it again (100s of ms)


def _gpu_free_memory(device: int = 0) -> int | None:
    try:
        from . import _native

        if device not in _DEVICES:
            _DEVICES[device] = _native.Device(device)
        return int(_DEVICES[device].memory_info()[0])
    except Exception:  # no driver, no device: the engine says so itself, with the reason
        return None


def check_memory(pipeline: "Pipeline", chain: "SpecChain", backend: str, *, device: int = 0,
                 items: list[tuple[int, str, bool]] | None = None) -> None:
    """Raise ConfigError before anything is allocated when a block of ``pipeline`` would need more
    memory than the host has available (and, on ``cuda``, more than GPU ``device`` has free).
    ``items``: what a block needs, when the caller counted it (a graph's: graph_model.memory_items)."""
    items = _memory_items(pipeline, chain) if items is None else items
    total = sum(n for n, _, _ in items)
    biggest_n, biggest, per_block = max(items, key=lambda item: item[0])
    places = [("available memory", available_host_memory())]
    if backend == "cuda":
        places.append((f"free GPU memory (GPU {device})" if device else "free GPU memory",
                       _gpu_free_memory(device)))
    if per_block:  # the block itself, or a state that scales with it: block_size is what to lower
        if biggest.endswith(" state"):
            biggest += f" (it grows with block_size, {pipeline.block_size})"
        hint = f"lower block_size ({pipeline.block_size}) or channels"
    else:
        hint = "lower that stage's size parameters (taps, delay, nfft...), or block_size or channels"
    for what, have in places:
        if have is not None and total > have:
            raise ConfigError(
                f"pipeline '{pipeline.name}' needs about {fmt_bytes(total)} per block (the largest part: "
                f"{biggest}, {fmt_bytes(biggest_n)}), more than this machine's {fmt_bytes(have)} of {what}",
                where=pipeline.where, hint=hint)
