// gk-stream view: draws what the server sends over /ws with plain canvas (no library, no build step).
// window.gkView holds the figures drawn last (tests read it): frames and peaks per sink, the health rows.
"use strict";
(function () {
  const state = { connected: false, paused: false, ended: false, sinks: {}, health: [], healthUpdates: 0, messages: 0 };
  window.gkView = state;
  const M = { left: 56, right: 12, top: 10, bottom: 30 };  // plot margins, px
  const $ = (sel, root) => (root || document).querySelector(sel);
  const statusEl = $("#status"), pauseEl = $("#pause");

  function setStatus(s) { statusEl.dataset.state = s; statusEl.textContent = s; }
  pauseEl.addEventListener("click", () => {
    state.paused = !state.paused;
    pauseEl.setAttribute("aria-pressed", String(state.paused));
    pauseEl.textContent = state.paused ? "Resume display" : "Pause display";
    setStatus(state.paused ? "paused" : (state.ended ? "ended" : (state.connected ? "live" : "closed")));
  });

  function bytes(b64) { const s = atob(b64); const a = new Uint8Array(s.length); for (let i = 0; i < s.length; i++) a[i] = s.charCodeAt(i); return a; }
  function signed(q) { const u = bytes(q.q); const a = new Float32Array(u.length); for (let i = 0; i < u.length; i++) a[i] = ((u[i] << 24) >> 24) / 127 * q.scale; return a; }
  function dbs(b64, meta) { const u = bytes(b64); const a = new Float32Array(u.length); for (let i = 0; i < u.length; i++) a[i] = meta.floor_db + u[i] * meta.db_step; return a; }
  function fmtHz(v, unit) {
    if (unit !== "Hz") return v.toFixed(0);
    const a = Math.abs(v);
    const t = (x, d) => +x.toFixed(d) + "";
    if (a >= 1e9) return t(v / 1e9, 3) + " G"; if (a >= 1e6) return t(v / 1e6, 3) + " M";
    if (a >= 1e3) return t(v / 1e3, 2) + " k"; return t(v, 1);
  }
  function fmtS(v) { const a = Math.abs(v); if (a < 1e-12) return "0"; if (a < 1e-3) return +(v * 1e6).toFixed(1) + " µ"; if (a < 1) return +(v * 1e3).toFixed(2) + " m"; return +v.toFixed(3) + ""; }
  const COLORS = ["#88c0d0", "#a3be8c", "#ebcb8b", "#d08770", "#b48ead", "#bf616a", "#8fbcbb", "#5e81ac"];

  // axes: x from x0 to x1 (label fn), y from y0 to y1; returns a mapping of data to pixels
  function axes(ctx, x0, x1, y0, y1, xfmt, xunit, yunit, ystep) {
    const w = ctx.canvas.width, h = ctx.canvas.height, pw = w - M.left - M.right, ph = h - M.top - M.bottom;
    ctx.clearRect(0, 0, w, h);
    ctx.strokeStyle = "#2e3440"; ctx.fillStyle = "#8893a5"; ctx.font = "11px sans-serif"; ctx.lineWidth = 1;
    ctx.textAlign = "right"; ctx.textBaseline = "middle";
    const step = ystep || niceStep(y1 - y0, 5);
    for (let v = Math.ceil(y0 / step) * step; v <= y1 + 1e-9; v += step) {
      const y = M.top + ph - (v - y0) / (y1 - y0) * ph;
      ctx.beginPath(); ctx.moveTo(M.left, y); ctx.lineTo(w - M.right, y); ctx.stroke();
      ctx.fillText(+v.toFixed(3) + "", M.left - 4, y);
    }
    ctx.textAlign = "center"; ctx.textBaseline = "top";
    if (xfmt) {
      const xs = niceStep(x1 - x0, 7);
      for (let v = Math.ceil(x0 / xs) * xs; v <= x1 + 1e-9 * Math.abs(x1 - x0); v += xs) {
        const x = M.left + (v - x0) / (x1 - x0) * pw;
        ctx.beginPath(); ctx.moveTo(x, M.top); ctx.lineTo(x, M.top + ph); ctx.stroke();
        ctx.fillText(xfmt(Math.abs(v) < xs * 1e-6 ? 0 : v), x, M.top + ph + 4);
      }
      ctx.textAlign = "right"; ctx.fillText(xunit, w - 2, M.top + ph + 16);
    }
    ctx.save(); ctx.translate(12, M.top + ph / 2); ctx.rotate(-Math.PI / 2); ctx.textAlign = "center"; ctx.fillText(yunit, 0, 0); ctx.restore();
    return { x: v => M.left + (v - x0) / (x1 - x0) * pw, y: v => M.top + ph - (Math.max(y0, Math.min(y1, v)) - y0) / (y1 - y0) * ph, pw, ph };
  }
  function niceStep(span, n) { const raw = span / n, p = Math.pow(10, Math.floor(Math.log10(raw))); const m = raw / p; return (m < 1.5 ? 1 : m < 3.5 ? 2 : m < 7.5 ? 5 : 10) * p; }
  function line(ctx, map, xs, ys, color, dash) {
    ctx.strokeStyle = color; ctx.setLineDash(dash || []); ctx.lineWidth = 1.3; ctx.beginPath();
    for (let i = 0; i < ys.length; i++) { const X = map.x(xs(i)), Y = map.y(ys[i]); i ? ctx.lineTo(X, Y) : ctx.moveTo(X, Y); }
    ctx.stroke(); ctx.setLineDash([]);
  }
  function colormap(t) {  // dark blue -> cyan -> yellow -> white
    t = Math.max(0, Math.min(1, t));
    const stops = [[0, 0, 20], [10, 20, 90], [0, 110, 170], [40, 200, 190], [250, 220, 60], [255, 255, 255]];
    const f = t * (stops.length - 1), i = Math.min(stops.length - 2, Math.floor(f)), r = f - i, a = stops[i], b = stops[i + 1];
    return [a[0] + (b[0] - a[0]) * r, a[1] + (b[1] - a[1]) * r, a[2] + (b[2] - a[2]) * r];
  }

  function addSink(meta) {
    let s = state.sinks[meta.name];
    if (s) { s.meta = meta; return s; }
    const node = $("#sink-template").content.firstElementChild.cloneNode(true);
    node.dataset.sink = meta.name;
    if (meta.complex) node.classList.add("complex");
    if (meta.domain === "frames") node.classList.add("frames");
    $(".sink-title", node).textContent = meta.title;
    $(".sink-spec", node).textContent = meta.spec;
    $("#sinks").appendChild(node);
    const wf = $(".waterfall", node), img = document.createElement("canvas");
    img.width = wf.width - M.left - M.right; img.height = wf.height - M.top - M.bottom;
    s = { meta, node, frames: 0, drawn: 0, peak: null, hold: null, rows: [], img, lastT: null, rowDt: 1 / meta.fps };
    state.sinks[meta.name] = s;
    return s;
  }

  function xOf(meta) { const a = meta.axis; return i => a.first + (a.last - a.first) * (i + 0.5) / a.points; }

  function drawFrame(s, f) {
    const meta = s.meta, node = s.node, unit = meta.axis.unit;
    const traces = f.spectrum.map(b => dbs(b, meta));
    if (!s.hold || s.hold.length !== traces.length) s.hold = traces.map(t => Float32Array.from(t));
    const decay = 6 / meta.fps;  // peak hold falls 6 dB a second
    traces.forEach((t, k) => { const h = s.hold[k]; for (let i = 0; i < t.length; i++) h[i] = Math.max(t[i], h[i] - decay); });
    // spectrum
    const sp = $(".spectrum", node).getContext("2d");
    const map = axes(sp, meta.axis.first, meta.axis.last, meta.floor_db, meta.ceil_db, v => fmtHz(v, unit), unit, "dB", 20);
    const xs = xOf(meta);
    traces.forEach((t, k) => { line(sp, map, xs, s.hold[k], COLORS[k % 8] + "99", [2, 3]); line(sp, map, xs, t, COLORS[k % 8]); });
    // waterfall: the image scrolls down one row a frame; the newest row on top
    const row = dbs(f.waterfall, meta), img = s.img, ictx = img.getContext("2d");
    ictx.drawImage(img, 0, 1);
    const line1 = ictx.createImageData(img.width, 1);
    for (let x = 0; x < img.width; x++) {
      const v = row[Math.min(row.length - 1, Math.floor(x / img.width * row.length))];
      const c = colormap((v - meta.floor_db) / (meta.ceil_db - meta.floor_db));
      line1.data.set([c[0], c[1], c[2], 255], x * 4);
    }
    ictx.putImageData(line1, 0, 0);
    if (s.lastT !== null && f.t > s.lastT) s.rowDt = 0.8 * s.rowDt + 0.2 * (f.t - s.lastT);
    s.lastT = f.t;
    const wf = $(".waterfall", node).getContext("2d");
    const span = s.rowDt * img.height;
    const wmap = axes(wf, meta.axis.first, meta.axis.last, -span, 0, v => fmtHz(v, unit), unit, "s (ago)", niceStep(span, 4));
    wf.drawImage(img, M.left, M.top);
    void wmap;
    if (f.scope) drawScope(s, f);
    if (f.constellation) drawConstellation(s, f);
    if (f.levels) drawMeters(s, f);
    s.drawn++;
  }

  function drawScope(s, f) {
    const ctx = $(".scope", s.node).getContext("2d"), sc = f.scope;
    const re = sc.re.map(signed), n = re.length ? re[0].length : 0;
    let amp = 0; sc.re.concat(sc.im).forEach(q => { amp = Math.max(amp, q.scale); });
    amp = amp > 0 ? amp * 1.1 : 1;
    // time before the newest sample (at stream time t0 + n dt, shown in the readout)
    const map = axes(ctx, -n * sc.dt, 0, -amp, amp, fmtS, "s (before t)", "amplitude");
    re.forEach((y, k) => line(ctx, map, i => (i - n) * sc.dt, y, COLORS[k % 8]));
    sc.im.map(signed).forEach((y, k) => line(ctx, map, i => (i - n) * sc.dt, y, COLORS[k % 8] + "88", [3, 2]));
  }

  function drawConstellation(s, f) {
    const ctx = $(".constellation", s.node).getContext("2d"), iq = signed(f.constellation);
    const a = (f.constellation.scale || 1) * 1.1, w = ctx.canvas.width, h = ctx.canvas.height;
    ctx.clearRect(0, 0, w, h); ctx.strokeStyle = "#2e3440";
    ctx.beginPath(); ctx.moveTo(w / 2, 0); ctx.lineTo(w / 2, h); ctx.moveTo(0, h / 2); ctx.lineTo(w, h / 2); ctx.stroke();
    ctx.fillStyle = "#8893a5"; ctx.font = "11px sans-serif"; ctx.fillText("I", w - 10, h / 2 - 4); ctx.fillText("Q", w / 2 + 4, 10);
    ctx.fillText("±" + a.toPrecision(2), 4, h - 4);
    ctx.fillStyle = "#88c0d0";
    for (let i = 0; i + 1 < iq.length; i += 2) ctx.fillRect(w / 2 + iq[i] / a * w / 2 - 1, h / 2 - iq[i + 1] / a * h / 2 - 1, 2, 2);
  }

  function drawMeters(s, f) {
    const ctx = $(".meters", s.node).getContext("2d"), rms = f.levels.rms_db, pk = f.levels.peak_db;
    const w = ctx.canvas.width, h = ctx.canvas.height, lo = -100, hi = 0, n = rms.length;
    const map = axes(ctx, 0, n, lo, hi, null, "", "dBFS", 20);
    const bw = Math.min(48, map.pw / n), every = Math.ceil(n / 32);
    ctx.textAlign = "center"; ctx.textBaseline = "top"; ctx.fillStyle = "#8893a5";
    for (let c = 0; c < n; c += every) ctx.fillText(String(c), M.left + (c + 0.5) * bw, map.y(lo) + 4);
    ctx.textAlign = "right"; ctx.fillText("channel", w - 2, map.y(lo) + 16);
    for (let c = 0; c < n; c++) {
      const x = M.left + c * bw, y = map.y(rms[c]);
      ctx.fillStyle = rms[c] > -3 ? "#bf616a" : "#a3be8c"; ctx.fillRect(x + bw * 0.15, y, Math.max(1, bw * 0.7), map.y(lo) - y);
      ctx.fillStyle = "#ebcb8b"; ctx.fillRect(x + bw * 0.1, map.y(pk[c]) - 1, Math.max(1, bw * 0.8), 2);
    }
    void w; void h;
  }

  function onFrame(f) {
    const s = state.sinks[f.sink];
    if (!s) return;
    s.frames++;
    s.peak = f.peak; s.t = f.t; s.dropped = f.dropped; s.levels = f.levels || null;
    const pe = $(".peak", s.node);
    pe.dataset.db = f.peak.db; pe.dataset.x = f.peak.x;
    pe.textContent = f.peak.db.toFixed(1) + " dB at " + fmtHz(f.peak.x, s.meta.axis.unit) + s.meta.axis.unit;
    $(".frame-count", s.node).textContent = s.frames;
    $(".stream-time", s.node).textContent = f.t.toFixed(2);
    $(".dropped", s.node).textContent = f.dropped;
    if (!state.paused) drawFrame(s, f);
  }

  const HEALTH = ["stream", "device", "blocks", "p50_us", "p99_us", "misses", "drops", "xruns", "busy", "view_dropped"];
  function onHealth(h) {
    state.health = h.streams || []; state.healthUpdates++; state.ended = !!h.ended;
    const errs = Object.entries(h.errors || {}), errEl = $("#errors");
    errEl.hidden = !errs.length;
    errEl.textContent = errs.map(([k, v]) => `sink ${k}: ${v}`).join("; ");
    if (state.ended && !state.paused) setStatus("ended");
    if (state.paused) return;
    const body = $("#health tbody");
    body.replaceChildren(...state.health.map(r => {
      const tr = document.createElement("tr"); tr.dataset.stream = r.stream;
      HEALTH.forEach(k => {
        const td = document.createElement("td"); td.dataset.field = k; td.className = k;
        let v = r[k];
        if (k === "busy") v = (100 * v).toFixed(1) + " %";
        else if (k === "device") v = v || "starting";
        else if (typeof v === "number" && !Number.isInteger(v)) v = v.toFixed(1);
        if (["misses", "drops", "xruns", "view_dropped"].includes(k) && r[k] > 0) td.classList.add("bad");
        td.textContent = v; tr.appendChild(td);
      });
      return tr;
    }));
  }

  function connect() {
    const ws = new WebSocket((location.protocol === "https:" ? "wss://" : "ws://") + location.host + "/ws" + location.search);
    ws.onopen = () => { state.connected = true; if (!state.paused) setStatus("live"); };
    ws.onclose = () => { state.connected = false; if (!state.paused) setStatus(state.ended ? "ended" : "closed"); };
    ws.onmessage = ev => {
      const m = JSON.parse(ev.data); state.messages++;
      if (m.type === "hello") { if (m.title) { $("#title").textContent = m.title; document.title = m.title + " - gk-stream view"; } m.sinks.forEach(addSink); }
      else if (m.type === "meta") addSink(m.sink);
      else if (m.type === "frame") onFrame(m);
      else if (m.type === "health") onHealth(m);
    };
  }
  connect();
})();
