// ralm serve: what every page's script shares. Corpus text only ever enters the page as text
// nodes (textContent, Node.append of strings), never as HTML.
"use strict";

const ralm = (() => {
  const root = document.body.dataset.root || "";
  const hasCorpus = Boolean(document.body.dataset.corpus);
  const progress = document.getElementById("progress");
  const errorBox = document.getElementById("error");
  let busy = 0;

  class ApiError extends Error {
    constructor(message, status) { super(message); this.status = status; }
  }

  function setBusy(delta) {
    busy = Math.max(0, busy + delta);
    progress.hidden = busy === 0;
    document.body.setAttribute("aria-busy", busy > 0 ? "true" : "false");
  }

  // fetch root/api/PATH; JSON in and out; a non-2xx answer throws ApiError(its one-line "error").
  async function api(path, { method = "GET", body, quiet = false } = {}) {
    if (!quiet) setBusy(+1);
    try {
      const init = { method, headers: { Accept: "application/json" } };
      if (body !== undefined) {
        init.headers["Content-Type"] = "application/json";
        init.body = JSON.stringify(body);
      }
      const resp = await fetch(root + "/api" + path, init);
      let data = null;
      try { data = await resp.json(); } catch (_) { data = null; }
      if (!resp.ok) throw new ApiError((data && data.error) || `HTTP ${resp.status}`, resp.status);
      return data;
    } finally {
      if (!quiet) setBusy(-1);
    }
  }

  function showError(message) {
    errorBox.textContent = String(message);
    errorBox.hidden = false;
  }

  function clearError() {
    errorBox.hidden = true;
    errorBox.textContent = "";
  }

  // el("li", {class: "x", dataset: {id: 3}, text: "..."}, child, "text child", ...)
  function el(tag, props = {}, ...children) {
    const e = document.createElement(tag);
    for (const [k, v] of Object.entries(props)) {
      if (v === undefined || v === null) continue;
      if (k === "text") e.textContent = String(v);
      else if (k === "class") e.className = v;
      else if (k === "dataset") Object.assign(e.dataset, v);
      else e.setAttribute(k, String(v));
    }
    for (const c of children) if (c !== null && c !== undefined) e.append(c);
    return e;
  }

  // text with [start, end) spans (Unicode code points) wrapped in <mark class="hit">
  function marked(text, spans) {
    const frag = document.createDocumentFragment();
    const cps = Array.from(text);
    let pos = 0;
    for (const [s, e] of spans || []) {
      if (s < pos) continue;
      if (s > pos) frag.append(cps.slice(pos, s).join(""));
      frag.append(el("mark", { class: "hit" }, cps.slice(s, e).join("")));
      pos = e;
    }
    if (pos < cps.length) frag.append(cps.slice(pos).join(""));
    return frag;
  }

  // a chunk's title, linking to its page in the corpus browser when the server has one
  function chunkLink(id, title, testid) {
    const label = title || `chunk ${id}`;
    if (!hasCorpus) return el("span", { class: "title", "data-testid": testid }, label);
    return el("a", { class: "title", href: `${root}/corpus/${Number(id)}`, "data-testid": testid }, label);
  }

  function fmt(p) {
    if (p === null || p === undefined || Number.isNaN(p)) return "–";
    if (p === 0) return "0";
    return Math.abs(p) >= 0.001 ? p.toFixed(3) : p.toExponential(2);
  }

  // run fn while `button` is disabled and `region` is marked busy; errors go to the error box
  async function during(button, region, fn) {
    clearError();
    if (button) button.disabled = true;
    if (region) region.setAttribute("aria-busy", "true");
    try {
      await fn();
    } catch (e) {
      showError(e.message || e);
    } finally {
      if (button) button.disabled = false;
      if (region) region.setAttribute("aria-busy", "false");
    }
  }

  // a query page's PREFIX-form: submitting it runs `run` while PREFIX-submit is disabled and
  // PREFIX-results is marked busy (see during); `go()` runs it the same way without a submit
  function queryForm(prefix, run) {
    const form = document.getElementById(`${prefix}-form`);
    const button = document.getElementById(`${prefix}-submit`);
    const results = document.getElementById(`${prefix}-results`);
    const go = () => during(button, results, run);
    form.addEventListener("submit", (ev) => {
      ev.preventDefault();
      go();
    });
    return { form, button, results, go };
  }

  // one ranked hit {id, rank, score} as a result list item: rank, `title` (a node), score and
  // `snippet`; testid: the item's data-testid, and `${part}-score` / `${part}-text` its parts'
  function resultItem(h, testid, part, title, snippet) {
    return el("li", { class: "result", "data-testid": testid, dataset: { chunkId: h.id, rank: h.rank, score: h.score } },
      el("div", { class: "result-head" },
        el("span", { class: "rank" }, `${h.rank}.`),
        title,
        el("span", { class: "score", "data-testid": `${part}-score` }, `score ${h.score.toFixed(3)}`)),
      el("p", { class: "snippet", "data-testid": `${part}-text` }, snippet),
    );
  }

  return { api, ApiError, showError, clearError, el, marked, chunkLink, fmt, during, queryForm, resultItem, root };
})();
