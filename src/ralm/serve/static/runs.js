// Runs page: poll GET /api/metrics (new rows only) and draw the curves with uPlot (vendored):
// drag to zoom, double-click to reset, hover for values. A chart whose keys the run never logged
// says so instead of drawing.
"use strict";

(() => {
  const { api, el, fmt, showError, clearError } = ralm;
  const COLORS = ["#2458a6", "#d1495b", "#2e933c", "#edae49", "#6c4ab6", "#00798c", "#8c564b", "#e377c2"];
  const figures = Array.from(document.querySelectorAll(".chart"));
  const charts = new Map(); // figure id -> {plot, keys}
  let rows = [];
  let total = 0;

  function keysOf(fig) {
    if (fig.dataset.prefix) {
      const p = fig.dataset.prefix;
      const found = new Set();
      for (const r of rows) for (const k of Object.keys(r)) if (k.startsWith(p) && typeof r[k] === "number") found.add(k);
      return Array.from(found).sort((a, b) => (Number(a.slice(p.length)) - Number(b.slice(p.length))) || a.localeCompare(b));
    }
    const wanted = fig.dataset.keys.split(" ");
    return wanted.filter((k) => rows.some((r) => typeof r[k] === "number"));
  }

  // uPlot's columns: x = steps that logged any of `keys` (rows of one step merged), one y per key
  function columns(keys) {
    const byStep = new Map();
    for (const r of rows) {
      if (typeof r.step !== "number" || !keys.some((k) => typeof r[k] === "number")) continue;
      const m = byStep.get(r.step) || {};
      for (const k of keys) if (typeof r[k] === "number" && Number.isFinite(r[k])) m[k] = r[k];
      byStep.set(r.step, m);
    }
    const steps = Array.from(byStep.keys()).sort((a, b) => a - b);
    return [steps, ...keys.map((k) => steps.map((s) => (k in byStep.get(s) ? byStep.get(s)[k] : null)))];
  }

  function width(fig) { return Math.max(300, fig.clientWidth - 20); }

  // a y axis as wide as its longest tick label ("100,000" on a log scale); uPlot calls this until it settles
  function ySize(u, values, axisIdx, cycleNum) {
    const axis = u.axes[axisIdx];
    if (cycleNum > 1) return axis._size;
    const longest = (values || []).reduce((a, v) => (String(v).length > a.length ? String(v) : a), "");
    u.ctx.font = axis.font[0];
    return Math.max(50, Math.ceil(axis.ticks.size + axis.gap + u.ctx.measureText(longest).width / devicePixelRatio + 6));
  }

  function draw(fig) {
    const keys = keysOf(fig);
    let caption = fig.querySelector("figcaption");
    if (!caption) { caption = el("figcaption", {}, fig.dataset.title); fig.append(caption); }
    const old = charts.get(fig.id);
    if (!keys.length) {
      if (old) { old.plot.destroy(); charts.delete(fig.id); }
      if (!fig.querySelector(".empty")) fig.append(el("p", { class: "empty", "data-testid": "chart-empty" }, "not logged by this run (yet)"));
      return;
    }
    fig.querySelector(".empty")?.remove();
    const data = columns(keys);
    if (old && old.keys.join() === keys.join()) {
      const x = old.plot.scales.x;
      const prev = old.plot.data[0];
      const following = !prev.length || (x.min <= prev[0] && x.max >= prev[prev.length - 1]);
      old.plot.setData(data, following); // keep a zoom the user chose
      return;
    }
    if (old) old.plot.destroy();
    const opts = {
      width: width(fig), height: 260,
      scales: { x: { time: false }, y: fig.dataset.log ? { distr: 3 } : {} },
      axes: [{ label: "step" }, { size: ySize }],
      cursor: { drag: { x: true, y: false } },
      series: [{ label: "step" }, ...keys.map((k, i) => ({ label: k, stroke: COLORS[i % COLORS.length], width: 1.5, spanGaps: true,
        value: (_u, v) => (v === null ? "–" : fmt(v)) }))],
    };
    charts.set(fig.id, { plot: new uPlot(opts, data, fig), keys });
  }

  function showStatus(s) {
    const p = document.getElementById("run-status");
    const steps = s.steps ? ` of ${s.steps}` : "";
    const where = s.step === null ? "" : `: step ${s.step}${steps}`;
    const parts = [`${s.state}${where}`];
    if (s.writer) parts.push(`written by ${s.writer}`);
    if (s.checkpoint) parts.push(`served: ${s.checkpoint}`);
    p.textContent = parts.join(" · ");
    p.className = `status ${s.state.replace(" ", "-")}`;
    p.dataset.state = s.state;
  }

  async function poll() {
    let delay = 10000;
    try {
      const data = await api(`/metrics?offset=${total}`, { quiet: true });
      if (data.reset) rows = [];
      rows = rows.concat(data.rows);
      total = data.total;
      clearError();
      showStatus(data.status);
      if (data.rows.length || data.reset || !charts.size) figures.forEach(draw);
      if (data.status.state === "training") delay = 2000;
    } catch (e) {
      showError(e.message || e);
    }
    setTimeout(poll, delay);
  }

  window.addEventListener("resize", () => {
    for (const fig of figures) { const c = charts.get(fig.id); if (c) c.plot.setSize({ width: width(fig), height: 260 }); }
  });
  poll();
})();
