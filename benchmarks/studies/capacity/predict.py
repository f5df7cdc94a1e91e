"""What admission control predicts for the capacity sweep's streams: the scheduler's own answer for
streams of a cost, and a Session's (its calibration and rehearsal) found by bisection."""

from __future__ import annotations

from typing import Any, Callable

from .report import Prediction
from .settings import deadline_key


PREDICT_REGISTER_MAX = 2000   # register at most this many streams in the scratch scheduler (each holds a
                              # ~270 KB latency histogram); beyond it the documented rule is applied


def predict(cost_ns: int, period_ns: int, deadlines_ms: tuple[float, ...] | list[float], how: str,
            u_max: float = 0.9, margin_ns: int = 50_000, latency_ns: int | None = None,
            phased: bool = False) -> Prediction:
    """Streams of this device cost (and own latency alone) and period a fresh scheduler admits at
    each deadline (its defaults).

    The documented admission rule (docs/scheduler.md: n C / P <= U_max and n C + margin + (L - C)
    <= the deadline) gives the count; when it is at most PREDICT_REGISTER_MAX the scheduler itself
    confirms it (streams registered until it refuses, its answer kept). ``phased``: the streams
    declare the sweep's staggered phases (:func:`admits_all`): the largest N the scheduler admits
    whole, by bisection up to the utilisation bound."""
    from pygpukit_dsp_core import AdmissionRefused, Scheduler

    c = max(1, int(cost_ns))
    lat = int(latency_ns) if latency_ns is not None and latency_ns > c else None
    pred = Prediction(cost_us=cost_ns / 1e3, how=how, latency_us=lat / 1e3 if lat else None)
    excess = (lat - c) if lat else 0
    extra = {"latency_ns": lat} if lat else {}
    for d in deadlines_ms:
        deadline_ns = int(d * 1e6)
        if phased:
            def whole(n: int) -> tuple[bool, str]:
                return admits_all(n, c, period_ns, deadline_ns, u_max=u_max, margin_ns=margin_ns, latency_ns=lat,
                                  phased=True)

            hi = min(PREDICT_REGISTER_MAX, int(u_max * period_ns // c) + 1)
            pred.streams[deadline_key(d)], why = largest_admitted(whole, hi)
            pred.reason[deadline_key(d)] = why or "the documented rule (not registered: too many streams)"
            continue
        rule = max(0, min(int(u_max * period_ns // c), int((deadline_ns - margin_ns - excess) // c)))
        if rule > PREDICT_REGISTER_MAX:
            pred.streams[deadline_key(d)] = rule
            pred.reason[deadline_key(d)] = "the documented rule (not registered: too many streams)"
            continue
        sched = Scheduler(u_max=u_max, safety_margin_ns=margin_ns)
        n = 0
        try:
            while n <= PREDICT_REGISTER_MAX:
                sched.register_stream(f"s{n}", "realtime", period_ns=period_ns, deadline_ns=deadline_ns, cost_ns=c,
                                      **extra)
                n += 1
        except AdmissionRefused as exc:
            pred.reason[deadline_key(d)] = f"{exc.reason}"
        pred.streams[deadline_key(d)] = n
        del sched
    return pred


def largest_admitted(test: Callable[[int], tuple[bool, str]], hi: int) -> tuple[int, str]:
    """The largest n <= ``hi`` that ``test`` admits (``test(n)``: (admitted, why not)), by
    bisection (admission is monotone in n), and the reason of the least n it refused ("" when
    it admits ``hi``)."""
    ok, why = test(hi)
    if ok:
        return hi, ""
    lo, refusal = 0, why  # test(lo) holds; test(hi) does not
    while hi - lo > 1:
        mid = (lo + hi) // 2
        ok, why = test(mid)
        if ok:
            lo = mid
        else:
            hi, refusal = mid, why
    return lo, refusal


def staggered_phases(n: int, period_ns: int) -> list[int]:
    """The sweep's phases: stream i released at i * period / n."""
    return [i * period_ns // n for i in range(n)]


def admits_all(n: int, cost_ns: int, period_ns: int, deadline_ns: int, *, u_max: float = 0.9,
               margin_ns: int = 50_000, latency_ns: int | None = None, phased: bool = False) -> tuple[bool, str]:
    """Does a fresh scheduler admit all ``n`` of these streams, registered in order (``phased``:
    each declaring its sweep phase, :func:`staggered_phases`, as a Session does for the clocks it
    paces; else none, the critical instant)? (True, "") or (False, the refusal's reason)."""
    from pygpukit_dsp_core import AdmissionRefused, Scheduler

    c = max(1, int(cost_ns))
    extra = {"latency_ns": int(latency_ns)} if latency_ns is not None and latency_ns > c else {}
    phases = staggered_phases(n, period_ns) if phased else [None] * n
    sched = Scheduler(u_max=u_max, safety_margin_ns=margin_ns)
    try:
        for i, ph in enumerate(phases):
            sched.register_stream(f"s{i}", "realtime", period_ns=period_ns, deadline_ns=deadline_ns, cost_ns=c,
                                  phase_ns=ph, **extra)
    except AdmissionRefused as exc:
        return False, f"{exc.reason}"
    return True, ""


def session_prediction(cost: Any, period_ns: int, deadlines_ms: tuple[float, ...] | list[float],
                       loaded_ns: Callable[[int, int], int], n_max: int, u_max: float = 0.9,
                       say: Callable[[str], None] = lambda _line: None, phased: bool = False,
                       how: str = "session", tail: Callable[[int], Any] | None = None,
                       calibration: Any = None) -> Prediction:
    """What a Session admits of these streams (its calibration ``cost``, a BlockCost, alone),
    at each deadline: the largest N (up to ``n_max``, the most streams there are engines for) for
    which admission, as ``admission.admit`` does it, admits all N. Up to where N streams costed
    alone fill half a bound (admission.crowded) that is the rule with the cost alone; past it the
    Session rehearses the N streams together and admits them with the larger of the cost alone and
    ``loaded_ns(N, deadline_ns)`` (the block cost among N rehearsed, as admission counts it for
    streams of that deadline: :func:`admission.rehearse` with the phases the streams will have,
    ``RehearsalRun.costs``), so the largest N is searched by bisection (the cost grows with N).
    ``phased``: the streams declare the sweep's staggered phases (a Session's own clocks,
    :func:`admission.assign_phases`); else no phase (every block may come at once).
    ``tail(N)``: that rehearsal's latency tail (an admission.LatencyTail, or None); admission refuses
    N whose tail reaches past the deadline within the policy's tail_horizon_s ("latency_tail", as
    ``Scheduler.check_latency_tails``). ``calibration``: the GPU's figures as admission reads them
    (None: the reference figures)."""
    from pygpukit_dsp.admission import DEFAULT_POLICY, crowded, horizon_blocks

    c0, lat = int(cost.device_ns), int(cost.latency_ns)
    pred = Prediction(cost_us=c0 / 1e3, how=how, latency_us=lat / 1e3 if lat > c0 else None)
    cache: dict[tuple[int, int], int] = {}
    told: set[int] = set()

    def fits(n: int, d: float, c: int) -> tuple[bool, str]:
        return admits_all(n, c, period_ns, int(d * 1e6), u_max=u_max, latency_ns=lat, phased=phased)

    def admits(n: int, d: float) -> tuple[bool, str]:
        deadline_ns = int(d * 1e6)
        if crowded([c0] * n, [period_ns] * n, [deadline_ns] * n, u_max, calibration=calibration):
            if (n, deadline_ns) not in cache:
                cache[n, deadline_ns] = int(loaded_ns(n, deadline_ns))
                pred.rehearsed_us.setdefault(deadline_key(d), {})[str(n)] = cache[n, deadline_ns] / 1e3
            t = tail(n) if tail is not None else None
            reach_ns = t.reach_ns(horizon_blocks([period_ns] * n)) if t is not None else None
            if reach_ns is not None:
                pred.reach_us[str(n)] = reach_ns / 1e3
            if n not in told:
                told.add(n)
                say(f"capacity: admission's rehearsal of {n} streams ({how}): {cache[n, deadline_ns] / 1e3:.1f} us "
                    f"per block among them at {d:.2f} ms" + (
                        f"; {t.describe()}, reaching {pred.reach_us[str(n)] / 1e3:.2f} ms within "
                        f"{DEFAULT_POLICY.tail_horizon_s:g} s" if t is not None else ""))
            ok, why = fits(n, d, max(c0, cache[n, deadline_ns]))
            if ok and reach_ns is not None and reach_ns > deadline_ns:
                return False, "latency_tail"
            return ok, why
        return fits(n, d, c0)

    for d in deadlines_ms:
        hi, why_alone = largest_admitted(lambda n: fits(n, d, c0), n_max)  # costed alone: no rehearsal
        n, refusal = largest_admitted(lambda n: admits(n, d), hi)
        pred.streams[deadline_key(d)] = n
        if n == hi:  # the rule with the cost alone (or the engines) decided it
            pred.reason[deadline_key(d)] = why_alone or f"no more engines than {n_max}"
        else:
            pred.reason[deadline_key(d)] = f"{refusal} (rehearsed)"
    return pred
