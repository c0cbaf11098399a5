// Ask page: POST /api/ask; the answer, and the passages the LM was given, each linking to its chunk.
"use strict";

(() => {
  const { api, el, during } = ralm;
  const form = document.getElementById("ask-form");
  const q = document.getElementById("ask-q");
  const k = document.getElementById("ask-k");
  const mode = document.getElementById("ask-mode");
  const retriever = document.getElementById("ask-retriever");
  const button = document.getElementById("ask-submit");
  const results = document.getElementById("ask-results");

  function renderPassage(p) {
    return el("li", { class: "result", "data-testid": "ask-passage", dataset: { chunkId: p.id, rank: p.rank, score: p.score } },
      el("div", { class: "result-head" },
        el("span", { class: "rank" }, `${p.rank}.`),
        el("a", { class: "title", href: p.url, "data-testid": "passage-title" }, p.title || `chunk ${p.id}`),
        el("span", { class: "score", "data-testid": "passage-score" }, `score ${p.score.toFixed(3)}`)),
      el("p", { class: "snippet", "data-testid": "passage-text" }, p.text),
    );
  }

  function render(data) {
    document.getElementById("ask-answer").textContent = data.answer;
    const where = data.retriever ? `${data.mode}, ${data.retriever}` : data.mode;
    document.getElementById("ask-timing").textContent =
      `${where} · retrieval ${data.retrieve_seconds.toFixed(3)} s · generation ${data.generate_seconds.toFixed(3)} s`;
    const list = document.getElementById("ask-passages");
    list.replaceChildren(...data.passages.map(renderPassage));
    if (!data.passages.length) list.append(el("li", { class: "muted" }, "no passages (closed-book)"));
    document.getElementById("ask-prompt").textContent = data.prompt;
    results.hidden = false;
  }

  async function run() {
    const params = new URLSearchParams({ q: q.value, k: k.value || "", mode: mode.value, retriever: retriever.value });
    history.replaceState(null, "", `${location.pathname}?${params}`);
    const body = { question: q.value, mode: mode.value, retriever: retriever.value };
    if (k.value) body.k = Number(k.value);
    render(await api("/ask", { method: "POST", body }));
  }

  form.addEventListener("submit", (ev) => {
    ev.preventDefault();
    during(button, results, run);
  });
  if (q.value.trim()) during(button, results, run);
})();
