// Ask page: POST /api/ask; the answer, and the passages the LM was given, each linking to its chunk.
"use strict";

(() => {
  const { api, el, queryForm, resultItem } = ralm;
  const q = document.getElementById("ask-q");
  const k = document.getElementById("ask-k");
  const mode = document.getElementById("ask-mode");
  const retriever = document.getElementById("ask-retriever");

  function renderPassage(p) {
    const title = el("a", { class: "title", href: p.url, "data-testid": "passage-title" }, p.title || `chunk ${p.id}`);
    return resultItem(p, "ask-passage", "passage", title, p.text);
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

  const { results, go } = queryForm("ask", run);
  if (q.value.trim()) go();
})();
