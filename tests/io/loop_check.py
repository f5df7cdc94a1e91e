"""Does a loop-through recording carry ``process()`` of the played signal, and is every span where
it does not one the stream counted?

A duplex stream promises that its output is its input processed, ``preroll + period`` frames later
on the JACK timeline (the period: the connection that closes the loop), with nothing lost
without a count. On a loaded machine the stream may count events that change the recording:

* a ring underrun (the pipeline was late): silence is played, then the late block; nothing is
  lost, the rest comes later by the silence's length;
* a ring overrun (the pipeline fell behind by the whole ring): captured frames are dropped, so the
  rest comes earlier, after the pipeline's memory of the frames around the drop has faded;
* a server xrun (a client missed its cycle: the stream's, or this test's recorder): the stream
  flags its next callback (PortAudio: one flag for all xruns since the last callback); a period
  or a few may be missing, stale or doubled, on the way in or out, and the pipeline's memory
  spreads that too. The server tells every client of each xrun: the recorder counts them.

``align`` finds the stretches where the recording equals y = process(x) exactly (within atol) and
``unaccounted`` checks the spans between them against what was counted. The stream counted
nothing: the whole signal must be one stretch at the nominal lag.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

RUN = 256            # frames that must agree on every channel to start a stretch
XRUN_SPANS = 3       # spans one server xrun can leave: the recorder's cycle, the way out, the way in
XRUN_PERIODS = 4     # periods one server xrun can disturb (a late client catches up over two)


@dataclass(frozen=True)
class Stretch:
    """Recording frames [j0, j1) equal y[:, j - start - lag]."""

    j0: int
    j1: int
    lag: int


@dataclass(frozen=True)
class Span:
    """What lies between two stretches (or before the first, or after the last): ``rec`` frames
    of the recording and ``sig`` samples of y that no stretch holds, ``unrecorded`` of those
    frames the recorder missed; ``silence``: the recorded frames are zero and no sample of y is
    missing (a counted underrun looks like this)."""

    at: int
    rec: int
    sig: int
    silence: bool
    unrecorded: int = 0

    @property
    def length(self) -> int:
        """Frames of it that the recorder did record (its missed frames are its own xrun)."""
        return max(abs(self.rec), abs(self.sig)) - self.unrecorded


@dataclass(frozen=True)
class Counted:
    """What the stream counted (its summary's audio figures) and the server's xruns."""

    ring_underruns: int = 0
    ring_underrun_frames: int = 0
    ring_overruns: int = 0
    ring_overrun_frames: int = 0
    stream_xruns: int = 0  # the stream's input_overflows: callbacks PortAudio flagged after xruns
    server_xruns: int = 0  # the xruns the server told the recorder of

    @property
    def nothing(self) -> bool:
        """The stream counted nothing at all (then nothing may differ)."""
        return not (self.ring_underruns or self.ring_overruns or self.stream_xruns)

    @property
    def xruns(self) -> int:
        """Server xruns to allow for: once the stream flagged one, as many as the server reported."""
        return max(self.stream_xruns, self.server_xruns) if self.stream_xruns else 0

    @classmethod
    def from_audio(cls, audio: dict, server_xruns: int = 0) -> "Counted":
        return cls(ring_underruns=audio["ring_underruns"], ring_underrun_frames=audio["ring_underrun_frames"],
                   ring_overruns=audio["ring_overruns"], ring_overrun_frames=audio["ring_overrun_frames"],
                   stream_xruns=audio["input_overflows"], server_xruns=server_xruns)


def align(rec: np.ndarray, recorded: np.ndarray, y: np.ndarray, start: int, atol: float,
          back: int = 0) -> list[Stretch]:
    """The maximal stretches, in order, where ``rec`` (channels, frames) carries y, searched from
    frame ``start`` on: each next one starts at the first recorded frame whose value on channel 0
    is a value of y at or after where the last one ended (``back`` samples earlier at most: a
    doubled period), confirmed over RUN frames of every channel."""
    n, frames = y.shape[1], rec.shape[1]
    order = np.argsort(y[0], kind="stable")
    values = y[0][order]
    stretches: list[Stretch] = []
    j, i_next = start, 0
    while i_next < n:
        hit = _next_match(rec, recorded, y, order, values, j, i_next - back, atol)
        if hit is None:
            break
        j, i = hit
        m = min(frames - j, n - i)
        good = recorded[j:j + m] & np.all(np.abs(rec[:, j:j + m] - y[:, i:i + m]) <= atol, axis=0)
        length = m if good.all() else int(np.argmin(good))
        stretches.append(Stretch(j, j + length, j - start - i))
        j, i_next = j + length, i + length
    return stretches


def _next_match(rec, recorded, y, order, values, j_from: int, i_from: int, atol: float,
                chunk: int = 4096) -> tuple[int, int] | None:
    """The first (frame, sample) from (j_from, i_from) on where RUN frames of rec equal y."""
    n, frames = y.shape[1], rec.shape[1]
    for j0 in range(j_from, frames - RUN + 1, chunk):
        js = np.arange(j0, min(j0 + chunk, frames - RUN + 1))
        js = js[recorded[js]]
        lo = np.searchsorted(values, rec[0, js] - atol, side="left")
        hi = np.searchsorted(values, rec[0, js] + atol, side="right")
        counts = hi - lo
        if not counts.any():
            continue
        first = np.repeat(np.cumsum(counts) - counts, counts)
        jj = np.repeat(js, counts)
        ii = order[np.repeat(lo, counts) + np.arange(counts.sum()) - first]
        keep = (ii >= i_from) & (ii + RUN <= n)
        jj, ii = jj[keep], ii[keep]
        near = np.arange(8)  # a cheap look at the next frames first, every channel
        keep = np.all(np.abs(rec[:, jj[:, None] + near] - y[:, ii[:, None] + near]) <= atol, axis=(0, 2))
        for j, i in sorted(zip(jj[keep].tolist(), ii[keep].tolist())):
            if recorded[j:j + RUN].all() and np.all(np.abs(rec[:, j:j + RUN] - y[:, i:i + RUN]) <= atol):
                return j, i
    return None


def spans(stretches: list[Stretch], rec: np.ndarray, recorded: np.ndarray, n: int, start: int,
          lag: int) -> list[Span]:
    """The spans no stretch covers: from the nominal first frame (start + lag, sample 0) to the
    first stretch, between stretches, and from the last one to y's end."""
    out: list[Span] = []
    j_end, i_end = start + lag, 0
    for s in stretches:
        i0 = s.j0 - start - s.lag
        gap_rec, gap_sig = s.j0 - j_end, i0 - i_end
        if gap_rec or gap_sig:
            seg = slice(min(j_end, s.j0), max(j_end, s.j0))
            silent = gap_sig == 0 and gap_rec > 0 and not np.any(rec[:, seg][:, recorded[seg]])
            out.append(Span(at=j_end, rec=gap_rec, sig=gap_sig, silence=silent,
                            unrecorded=int(np.sum(~recorded[seg]))))
        j_end, i_end = s.j1, s.j1 - start - s.lag
    if i_end < n:
        out.append(Span(at=j_end, rec=0, sig=n - i_end, silence=False))
    return out


def settle_frames(impulse_response: np.ndarray, peak: float, atol: float) -> int:
    """Frames after which an input disturbed by at most 2 * ``peak`` (a sample replaced by another
    of the signal, or by zero) changes the output by less than ``atol``: where the tail of the
    pipeline's absolute impulse response, times 2 * peak, falls below atol."""
    h = np.abs(np.asarray(impulse_response, dtype=np.float64))
    tail = np.cumsum(h[::-1])[::-1]
    below = np.nonzero(2.0 * peak * tail < atol)[0]
    return int(below[0]) if below.size else h.size


def unaccounted(found: list[Span], counted: Counted, period: int, settle: int) -> list[str]:
    """What the counts cannot explain (empty: every span is counted):

    * a span of any kind when the stream counted nothing (a frame the recorder missed is a server
      xrun the stream must have been told of);
    * more spans than the counted events can leave (one per ring event, XRUN_SPANS per xrun);
    * more silence than the underruns counted, plus XRUN_PERIODS periods per xrun;
    * disturbed spans longer in all than the frames the rings counted, XRUN_PERIODS periods per
      xrun and the pipeline's settling time after each span.
    """
    if counted.nothing:
        return [f"{len(found)} span(s) differ from process() and the stream counted nothing: {found}"] if found else []
    problems: list[str] = []
    if len(found) > counted.ring_underruns + counted.ring_overruns + XRUN_SPANS * counted.xruns:
        problems.append(f"{len(found)} spans differ from process() but {counted} was counted: {found}")
    xrun_frames = XRUN_PERIODS * period * counted.xruns
    silence = sum(s.length for s in found if s.silence)
    if silence > counted.ring_underrun_frames + xrun_frames:
        problems.append(f"{silence} frames of silence were played but {counted} was counted: {found}")
    disturbed = [s for s in found if not s.silence]
    frames = sum(s.length for s in disturbed)
    allowed = counted.ring_overrun_frames + counted.ring_underrun_frames + xrun_frames + settle * len(disturbed)
    if frames > allowed:
        problems.append(f"{frames} frames differ from process() but {counted} accounts for {allowed} "
                        f"(settling {settle} frames a span): {disturbed}")
    return problems
