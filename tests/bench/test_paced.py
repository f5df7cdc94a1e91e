"""The project's engine paced (pygpukit_dsp/bench/paced.py): a block with a release time goes
through the engine's instrument on the engine's slots in turn, in one native call or in two steps
(back to Python warm_us before the release, ``arrive`` called there, then the rest and the block);
without one, through the engine's own process()."""

import numpy as np

from pygpukit_dsp.bench.paced import PacedEngine


class _Spec:
    np_dtype = np.dtype(np.float32)


class _Chain:
    input = _Spec()


class _Instrument:
    def __init__(self, log):
        self.log = log

    def wait_release(self, slot, release_ns, spin_us, prewarm, return_at_ns):
        self.log.append(("wait_release", slot, release_ns, spin_us, prewarm, return_at_ns))

    def process(self, slot, block, final, out, release_ns, spin_us, prewarm):
        self.log.append(("process", slot, release_ns, spin_us, prewarm, block.dtype.name, out is not None))
        return block * 2


class _Engine:
    slots, chain = 2, _Chain()

    def __init__(self):
        self.log = []
        self.made = 0

    def instrument(self):
        self.made += 1
        return _Instrument(self.log)

    def process(self, block, out=None):
        self.log.append(("engine.process", out is not None))
        return block


def test_paced_blocks_take_the_slots_in_turn_in_one_native_call():
    eng = _Engine()
    paced = PacedEngine(eng)
    x = np.ones((1, 4), np.float64)  # converted to the input's dtype
    ys = [paced.process(x, 1_000 * k, spin_us=200, prewarm=True) for k in range(3)]
    assert eng.made == 1
    assert [e[:5] for e in eng.log] == [("process", 0, 0, 200, True), ("process", 1, 1_000, 200, True),
                                        ("process", 0, 2_000, 200, True)]
    assert all(e[5] == "float32" for e in eng.log) and float(ys[0][0, 0]) == 2.0


def test_warm_us_comes_back_to_python_before_the_release_and_arrive_runs_there():
    eng = _Engine()
    paced = PacedEngine(eng)
    seen = []
    paced.process(np.ones((1, 4), np.float32), 5_000_000, spin_us=200, prewarm=True, warm_us=100,
                  arrive=lambda: seen.append(len(eng.log)))
    assert eng.log[0] == ("wait_release", 0, 5_000_000, 200, True, 4_900_000)
    assert seen == [1]  # after the first step, before the block's call
    assert eng.log[1][:5] == ("process", 0, 5_000_000, 200, False)  # the prewarm ran in the first step


def test_back_to_back_blocks_use_the_engines_own_process():
    eng = _Engine()
    out = np.empty((1, 4), np.float32)
    PacedEngine(eng).process(np.ones((1, 4), np.float32), None, out=out)
    assert eng.log == [("engine.process", True)]
