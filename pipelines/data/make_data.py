"""Regenerates the small input files the example pipelines read (deterministic).

    python pipelines/data/make_data.py          # every file
    python pipelines/data/make_data.py --fm     # fm_broadcast.cs16 alone (pipelines/fm_receiver.yaml)

fm_broadcast.cs16 is not kept in the repository (it is made when needed: the example tests
make it in their copy of pipelines/).
"""

from pathlib import Path

import numpy as np
import soundfile as sf

HERE = Path(__file__).parent


def chirp_wav(path: Path, fs: int = 48000, seconds: float = 1.5) -> None:
    """Mono 16-bit WAV: a 50 Hz -> 20 kHz chirp plus a 60 Hz hum and a little noise."""
    t = np.arange(int(fs * seconds)) / fs
    f0, f1 = 50.0, 20000.0
    phase = 2 * np.pi * (f0 * t + (f1 - f0) / (2 * seconds) * t**2)
    rng = np.random.default_rng(1)
    x = 0.5 * np.sin(phase) + 0.2 * np.sin(2 * np.pi * 60 * t) + 0.01 * rng.standard_normal(t.size)
    sf.write(path, x.astype(np.float32), fs, subtype="PCM_16")


def iq_cs16(path: Path, fs: float = 1.024e6, n: int = 32768) -> None:
    """Interleaved int16 IQ: three carriers at -200, +64 and +300 kHz plus noise."""
    t = np.arange(n) / fs
    rng = np.random.default_rng(2)
    z = (0.3 * np.exp(2j * np.pi * -200e3 * t) + 0.2 * np.exp(2j * np.pi * 64e3 * t)
         + 0.1 * np.exp(2j * np.pi * 300e3 * t))
    z += 0.01 * (rng.standard_normal(n) + 1j * rng.standard_normal(n))
    iq = np.empty(2 * n, np.int16)
    iq[0::2] = np.round(z.real * 32767)
    iq[1::2] = np.round(z.imag * 32767)
    iq.tofile(path)


FM_RATE = 480000.0     # IQ sample rate of fm_broadcast.cs16
FM_STATION_HZ = 100e3  # the station's offset from the tuned centre
FM_TONE_HZ = 1000.0    # its modulating tone
FM_DEVIATION_HZ = 50e3


def fm_broadcast_cs16(path: Path, fs: float = FM_RATE, seconds: float = 0.3) -> None:
    """Interleaved int16 IQ of an FM broadcast band: a station at +100 kHz carrying a 1 kHz tone
    at 50 kHz peak deviation (no pre-emphasis), a weaker station at -150 kHz carrying 3 kHz, and
    noise (about 40 dB carrier-to-noise in the station's 200 kHz)."""
    n = int(fs * seconds)
    t = np.arange(n) / fs
    rng = np.random.default_rng(4)

    def station(offset_hz: float, tone_hz: float, amplitude: float) -> np.ndarray:
        phase = 2 * np.pi * FM_DEVIATION_HZ * np.cumsum(np.sin(2 * np.pi * tone_hz * t)) / fs
        return amplitude * np.exp(1j * (2 * np.pi * offset_hz * t + phase))

    z = station(FM_STATION_HZ, FM_TONE_HZ, 0.5) + station(-150e3, 3000.0, 0.2)
    z += 0.005 * (rng.standard_normal(n) + 1j * rng.standard_normal(n))
    iq = np.empty(2 * n, np.int16)
    iq[0::2] = np.round(z.real * 32767)
    iq[1::2] = np.round(z.imag * 32767)
    iq.tofile(path)


def beam_weights(path: Path, elements: int = 8, beams: int = 5, nfft: int = 256, fs: float = 48000.0,
                 spacing_m: float = 0.04, c: float = 343.0) -> None:
    """Per-bin delay-and-sum weights (bins, beams, elements) for a uniform linear array."""
    angles = np.linspace(-60, 60, beams) * np.pi / 180
    freqs = np.fft.fftfreq(nfft, 1 / fs)                   # full FFT order: complex input
    pos = np.arange(elements) * spacing_m
    delays = pos[None, :] * np.sin(angles)[:, None] / c     # (beams, elements) seconds
    w = np.exp(2j * np.pi * freqs[:, None, None] * delays[None, :, :]) / elements
    np.save(path, w.astype(np.complex64))


def room_ir(path: Path, fs: float = 48000.0, seconds: float = 0.25, rt60_s: float = 0.3) -> None:
    """A synthetic room impulse response (docs/stages.md's long FIR): the direct sound, then
    exponentially decaying noise reaching -60 dB at rt60_s; 12000 float32 taps."""
    n = int(fs * seconds)
    t = np.arange(n) / fs
    rng = np.random.default_rng(3)
    h = 0.3 * rng.standard_normal(n) * 10 ** (-3 * t / rt60_s)
    h[0] = 1.0
    np.save(path, (h / np.abs(h).sum() * 4).astype(np.float32))


RADAR_PRI = 1024  # samples between pulses
RADAR_PULSE = 128  # samples of the chirp
RADAR_PULSES = 8
RADAR_ECHOES = ((200, 0.5), (450, 0.2), (700, 0.1))  # (delay in samples after each pulse, amplitude)


def radar_pulse(path: Path) -> None:
    """The transmitted pulse: a complex linear chirp sweeping -0.4 .. +0.4 of the sample rate."""
    n = np.arange(RADAR_PULSE)
    np.save(path, np.exp(1j * np.pi * 0.8 * (n ** 2 / RADAR_PULSE - n)).astype(np.complex64))


def radar_echoes(path: Path, pulse: np.ndarray) -> None:
    """(1, 8 * 1024) complex64: after each pulse, echoes of it at 200, 450 and 700 samples with
    amplitudes 0.5, 0.2, 0.1, in complex white noise of 0.05 rms per component."""
    rng = np.random.default_rng(4)
    n = RADAR_PRI * RADAR_PULSES
    x = 0.05 * (rng.standard_normal(n) + 1j * rng.standard_normal(n))
    for k in range(RADAR_PULSES):
        for delay, amp in RADAR_ECHOES:
            s = k * RADAR_PRI + delay
            x[s:s + RADAR_PULSE] += amp * pulse
    np.save(path, x[None, :].astype(np.complex64))


if __name__ == "__main__":
    import sys

    fm_broadcast_cs16(HERE / "fm_broadcast.cs16")
    if "--fm" in sys.argv[1:]:
        print("wrote fm_broadcast.cs16")
        raise SystemExit(0)
    chirp_wav(HERE / "chirp_hum.wav")
    iq_cs16(HERE / "three_carriers.cs16")
    beam_weights(HERE / "beam_weights.npy")
    room_ir(HERE / "room_ir.npy")
    radar_pulse(HERE / "radar_pulse.npy")
    radar_echoes(HERE / "radar_echoes.npy", np.load(HERE / "radar_pulse.npy"))
    print("wrote", *sorted(p.name for p in HERE.iterdir() if p.suffix != ".py"))
