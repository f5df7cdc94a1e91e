"""Marked YAML: plain values, exact marks, no unsafe tags, no silent duplicate keys."""

import pytest

from pygpukit_dsp.errors import ConfigError, ConfigErrors
from pygpukit_dsp.spec import load_marked


def test_values_and_marks_of_keys_and_values():
    doc, marks = load_marked("a: 1\nb:\n  c: [x, {d: 2.5}]\n", "f.yaml")
    assert doc == {"a": 1, "b": {"c": ["x", {"d": 2.5}]}}
    assert marks.where == "f.yaml:1:1"
    assert marks.key_where("b") == "f.yaml:2:1"
    assert marks.value_where("a") == "f.yaml:1:4"
    assert marks.locate(("b", "c", 1, "d")) == "f.yaml:3:14"
    assert marks.locate(("b", "c", 1, "d"), as_key=True) == "f.yaml:3:11"


def test_locate_stops_at_the_deepest_existing_container():
    _, marks = load_marked("s:\n  design: {numtaps: 3}\n")
    assert marks.locate(("s", "design", "cutoff_hz")) == "<string>:2:11"  # missing key: its mapping
    assert marks.locate(("s", "list[float]", "design")) == "<string>:2:11"  # union names are skipped
    assert marks.locate(()) == "<string>:1:1"


def test_scalar_types_follow_yaml_with_1e3_floats_and_dates_as_text():
    doc, _ = load_marked("a: 0x10\nb: 1e3\nc: -2.5E-3\nd: 1_000\ne: 2024-01-01\nf: ~\ng: true\nh: '12'\n")
    assert doc == {"a": 16, "b": 1000.0, "c": -0.0025, "d": 1000, "e": "2024-01-01", "f": None, "g": True,
                   "h": "12"}
    assert isinstance(doc["b"], float)


def test_empty_document_gives_no_marks():
    assert load_marked("# nothing\n") == (None, None)


def test_every_duplicate_key_is_reported():
    with pytest.raises(ConfigErrors) as e:
        load_marked("a: 1\nb: {x: 1, x: 2}\na: 3\n")
    assert [(x.where, x.message) for x in e.value.errors] == [
        ("<string>:2:11", "duplicate key 'x'"), ("<string>:3:1", "duplicate key 'a'")]


def test_merge_keys_explicit_keys_win_and_are_not_duplicates():
    doc, marks = load_marked("base: &b {x: 1, y: 2}\nother: &o {z: 0}\nm: {<<: [*b, *o], y: 5}\n")
    assert doc["m"] == {"y": 5, "x": 1, "z": 0}
    assert marks.child("m").value_where("y") == "<string>:3:22"
    with pytest.raises(ConfigError, match="'<<' merges mappings only") as e:
        load_marked("a: {<<: 5}\n")
    assert e.value.where == "<string>:1:9"


def test_aliases_are_built_once():
    # "billion laughs": 9 levels of 10 aliases would be 10**9 strings if expanded
    lines = ["l0: &l0 [x, x, x, x, x, x, x, x, x, x]"]
    for i in range(1, 9):
        lines.append(f"l{i}: &l{i} [" + ", ".join([f"*l{i - 1}"] * 10) + "]")
    doc, _ = load_marked("\n".join(lines) + "\n")
    assert doc["l8"][0] is doc["l7"]  # shared, not copied: nothing was expanded


def test_recursive_alias_is_an_error():
    with pytest.raises(ConfigError, match="recursive YAML alias") as e:
        load_marked("a: &x [1, *x]\n")
    assert e.value.where == "<string>:1:4"


def test_keys_must_be_scalars():
    with pytest.raises(ConfigError, match="mapping keys must be plain names") as e:
        load_marked("? [1, 2]\n: 3\n")
    assert e.value.where == "<string>:1:3"


def test_control_characters_are_located():
    with pytest.raises(ConfigError, match="invalid character U\\+0007") as e:
        load_marked("a: 1\nb: x\x07y\n")
    assert e.value.where == "<string>:2:5" and "control character" in e.value.hint


def test_explicit_tags_for_plain_types_are_fine_but_bad_values_are_located():
    doc, _ = load_marked("a: !!str 12\nb: !!float 3\n")
    assert doc == {"a": "12", "b": 3.0}
    with pytest.raises(ConfigError, match="cannot read 'abc' as int") as e:
        load_marked("x: 1\nb: !!int abc\n")
    assert e.value.where == "<string>:2:4"


def test_sets_and_ordered_maps_are_rejected():
    with pytest.raises(ConfigError, match="YAML tag '!!set' is not allowed here"):
        load_marked("a: !!set {x, y}\n")
    with pytest.raises(ConfigError, match="YAML tag '!!omap' is not allowed here"):
        load_marked("a: !!omap [x: 1]\n")
