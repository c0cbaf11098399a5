"""`ralm surealm evaluate`'s table: held-out perplexity of trained SUREALM / no-retrieval runs, and a
kNN-LM row on top of one of them (`evaluate_models`), printed by `format_rows`; and the check that a
fresh SUREALM model's memory is inert (`step0_ratio`); per-position NLL of chosen sentences
(`sentence_nll`), for measures on some tokens only."""

from __future__ import annotations

from ralm.surealm.sentences import FILL_SPLITS

__all__ = ["evaluate_models", "format_rows", "sentence_nll", "step0_ratio"]


def evaluate_models(
    models: list[str], split: str, datastore: str | None, knnlm: str | None, device: str, knn_k: int = 64
) -> list[dict]:
    """One row per model (and a kNN-LM row on top of `knnlm`) on `split`.

    Refuses, before loading any model, a data store whose `split` is empty (no perplexity over 0
    tokens), and for `knnlm` one without valid sentences (lambda and T are tuned on them)."""
    from ralm.surealm.datastore import Datastore
    from ralm.surealm.knnlm import KnnLM
    from ralm.surealm.train import evaluate, load_trained, run_datastore

    no_split = (
        f"there is no {split} perplexity over 0 tokens; rebuild the data store ({FILL_SPLITS}) "
        "or evaluate another --split"
    )
    for path in [*models, *([knnlm] if knnlm else [])]:
        ds = run_datastore(path, datastore)
        if ds is None:
            continue  # load_trained says what is missing
        store = Datastore(ds)
        if path == knnlm:
            store.require_split(
                "valid",
                "--knnlm tunes lambda and the temperature on the valid split; rebuild the data store "
                f"({FILL_SPLITS}) or leave out --knnlm",
            )
        store.require_split(split, no_split)

    rows = []
    for path in models:
        model, _tok, store, batcher = load_trained(path, datastore, device)
        c = evaluate(model, batcher, store.split_ids(split))
        kind = "surealm" if model.config.retrieval else "no retrieval"
        rows.append({"model": path, "kind": kind, **c.as_dict()})
    if knnlm:
        model, _tok, store, batcher = load_trained(knnlm, datastore, device)
        knn = KnnLM(model, batcher, k=knn_k)
        size = knn.build(store.split_ids("train"))
        lam, temp, _ = KnnLM.tune(knn.scores(store.split_ids("valid")))
        c = knn.scores(store.split_ids(split)).perplexity(lam, temp)
        rows.append(
            {
                "model": knnlm,
                "kind": f"kNN-LM (k={knn_k}, lambda={lam}, T={temp}, {size:,} contexts)",
                **c.as_dict(),
            }
        )
    return rows


def format_rows(rows: list[dict], split: str) -> str:
    """The rows of `evaluate_models` as a fixed-width text table."""
    head = f"{'model':<40} {'kind':<48} {'token ppl':>10} {'word ppl':>10} {'tokens':>8} {'words':>8}"
    lines = [f"{split} perplexity", head, "-" * len(head)]
    for r in rows:
        lines.append(
            f"{r['model'][-40:]:<40} {r['kind'][:48]:<48} {r['token_ppl']:>10.3f} {r['word_ppl']:>10.3f} "
            f"{r['tokens']:>8} {r['words']:>8}"
        )
    return "\n".join(lines)


def step0_ratio(
    datastore: str, lm: str, k: int, window: int | None = None, split: str = "test", seed: int = 0
) -> dict[str, float]:
    """Perplexity on `split` of a fresh SUREALM model (the gated cross-attention pathway, retrieved
    memory of `k` neighbours, `window` latest blocks visible) over that of its own backbone without
    memory: {"ppl_surealm", "ppl_backbone", "ratio"}, the ratio 1 (to float precision) when the memory
    is inert at step 0 as it should be. CPU, fp32."""
    import torch

    from ralm.models.causal import load_as_causal_lm
    from ralm.models.tokenizers import load_lm_tokenizer
    from ralm.surealm.data import SentenceBatcher
    from ralm.surealm.datastore import Datastore
    from ralm.surealm.model import SurealmConfig, SurealmLM
    from ralm.surealm.train import evaluate

    store = Datastore(datastore)
    tok, _ = load_lm_tokenizer(str(lm))
    torch.manual_seed(seed)
    cfg = SurealmConfig(lm=str(lm), k=k, mem_dim=store.dim, pathway="cross", memory_window=window)
    sure = SurealmLM(load_as_causal_lm(str(lm)), cfg).eval()
    base = SurealmLM(sure.backbone, SurealmConfig(lm=str(lm), retrieval=False, mem_dim=store.dim)).eval()
    ids = store.split_ids(split)
    cpu = torch.device("cpu")
    with_memory = evaluate(sure, SentenceBatcher(store, tok, k=k, delta=1), ids, device=cpu, autocast="off")
    backbone = evaluate(
        base, SentenceBatcher(store, tok, k=k, delta=1, retrieval=False), ids, device=cpu, autocast="off"
    )
    return {
        "ppl_surealm": with_memory.token_ppl,
        "ppl_backbone": backbone.token_ppl,
        "ratio": with_memory.token_ppl / backbone.token_ppl,
    }


def sentence_nll(run: str, ids: list[int], batch_size: int = 32) -> list[tuple[list[int], list[float]]]:
    """Per sentence of the run's data store (`ids`), its LM tokens (T,) and the trained run's NLL in
    nats of each prediction (T + 1,: token j given the tokens before it and the memory, then the end of
    the sentence), as `ralm surealm evaluate` scores them. CPU, fp32."""
    import numpy as np
    import torch
    import torch.nn.functional as F

    from ralm.surealm.train import load_trained

    model, _, store, batcher = load_trained(run, device="cpu")
    model.eval()
    keep = ("input_ids", "attention_mask", "mem_keys", "mem_values", "mem_block")
    out: list[tuple[list[int], list[float]]] = []
    with torch.no_grad():
        for b0 in range(0, len(ids), batch_size):
            chunk = [int(i) for i in ids[b0 : b0 + batch_size]]
            batch = batcher.batch(np.asarray(chunk))
            logits = model(**{k: batch[k] for k in keep if k in batch})
            nll = F.cross_entropy(logits.float().transpose(1, 2), batch["labels"], reduction="none")
            for r, sid in enumerate(chunk):
                toks = store.tokens(sid).tolist()
                out.append((toks, nll[r, : len(toks) + 1].tolist()))
    return out
