"""pygpukit_dsp/_libs.py: NVIDIA wheel library folders for the native loader."""

from __future__ import annotations

import os
from pathlib import Path

from pygpukit_dsp import _libs, _native


def _make(root: Path, *subdirs: str) -> None:
    for sub in subdirs:
        (root / sub).mkdir(parents=True)


def test_finds_cuda13_and_cuda12_wheel_layouts(tmp_path: Path):
    site13, site12 = tmp_path / "site13", tmp_path / "site12"
    _make(site13, "nvidia/cu13/lib")
    _make(site12, "nvidia/cuda_nvrtc/lib", "nvidia/cufft/lib", "nvidia/cublas/lib")
    dirs = _libs.nvidia_library_dirs([str(site13), str(site12), str(tmp_path / "absent")], env={})
    assert dirs == [
        str((site13 / "nvidia/cu13/lib").resolve()),
        str((site12 / "nvidia/cuda_nvrtc/lib").resolve()),
        str((site12 / "nvidia/cufft/lib").resolve()),
        str((site12 / "nvidia/cublas/lib").resolve()),
    ]


def test_environment_folders_come_first_and_duplicates_are_dropped(tmp_path: Path):
    site = tmp_path / "site"
    _make(site, "nvidia/cu13/lib")
    wheel_dir = str((site / "nvidia/cu13/lib").resolve())
    custom = str(tmp_path / "custom")
    env = {"GK_CUDA_LIB_DIRS": os.pathsep.join([custom, wheel_dir, ""])}
    dirs = _libs.nvidia_library_dirs([str(site), str(site)], env=env)
    assert dirs == [custom, wheel_dir]


def test_no_wheels_means_no_folders(tmp_path: Path):
    assert _libs.nvidia_library_dirs([str(tmp_path)], env={}) == []


def test_configure_native_hands_the_folders_to_the_loader_once(monkeypatch):
    monkeypatch.setattr(_libs, "_configured", False)
    dirs = _libs.configure_native()
    assert _native.library_dirs() == dirs == _libs.nvidia_library_dirs()
    # A second call does not recompute: it reports what the loader holds.
    monkeypatch.setattr(_libs, "nvidia_library_dirs", lambda *a, **k: ["/elsewhere"])
    assert _libs.configure_native() == dirs
