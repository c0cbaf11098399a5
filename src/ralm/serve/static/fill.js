// Fill page: POST /api/fill, then REALM Table 3: p(z|x) bars, p(y|z,x) per document, the marginal.
// The text, k and top go into the page's URL (?text=...&k=...&top=...), so a prediction can be shared;
// a page opened with ?text=... fills at once.
"use strict";

(() => {
  const { api, el, fmt, chunkLink, queryForm } = ralm;
  const text = document.getElementById("fill-text");
  const kInput = document.getElementById("fill-k");
  const topInput = document.getElementById("fill-top");

  function render(data) {
    const marginal = document.getElementById("fill-marginal");
    marginal.replaceChildren(
      ...data.prediction.map((t, j) => el("span", { class: "token", "data-testid": "marginal-token", title: `mask ${j + 1}` }, t)),
      el("span", { class: "p", "data-testid": "marginal-p" }, ` p(y|x) = ${fmt(data.p_y)}`),
    );
    const nullMass = document.getElementById("fill-null-mass");
    nullMass.textContent = data.null_mass === null
      ? (data.retrieval ? "This run has no null document." : "")
      : `Null document: p(z|x) = ${fmt(data.null_mass)} (the mass on "no retrieval needed")`;
    nullMass.dataset.value = data.null_mass === null ? "" : String(data.null_mass);
    const alts = document.getElementById("fill-alternatives");
    alts.replaceChildren(...data.alternatives.map((row, j) => el("tr", {},
      el("th", {}, `mask ${j + 1}`),
      ...row.map(([tok, p]) => el("td", {}, el("span", { class: "token" }, tok), fmt(p))),
    )));
    const docs = document.getElementById("fill-docs");
    if (docs) docs.replaceChildren(...data.docs.map(renderDoc));
    results.hidden = false;
  }

  function renderDoc(d, i) {
    const isNull = d.chunk_id < 0;
    const fill = el("div", { class: "bar-fill" });
    fill.style.width = `${Math.max(0, Math.min(1, d.p_z)) * 100}%`;
    const bar = el("div", { class: "bar", "data-testid": "pz-bar", role: "meter", "aria-valuemin": 0, "aria-valuemax": 1,
      "aria-valuenow": d.p_z, "aria-label": "p(z|x)" }, fill);
    const title = isNull ? el("span", { class: "title", "data-testid": "doc-title" }, "(null document)")
      : chunkLink(d.chunk_id, d.title, "doc-title");
    const li = el("li", { class: isNull ? "fill-doc null" : "fill-doc", "data-testid": "fill-doc",
      dataset: { chunkId: d.chunk_id, pz: d.p_z, rank: i + 1 } },
      el("div", { class: "doc-head" }, title, bar, el("span", { class: "pz", "data-testid": "pz" }, `p(z|x) = ${fmt(d.p_z)}`)),
      isNull ? null : el("p", { class: "doc-text" }, d.text.length > 400 ? d.text.slice(0, 399) + "…" : d.text),
      el("div", { class: "doc-pred", "data-testid": "doc-prediction" }, "prediction: ",
        ...d.prediction.map((t) => el("span", { class: "token" }, t)),
        ` p(y|z,x) = ${fmt(d.p_y)}`),
    );
    return li;
  }

  async function run() {
    const body = { text: text.value, top: Number(topInput.value) || 5 };
    if (kInput && kInput.value) body.k = Number(kInput.value);
    const params = new URLSearchParams({ text: body.text });
    if (body.k !== undefined) params.set("k", String(body.k));
    params.set("top", String(body.top));
    history.replaceState(null, "", `${location.pathname}?${params}`);
    render(await api("/fill", { method: "POST", body }));
  }

  const { form, results, go } = queryForm("fill", run);
  text.addEventListener("keydown", (ev) => {
    if (ev.key === "Enter" && (ev.ctrlKey || ev.metaKey)) form.requestSubmit();
  });
  if (form.dataset.runNow === "true" && text.value.trim()) go();
})();
