// Generate page: POST /api/generate; the continuation and, per retrieval step, the entries retrieved.
"use strict";

(() => {
  const { api, el, queryForm } = ralm;
  const val = (id) => document.getElementById(id).value;

  function render(data) {
    const out = document.getElementById("gen-output");
    out.replaceChildren(...data.continuations.map((c, i) => el("span", { class: "continuation", "data-testid": "continuation", dataset: { index: i } },
      el("span", { class: "prompt" }, data.prefix), " ", el("strong", {}, c.text), i + 1 < data.continuations.length ? el("br") : null)));
    const list = document.getElementById("gen-retrievals");
    if (list) {
      list.replaceChildren(...data.retrievals.map((r) => el("li", { "data-testid": "retrieval-step" },
        el("div", { class: "query" }, `after “${r.query}” (${r.prefix_tokens} tokens):`),
        el("table", { class: "entries" }, ...r.entries.map((e) => el("tr", { "data-testid": "retrieved-entry", dataset: { entry: e.entry } },
          el("td", { class: "prefix" }, e.prefix), el("td", {}, el("span", { class: "word" }, e.word)), el("td", { class: "suffix" }, e.suffix)))),
      )));
    }
    results.hidden = false;
  }

  const { results } = queryForm("gen", async () => {
    const strategy = val("gen-strategy");
    const body = {
      prefix: val("gen-prefix"), max_new_tokens: Number(val("gen-max-new")) || 20, strategy,
      top_p: Number(val("gen-top-p")) || 0.9, num_beams: Number(val("gen-beams")) || 4, seed: Number(val("gen-seed")) || 0,
    };
    render(await api("/generate", { method: "POST", body }));
  });
})();
