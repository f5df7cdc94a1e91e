"""Registry: declared type names are keys before their module is imported; a lookup imports it."""

from __future__ import annotations

import sys
import types

import pytest

from pygpukit_dsp.registry import Registry


@pytest.fixture
def registry(tmp_path, monkeypatch):
    """A registry with three declared names, whose modules live in tmp_path: ``gk_reg_ab`` registers
    a and b, ``gk_reg_silent`` registers nothing."""
    reg: Registry = Registry("stage")
    holder = types.ModuleType("gk_reg_holder")
    holder.REG = reg
    monkeypatch.setitem(sys.modules, "gk_reg_holder", holder)
    (tmp_path / "gk_reg_ab.py").write_text(
        "import gk_reg_holder\nclass A: pass\nclass B: pass\n"
        "gk_reg_holder.REG.register('a', A)\ngk_reg_holder.REG.register('b', B)\n")
    (tmp_path / "gk_reg_silent.py").write_text("")
    monkeypatch.syspath_prepend(str(tmp_path))
    for name in ("gk_reg_ab", "gk_reg_silent"):
        monkeypatch.delitem(sys.modules, name, raising=False)
    reg.declare("a", "gk_reg_ab")
    reg.declare("b", "gk_reg_ab")
    reg.declare("c", "gk_reg_silent")
    return reg


def test_declared_names_are_keys_and_nothing_is_imported(registry):
    assert list(registry) == ["a", "b", "c"] and len(registry) == 3
    assert "a" in registry and "z" not in registry
    assert registry.module_of("b") == "gk_reg_ab"
    assert "gk_reg_ab" not in sys.modules and not registry.is_loaded("a")


def test_a_lookup_imports_the_module_that_registers_the_name(registry):
    cls = registry["a"]
    assert cls.__name__ == "A" and cls.__module__ == "gk_reg_ab"
    assert registry.is_loaded("b")  # the same module registered b too
    assert registry["b"].__name__ == "B"


def test_a_module_that_does_not_register_its_name_is_named(registry):
    with pytest.raises(LookupError, match="gk_reg_silent"):
        registry["c"]


def test_unknown_names_and_registering_twice(registry):
    with pytest.raises(KeyError):
        registry["z"]
    assert registry.get("z") is None
    A = registry["a"]
    registry.register("a", A)  # the same class again: fine
    with pytest.raises(TypeError, match="'a' registered twice"):
        registry.register("a", type("Other", (), {}))


def test_assigning_and_deleting_names(registry):
    registry["x"] = int
    assert registry["x"] is int and list(registry)[-1] == "x" and len(registry) == 4
    del registry["x"]
    del registry["c"]  # a declared name goes without its module being imported
    assert "x" not in registry and "c" not in registry and "gk_reg_silent" not in sys.modules
    with pytest.raises(KeyError):
        del registry["x"]
