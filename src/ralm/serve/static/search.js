// Search page: GET /api/search for each chosen retriever, results side by side, query terms marked.
"use strict";

(() => {
  const { api, el, marked, chunkLink, queryForm, resultItem } = ralm;
  const q = document.getElementById("search-q");
  const k = document.getElementById("search-k");
  const which = document.getElementById("search-retriever");

  function renderHit(h) {
    return resultItem(h, "result", "result", chunkLink(h.id, h.title, "result-title"), marked(h.text, h.highlights));
  }

  async function run() {
    const chosen = which.value === "both" ? ["dense", "bm25"] : [which.value];
    const params = new URLSearchParams({ q: q.value, k: k.value || "10", retriever: which.value });
    history.replaceState(null, "", `${location.pathname}?${params}`);
    for (const col of region.querySelectorAll(".column")) col.hidden = !chosen.includes(col.dataset.retriever);
    await Promise.all(chosen.map(async (r) => {
      const col = document.getElementById(`results-${r}`);
      const list = col.querySelector("ol.results");
      list.replaceChildren();
      const p = new URLSearchParams({ q: q.value, k: k.value || "10", retriever: r });
      const data = await api(`/search?${p}`);
      list.replaceChildren(...data.results.map(renderHit));
      if (!data.results.length) list.append(el("li", { class: "muted" }, "no results"));
    }));
  }

  const { results: region, go } = queryForm("search", run);
  if (q.value.trim()) go();
})();
