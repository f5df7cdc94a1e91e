"""The view in a real browser: headless Chromium (Debian's, through Selenium) loads the page while
``gk-stream run --view`` streams a synth pipeline. The spectrum's peak sits at the synth tone's
frequency, the waterfall's canvas changes between two moments, the health counters update, pausing
stops the drawing, and the token rules hold in the browser. With GK_VIEW_SCREENSHOTS=docs/img the
tests save the screenshots docs/view.md shows."""

import textwrap
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]

TONE = textwrap.dedent("""\
    version: 1
    name: tone
    sample_rate: 48000
    block_size: 1024
    channels: 2
    backend: cpu
    source: {type: synth, signal: sine, freq_hz: 3000, amplitude: 0.5, noise_std: 0.001, rate: realtime,
             duration_s: 120}
    sink: {type: view, title: "synth tone"}
    """)

RECEIVER = textwrap.dedent("""\
    # an IQ receiver: three carriers in noise, seen as samples (analysed by the viewer) and as stft frames
    version: 1
    name: receiver
    sample_rate: 1024000
    block_size: 8192
    channels: 1
    dtype: complex64
    backend: cpu
    source: {name: antenna, type: synth, signal: multitone, freqs_hz: [-250000, 64000, 300000], amplitude: 0.2,
             noise_std: 0.02, rate: realtime, duration_s: 120}
    stages:
      - {name: spectra, type: stft, nfft: 1024, hop: 1024, input: antenna}
    sinks:
      - {name: iq, type: view, input: antenna, title: "antenna IQ", floor_db: -100, ceil_db: 0}
      - {name: stft, type: view, input: spectra, bin_hz: 1000, shift: true, floor_db: -60, ceil_db: 60,
         title: "stft frames"}
    """)


def js(driver, script, *args):
    return driver.execute_script(script, *args)


def sink_frames(driver, name):
    return js(driver, "const s = window.gkView && window.gkView.sinks[arguments[0]]; return s ? s.frames : 0;", name)


def canvas_pixels(driver, name, cls):
    """The canvas's pixels as a data URL (the whole picture, for comparing two moments)."""
    return js(driver, "return document.querySelector(`section[data-sink='${arguments[0]}'] canvas.${arguments[1]}`)"
                      ".toDataURL();", name, cls)


def start(view_run, tmp_path, text, *args):
    f = tmp_path / "p.yaml"
    f.write_text(text)
    run = view_run(f, "--view", "127.0.0.1:0", *args)
    return run, run.wait_url()


def test_the_spectrum_peaks_at_the_tone_the_waterfall_moves_and_the_counters_update(
        view_run, browser, tmp_path, poll):
    run, url = start(view_run, tmp_path, TONE, "--view-token", "auto")
    browser.get(url)
    poll(lambda: sink_frames(browser, "source") >= 5)
    peak = browser.find_element("css selector", "section[data-sink='source'] .peak")
    hz = float(poll(lambda: peak.get_attribute("data-x")))
    assert hz == pytest.approx(3000, abs=48000 / 2048)  # within a bin of the tone
    assert float(peak.get_attribute("data-db")) == pytest.approx(-6.0, abs=0.5)
    # the page's own trace: its loudest point is where the tone is
    meta_peak = js(browser, """const s = window.gkView.sinks['source'];
        return {x: s.peak.x, unit: s.meta.axis.unit, points: s.meta.axis.points};""")
    assert meta_peak["unit"] == "Hz" and meta_peak["points"] == 512

    first = canvas_pixels(browser, "source", "waterfall")
    n = sink_frames(browser, "source")
    poll(lambda: sink_frames(browser, "source") >= n + 5)
    assert canvas_pixels(browser, "source", "waterfall") != first

    def blocks():  # the table is redrawn at each update: read it through the page
        return int(js(browser, "return document.querySelector(\"#health tr[data-stream='tone'] "
                               "td[data-field='blocks']\").textContent;"))

    b1 = poll(blocks)
    updates = js(browser, "return window.gkView.healthUpdates;")
    poll(lambda: blocks() > b1 and js(browser, "return window.gkView.healthUpdates;") > updates)
    row = js(browser, "return window.gkView.health[0];")
    assert row["stream"] == "tone" and row["device"] == "cpu" and row["latency_from"] == "scheduler"
    assert {"p50_us", "p99_us", "misses", "drops", "xruns", "busy", "blocks"} <= set(row)

    # pause: frames still arrive, nothing is drawn
    browser.find_element("id", "pause").click()
    drawn = js(browser, "return window.gkView.sinks['source'].drawn;")
    frames = sink_frames(browser, "source")
    poll(lambda: sink_frames(browser, "source") >= frames + 3)
    assert js(browser, "return window.gkView.sinks['source'].drawn;") == drawn
    assert browser.find_element("id", "status").text == "paused"
    assert run.proc.poll() is None  # the run went on the whole time
    assert run.stop() == 130  # SIGINT: drained, summary printed
    assert "pipeline tone" in run.stdout


def test_the_browser_is_refused_without_the_token_and_with_a_wrong_one(view_run, browser, tmp_path, poll):
    run, url = start(view_run, tmp_path, TONE, "--view-token", "auto")
    base = url.split("?")[0]
    browser.get(base)
    assert "needs its token" in browser.find_element("tag name", "body").text
    browser.get(base + "?token=wrong")
    assert "wrong token" in browser.find_element("tag name", "body").text
    status = js(browser, "return window.gkView ? 'page' : 'refused';")
    assert status == "refused"
    browser.get(url)  # the right one: the page, its script and its socket (through the page's cookie)
    poll(lambda: sink_frames(browser, "source") >= 2)
    code = js(browser, "return fetch('/api/state', {credentials: 'omit'}).then(r => r.status);")
    assert code == 401
    assert js(browser, "return fetch('/api/state').then(r => r.status);") == 200


def test_a_receiver_shows_its_carriers_and_its_stft_frames(view_run, browser, tmp_path, poll, screenshots):
    run, url = start(view_run, tmp_path, RECEIVER)
    browser.get(url)
    poll(lambda: sink_frames(browser, "iq") >= 40 and sink_frames(browser, "stft") >= 5, timeout=60)
    peaks = js(browser, "return [window.gkView.sinks.iq.peak.x, window.gkView.sinks.stft.peak.x];")
    carriers = (-250e3, 64e3, 300e3)
    assert min(abs(peaks[0] - c) for c in carriers) <= 1.024e6 / 2048
    assert min(abs(peaks[1] - c) for c in carriers) <= 1000
    assert js(browser, "return getComputedStyle(document.querySelector(\"section[data-sink='iq'] "
                       "canvas.constellation\")).display;") != "none"
    if screenshots is not None:
        js(browser, """document.querySelectorAll("section[data-sink='iq'] figure").forEach(f => {
            if (!f.querySelector('canvas.spectrum, canvas.waterfall')) f.style.display = 'none'; });""")
        section = browser.find_element("css selector", "section[data-sink='iq']")
        section.screenshot(str(screenshots / "view-receiver.png"))


def test_the_health_panel_of_a_w1_stream(view_run, browser, tmp_path, poll, screenshots):
    run = view_run(ROOT / "benchmarks" / "w1.yaml", "--backend", "cpu", "--view", "127.0.0.1:0")
    browser.get(run.wait_url())

    def row():
        rows = js(browser, "return window.gkView.health;")
        return rows[0] if rows and rows[0].get("blocks", 0) > 200 and rows[0].get("device") else None

    r = poll(row, timeout=60)
    assert r["stream"] == "w1" and r["device"] == "cpu"
    browser.find_element("id", "pause").click()  # the table stays as drawn: read it, then photograph it
    cells = js(browser, """const out = {};
        document.querySelectorAll("#health tr[data-stream='w1'] td").forEach(td => { out[td.dataset.field] = td.textContent; });
        return out;""")
    assert int(cells["blocks"]) > 200 and cells["busy"].endswith("%")
    assert not browser.find_elements("css selector", "section.sink")  # w1 has no view sink: health only
    if screenshots is not None:
        browser.find_element("id", "health-panel").screenshot(str(screenshots / "view-health-w1.png"))
