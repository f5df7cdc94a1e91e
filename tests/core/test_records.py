"""The records (dicts) the module returns against their TypedDicts in _pygpukit_dsp_core.pyi.

Each record is defined once, in Rust (rust/pygpukit-python/src/records.rs: one function per
record and the keys it writes). The native side reports those keys (``_record_fields()``);
these tests compare the stub with them field by field, and check the dicts real calls return
against both: their keys and the type of every value.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

import pygpukit_dsp_core as core
from pygpukit_dsp_core import _pygpukit_dsp_core as native

REPO = Path(__file__).resolve().parents[2]
STUB = REPO / "rust" / "pygpukit-python" / "python" / "pygpukit_dsp_core" / "_pygpukit_dsp_core.pyi"
US = 1_000
MS = 1_000_000


def _stub() -> ast.Module:
    return ast.parse(STUB.read_text(), filename=str(STUB))


def _typed_dicts() -> dict[str, list[tuple[str, ast.expr, bool]]]:
    """Each TypedDict of the stub: its fields in order, with annotation and whether required."""
    out = {}
    for node in _stub().body:
        if isinstance(node, ast.ClassDef) and any(ast.unparse(b) == "TypedDict" for b in node.bases):
            fields = []
            for item in node.body:
                if isinstance(item, ast.AnnAssign) and isinstance(item.target, ast.Name):
                    ann = item.annotation
                    required = not (isinstance(ann, ast.Subscript) and ast.unparse(ann.value) == "NotRequired")
                    fields.append((item.target.id, ann, required))
            out[node.name] = fields
    return out


def _aliases() -> dict[str, ast.expr]:
    return {
        node.targets[0].id: node.value
        for node in _stub().body
        if isinstance(node, ast.Assign) and len(node.targets) == 1 and isinstance(node.targets[0], ast.Name)
    }


TYPED_DICTS = _typed_dicts()
ALIASES = _aliases()
NATIVE = native._record_fields()


def _stub_text(name: str, fields: dict[str, bool]) -> str:
    lines = [f"class {name}(TypedDict):"]
    lines += [f"    {key}: {'...' if required else 'NotRequired[...]'}" for key, required in fields.items()]
    return "\n".join(lines)


def test_every_record_has_a_typed_dict_and_every_typed_dict_is_a_record():
    assert sorted(TYPED_DICTS) == sorted(NATIVE)


@pytest.mark.parametrize("name", sorted(NATIVE))
def test_typed_dict_fields_are_the_native_keys(name):
    stub = {field: required for field, _, required in TYPED_DICTS.get(name, [])}
    expected = NATIVE[name]
    assert list(stub.items()) == list(expected.items()), (
        f"{STUB.name}: {name} does not match the keys of rust/pygpukit-python/src/records.rs; "
        f"the native side reports:\n{_stub_text(name, expected)}"
    )


@pytest.mark.parametrize("name", sorted(TYPED_DICTS))
def test_every_field_is_documented(name):
    node = next(n for n in _stub().body if isinstance(n, ast.ClassDef) and n.name == name)
    body = node.body
    assert ast.get_docstring(node), f"{name} has no docstring"
    for i, item in enumerate(body):
        if isinstance(item, ast.AnnAssign):
            doc = body[i + 1] if i + 1 < len(body) else None
            assert (
                isinstance(doc, ast.Expr) and isinstance(doc.value, ast.Constant) and isinstance(doc.value.value, str)
            ), f"{name}.{item.target.id} has no docstring"


def _matches(value, ann: ast.expr) -> bool:
    """Whether a value is of the stub's annotation (the forms the stub uses)."""
    if isinstance(ann, ast.Constant) and ann.value is None:
        return value is None
    if isinstance(ann, ast.BinOp) and isinstance(ann.op, ast.BitOr):
        return _matches(value, ann.left) or _matches(value, ann.right)
    if isinstance(ann, ast.Name):
        if ann.id in ALIASES:
            return _matches(value, ALIASES[ann.id])
        if ann.id in TYPED_DICTS:
            return isinstance(value, dict) and not _record_problems(ann.id, value)
        scalar = {"int": int, "float": float, "bool": bool, "str": str}[ann.id]
        return isinstance(value, scalar) and (scalar is bool or not isinstance(value, bool))
    if isinstance(ann, ast.Subscript):
        outer = ast.unparse(ann.value)
        if outer == "Literal":
            options = ann.slice.elts if isinstance(ann.slice, ast.Tuple) else [ann.slice]
            return value in [ast.literal_eval(o) for o in options]
        if outer == "NotRequired":
            return _matches(value, ann.slice)
        if outer == "list":
            return isinstance(value, list) and all(_matches(v, ann.slice) for v in value)
    raise AssertionError(f"test_records cannot read the annotation {ast.unparse(ann)}")


def _record_problems(name: str, record: dict) -> list[str]:
    """What is wrong with one dict the module returned, as the stub declares it."""
    fields = TYPED_DICTS[name]
    required = [f for f, _, req in fields if req]
    allowed = [f for f, _, _ in fields]
    problems = []
    if [k for k in record if k in required] != required:
        problems.append(f"{name}: keys {list(record)} lack or reorder the required {required}")
    if [k for k in record if k in allowed] != list(record):
        problems.append(f"{name}: keys {[k for k in record if k not in allowed]} are not in the stub")
    for field, ann, _ in fields:
        if field in record and not _matches(record[field], ann):
            problems.append(f"{name}.{field} = {record[field]!r} is not {ast.unparse(ann)}")
    return problems


def _scheduler_records() -> list[tuple[str, dict]]:
    s = core.Scheduler(clock="simulated")
    audio = s.register_stream("audio", "realtime", period_ns=5 * MS, cost_ns=100 * US, latency_ns=150 * US)
    bulk = s.register_stream("bulk", "throughput", min_rate_hz=10.0, units_per_block=4)
    s.submit(audio)
    s.submit(bulk)
    while (d := s.next()).kind == "launch":
        s.complete(d.task, 80 * US)
    admitted = s.admit(bulk)
    modelled = core.Scheduler(clock="simulated", dispatcher_busy_cap=0.85, dispatcher_hold_ns=800 * US)
    counted = modelled.register_stream("w1", "realtime", period_ns=5 * MS, cost_ns=10 * US, dispatch_ns=12 * US)
    return [
        ("SchedulerConfig", s.config),
        ("Admitted", admitted),
        ("StreamAdmission", s.stream_admission(audio)),
        ("StreamAdmission", modelled.stream_admission(counted)),
        ("StreamStats", s.stream_stats(audio)),
        ("StreamStats", s.unregister_stream(bulk)),
        ("SchedulerStats", s.stats()),
    ]


def _refusal_figures() -> list[tuple[str, dict]]:
    """A utilisation-bound refusal, and a response-bound one with release phases (all keys)."""
    out = []
    s = core.Scheduler(clock="simulated")
    with pytest.raises(core.AdmissionRefused) as refused:
        s.register_stream("big", "realtime", period_ns=MS, cost_ns=950 * US)
    out.append(("AdmissionFigures", refused.value.figures))
    s = core.Scheduler(safety_margin_ns=50 * US)
    with pytest.raises(core.AdmissionRefused) as refused:
        for i in range(100):
            s.register_stream(f"s{i}", "realtime", period_ns=MS, deadline_ns=200 * US, cost_ns=10 * US, phase_ns=0)
    assert "phased_ahead_ns" in refused.value.figures
    out.append(("AdmissionFigures", refused.value.figures))
    # the device model's refusals: the dispatcher's work counted, a deadline within its hold, a tail
    s = core.Scheduler(dispatcher_busy_cap=0.85, dispatcher_hold_ns=800 * US)
    with pytest.raises(core.AdmissionRefused) as refused:
        s.register_stream("busy", "realtime", period_ns=MS, cost_ns=10 * US, dispatch_ns=900 * US)
    assert refused.value.reason == "utilisation_bound" and "dispatch_counted_ns" in refused.value.figures
    out.append(("AdmissionFigures", refused.value.figures))
    s.register_stream("late", "realtime", period_ns=MS, cost_ns=10 * US, tail_reach_ns=2 * MS)
    with pytest.raises(core.AdmissionRefused) as refused:
        s.check_latency_tails()
    assert refused.value.reason == "latency_tail" and refused.value.figures["tail_reach_ns"] == 2 * MS
    out.append(("AdmissionFigures", refused.value.figures))
    return out


def _pool_records() -> list[tuple[str, dict]]:
    pool = core.MemoryPoolPolicy(cache_budget_bytes=1024)
    grant = pool.acquire(300)
    pool.release(pool.acquire(2048).block)
    return [("BlockInfo", pool.block_info(grant.block)), ("PoolStats", pool.stats())]


def _histogram_records() -> list[tuple[str, dict]]:
    h = core.LatencyHistogram()
    h.record_many([10, 20, 30])
    return [("LatencySummary", h.summary())]


def test_returned_dicts_are_their_typed_dicts():
    records = _scheduler_records() + _refusal_figures() + _pool_records() + _histogram_records()
    assert {name for name, _ in records} == set(NATIVE), "every record is exercised"
    problems = [p for name, record in records for p in _record_problems(name, record)]
    assert not problems, "\n".join(problems)
    for name, record in records:
        assert [k for k in NATIVE[name] if k in record] == list(record), f"{name}: keys out of the native order"


def test_refusal_attributes_are_the_figures_and_declared_in_the_stub():
    stub = next(n for n in _stub().body if isinstance(n, ast.ClassDef) and n.name == "AdmissionRefused")
    declared = {item.target.id for item in stub.body if isinstance(item, ast.AnnAssign)}
    required = [k for k, req in NATIVE["AdmissionFigures"].items() if req]
    assert set(required) | {"stream", "reason", "figures"} <= declared
    s = core.Scheduler(clock="simulated")
    with pytest.raises(core.AdmissionRefused) as refused:
        s.register_stream("big", "realtime", period_ns=MS, cost_ns=950 * US)
    exc = refused.value
    assert {k: getattr(exc, k) for k in exc.figures} == exc.figures
    assert (exc.stream, exc.reason) == ("big", "utilisation_bound")
