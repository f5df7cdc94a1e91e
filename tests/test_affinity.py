"""qos.cpu: the thread that runs a stream's blocks, pinned to one CPU (pygpukit_dsp/affinity.py)."""

import os
import threading

import numpy as np
import pytest

from pygpukit_dsp import Pipeline, stages
from pygpukit_dsp.affinity import pinned, resolve_cpu
from pygpukit_dsp.errors import ConfigError
from pygpukit_dsp.io.arrays import NumpySink, NumpySource

CPUS = sorted(os.sched_getaffinity(0))


def test_auto_is_the_last_allowed_cpu_and_a_number_must_be_allowed():
    assert resolve_cpu(None) is None
    assert resolve_cpu("auto") == CPUS[-1]
    assert resolve_cpu(CPUS[0]) == CPUS[0]
    with pytest.raises(ConfigError, match=r"qos.cpu 4096: this process may run on CPUs .* only") as e:
        resolve_cpu(4096, where="w1.yaml:9:3")
    assert "w1.yaml:9:3" in str(e.value) and "cpu: auto" in str(e.value)


def test_pinned_holds_the_calling_thread_and_gives_its_cpus_back():
    before = os.sched_getaffinity(0)
    with pinned(CPUS[-1]):
        assert os.sched_getaffinity(0) == {CPUS[-1]}
    assert os.sched_getaffinity(0) == before
    with pinned(None):
        assert os.sched_getaffinity(0) == before


def _pipeline(cpu, seen):
    class Probe(NumpySink):
        def write(self, block):
            seen.add(frozenset(os.sched_getaffinity(0)))
            super().write(block)

    x = np.zeros((1, 4096), np.float32)
    return Pipeline([stages.Gain(linear=2.0)], name="pinned", sample_rate=48000, channels=1, block_size=1024,
                    backend="cpu", source=NumpySource(array=x), sink=Probe(), qos={"class": "realtime", "cpu": cpu})


def test_a_run_with_qos_cpu_drives_its_blocks_from_that_cpu_and_says_so():
    seen: set = set()
    out: list = []
    # in a thread of its own, as a Session runs each pipeline; the thread's CPUs come back after
    t = threading.Thread(target=lambda: out.append(_pipeline("auto", seen).run()))
    t.start()
    t.join(30)
    summary = out[0]
    assert seen == {frozenset({CPUS[-1]})}
    assert summary.cpu == CPUS[-1] and f"pinned to CPU {CPUS[-1]} (qos.cpu)" in summary.format()


def test_unpinned_by_default_and_a_bad_cpu_is_refused_before_the_first_block():
    seen: set = set()
    assert _pipeline(None, seen).run().cpu is None
    with pytest.raises(ConfigError, match="qos.cpu 4096"):
        _pipeline(4096, set()).run()
    with pytest.raises(ConfigError):
        _pipeline(-1, set())


@pytest.mark.skipif(len(CPUS) < 2, reason="needs two CPUs to move a thread between")
def test_pinning_moves_the_process_s_other_threads_off_the_cpu_and_back():
    from pygpukit_dsp.affinity import leave_reserved, reserved_cpus, spare_cpu

    ready, done = threading.Event(), threading.Event()
    tids: dict = {}

    def other():
        tids["other"] = threading.get_native_id()
        ready.set()
        done.wait(10)

    t = threading.Thread(target=other)
    t.start()
    ready.wait(10)
    cpu = CPUS[-1]
    try:
        with pinned(cpu):
            assert os.sched_getaffinity(tids["other"]) == set(CPUS) - {cpu}
            assert reserved_cpus() == {cpu} and spare_cpu() == CPUS[0]
            seen = {}

            def helper():  # started by the pinned thread: inherits its CPU until it steps off
                seen["inherited"] = os.sched_getaffinity(0)
                leave_reserved()
                seen["after"] = os.sched_getaffinity(0)

            h = threading.Thread(target=helper)
            h.start()
            h.join(10)
            assert seen == {"inherited": {cpu}, "after": set(CPUS) - {cpu}}
        assert os.sched_getaffinity(tids["other"]) == set(CPUS) and reserved_cpus() == set()
    finally:
        done.set()
        t.join(10)


def test_a_cpu_this_machine_lacks_is_refused_at_its_yaml_value(tmp_path):
    f = tmp_path / "p.yaml"
    f.write_text("version: 1\nname: p\nsample_rate: 48000\nblock_size: 256\nchannels: 1\nbackend: cpu\n"
                 "qos: {class: realtime, cpu: 4096}\nsource: {type: synth, signal: noise, seed: 1}\n"
                 "stages: [{type: gain, linear: 2.0}]\n")
    p = Pipeline.from_yaml(f)
    with pytest.raises(ConfigError) as e:
        p.run(duration=0.01)
    assert f"{f}:7:29" in str(e.value) and "qos.cpu 4096" in str(e.value)
