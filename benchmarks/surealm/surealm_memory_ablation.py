"""Diagnostic: does a trained SUREALM model use what it retrieves?

Scores the validation sentences of a trained run three ways with the same weights:
* retrieved: the data store's offline top-K for every prefix (what the model was trained with);
* random: every retrieved entry replaced by a uniformly drawn training entry (seeded), so the
  memory has the same shape and statistics but says nothing about the sentence;
* no memory: the memory slots masked out (mem_block = 0 everywhere).
If the model uses its retrievals, "retrieved" is clearly below the other two.

Also recorded: the share of attention that goes to memory slots, per layer (averaged over heads
and over the positions that may see memory), and the mean |gain| of the memory LayerNorms next to
the token embeddings' LayerNorm: a model can attend to memory slots as a sink (their value is the
layer's value bias when the gains are ~0) without reading what they hold.

Run: python -m benchmarks.surealm.surealm_memory_ablation RUN [--split valid]
Writes benchmarks/results/surealm_memory_ablation.json.
"""

from __future__ import annotations

import argparse

from benchmarks.common import script_command, write_result


def memory_attention_mass(model, batcher, sids, batch_size: int = 32) -> list[float]:
    """Per layer: the attention probability on memory slots, averaged over heads and over the
    real positions t >= delta (those that may see memory). Runs the backbone's eager attention."""
    import torch

    impl = model.attn_impl
    model.eval()
    model.backbone.set_attn_implementation("eager")
    model.attn_impl = "eager"  # SurealmLM then builds an additive mask
    caught: list = []
    pre = model.backbone.register_forward_pre_hook(
        lambda _m, a, kw: (a, {**kw, "output_attentions": True}), with_kwargs=True
    )
    post = model.backbone.register_forward_hook(lambda _m, _a, out: caught.extend(out.attentions))
    total, count = None, 0
    try:
        with torch.no_grad():
            for b0 in range(0, len(sids), batch_size):
                b = batcher.batch(sids[b0 : b0 + batch_size])
                caught.clear()
                model(b["input_ids"], b["attention_mask"], b["mem_keys"], b["mem_values"], b["mem_block"])
                J = b["mem_block"].shape[1]
                sees = b["attention_mask"].bool().clone()
                sees[:, : model.config.delta] = False  # no block fetched yet
                per = torch.stack([a[..., :J].sum(-1).mean(1) for a in caught])  # (layers, B, T)
                s = (per * sees).sum((1, 2))
                total = s if total is None else total + s
                count += int(sees.sum())
    finally:
        pre.remove()
        post.remove()
        model.backbone.set_attn_implementation(impl)
        model.attn_impl = impl
    return [float(x) for x in total / count]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("run", help="a trained SUREALM run directory (retrieval on)")
    ap.add_argument("--split", default="valid", choices=["valid", "test"])
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--attention-sentences", type=int, default=256, help="sentences for the attention share")
    ap.add_argument("--name", default="surealm_memory_ablation", help="results/NAME.json")
    args = ap.parse_args()

    import numpy as np
    import torch

    from ralm.surealm.train import evaluate, load_trained

    torch.manual_seed(args.seed)
    model, _tok, store, batcher = load_trained(args.run, device="cpu")
    if not model.config.retrieval:
        raise SystemExit(f"{args.run}: a no-retrieval run has no memory to ablate")
    sids = store.split_ids(args.split)
    real_memory = batcher.memory
    n_entries = len(store.entry_sid)

    def random_memory(sids_, toks):
        out = real_memory(sids_, toks)
        ent = out["mem_entries"].numpy()
        rng = np.random.default_rng(args.seed + int(sids_[0]))
        fake = np.where(ent >= 0, rng.integers(0, n_entries, size=ent.shape), -1)
        keys, values = store.read_entries(fake)
        out["mem_keys"], out["mem_values"] = torch.from_numpy(keys), torch.from_numpy(values)
        return out

    def no_memory(sids_, toks):
        out = real_memory(sids_, toks)
        out["mem_block"].zero_()
        return out

    mass = memory_attention_mass(model, batcher, sids[: args.attention_sentences])
    print("memory attention share per layer:", " ".join(f"{x:.3f}" for x in mass), flush=True)
    gains = {n: float(getattr(model, n).weight.detach().abs().mean()) for n in ("key_norm", "value_norm")}
    tok_norm = next(m for n, m in model.backbone.named_modules() if n.endswith("embeddings.LayerNorm"))
    gains["token_embedding_norm"] = float(tok_norm.weight.detach().abs().mean())
    print("mean |LayerNorm gain|:", gains, flush=True)

    rows = {}
    for name, fn in (("retrieved", real_memory), ("random", random_memory), ("no_memory", no_memory)):
        batcher.memory = fn
        c = evaluate(model, batcher, sids, autocast="off")
        rows[name] = c
        print(f"{name:10s} token ppl {c.token_ppl:8.2f}  word ppl {c.word_ppl:8.2f}", flush=True)
    write_result(
        args.name,
        script_command(__file__),
        {
            **{f"{args.split}_token_ppl_{k}": v.token_ppl for k, v in rows.items()},
            "random_vs_retrieved_token_ppl": rows["random"].token_ppl / rows["retrieved"].token_ppl,
            "no_memory_vs_retrieved_token_ppl": rows["no_memory"].token_ppl / rows["retrieved"].token_ppl,
            "tokens": rows["retrieved"].tokens,
            **{f"memory_attention_share_layer{i}": x for i, x in enumerate(mass)},
            **{f"mean_abs_gain_{k}": v for k, v in gains.items()},
        },
        {"random_vs_retrieved_token_ppl": "> 1 if the model uses its retrievals (diagnostic, no bar)"},
        settings=vars(args),
    )


if __name__ == "__main__":
    main()
