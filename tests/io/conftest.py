"""Fixtures for the source and sink tests: the fake sounddevice (fault injection)."""

import importlib.util
import sys
from pathlib import Path

import pytest


def _load(name: str):
    # tests/io is no package (it would shadow the standard library's io): load helpers by path
    spec = importlib.util.spec_from_file_location(f"_gk_tests_{name}", Path(__file__).with_name(f"{name}.py"))
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    return module


fake_sounddevice = _load("fake_sounddevice")


@pytest.fixture
def fake(monkeypatch):
    """install(**config) -> a fake sounddevice module in sys.modules (see fake_sounddevice.py)."""
    def install(**config):
        sd = fake_sounddevice.make_fake(**config)
        monkeypatch.setitem(sys.modules, "sounddevice", sd)
        return sd
    return install


@pytest.fixture
def device_input():
    """device_input(channel, start, frames): what the fake device's input channel carries."""
    return fake_sounddevice.device_input
