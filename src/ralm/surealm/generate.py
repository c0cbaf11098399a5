"""SUREALM generation through the backbone's own `generate` (greedy, top-p sampling, beam search).

SUREALM §3.3: decoding starts from the start symbol; every `delta` tokens the current prefix is
embedded with the data store's sentence transformer, its top-K entries are fetched, and their
prefix/suffix embeddings join the memory that every later position may attend to.

How: while `generate` runs, a forward pre-hook on the backbone reads each row's tokens (the
backbone runs without its KV cache, so every call sees the whole sequence, beams included),
retrieves for every prefix length j*delta it has not seen before (`PrefixRetriever`, cached per
prefix), and hands the backbone the memory cache and the 4D mask of `ralm.surealm.model`; a
forward hook drops the memory cache from the outputs so `generate` never mistakes it for its own.
No decoding loop is written here. Re-running the whole prefix at every step costs O(n^2) per
sentence, which is what short dialogue turns need; long documents would want the cache.

Left out: batches of prompts of different lengths (one prompt per call; beams and
`num_return_sequences` are fine).
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field

import numpy as np
import torch

from ralm.errors import RalmError
from ralm.surealm.data import lm_special_ids
from ralm.surealm.datastore import Datastore
from ralm.surealm.model import CACHE_ARGUMENTS, SurealmLM

STRATEGIES = ("greedy", "top-p", "beam")

__all__ = ["Generation", "PrefixRetriever", "Retrieval", "generate"]


@dataclass
class Retrieval:
    """One retrieval made during generation: the prefix (LM token ids) and its top-K entries."""

    prefix: tuple[int, ...]
    entries: np.ndarray


@dataclass
class Generation:
    """What `generate` returns: continuations (text and LM token ids, prompt excluded) and the
    retriever, whose `log` lists every retrieval made."""

    texts: list[str]
    token_ids: list[list[int]]
    retriever: PrefixRetriever


@dataclass
class PrefixRetriever:
    """Embeds a prefix with the store's sentence transformer and returns its top-K entry ids."""

    store: Datastore
    tokenizer: object
    k: int
    embedder: object = None
    cache: dict = field(default_factory=dict)
    log: list[Retrieval] = field(default_factory=list)

    def __post_init__(self) -> None:
        from ralm.surealm.embedder import SpanEmbedder

        if self.k > len(self.store):
            raise RalmError(
                f"K={self.k} is more than the {len(self.store)} entries of {self.store.root}; lower K"
            )
        if self.embedder is None:
            self.embedder = SpanEmbedder(self.store.manifest["encoder"])
        if self.embedder.fingerprint != self.store.manifest["encoder_fingerprint"]:
            raise RalmError(
                f"{self.store.root}: built with another sentence encoder than {self.embedder.path}; "
                "use the encoder the data store names or rebuild it"
            )

    def __call__(self, prefix: tuple[int, ...]) -> np.ndarray:
        """(K,) entry ids for the prefix w_1..w_L (LM token ids, no start token)."""
        if prefix not in self.cache:
            text = self.tokenizer.decode(list(prefix), skip_special_tokens=True)
            ids = self.embedder.tokenizer(text, add_special_tokens=False)["input_ids"][
                : self.embedder.max_length - 2
            ]
            q = self.embedder.embed([(ids, list(range(1, len(ids) + 1)))])
            self.cache[prefix] = self.store.search(q, self.k)[0]
            self.log.append(Retrieval(prefix, self.cache[prefix]))
        return self.cache[prefix]


def _memory_for_rows(model: SurealmLM, retriever: PrefixRetriever, rows: torch.Tensor):
    """Memory tensors for full rows ``[BOS] w_1 .. w_n`` (B, T): blocks at j*delta <= n."""
    store, K, delta = retriever.store, model.config.k, model.config.delta
    B, T = rows.shape
    nb = (T - 1) // delta
    ent = np.zeros((B, nb * K), dtype=np.int64)
    for b in range(B):
        words = tuple(int(x) for x in rows[b, 1:].tolist())
        for j in range(1, nb + 1):
            ent[b, (j - 1) * K : j * K] = retriever(words[: j * delta])
    blk = np.repeat(np.arange(1, nb + 1), K)[None].repeat(B, axis=0)
    keys, values = store.read_entries(ent)
    return torch.from_numpy(keys), torch.from_numpy(values), torch.from_numpy(blk)


@contextmanager
def retrieval_hooks(model: SurealmLM, retriever: PrefixRetriever) -> Iterator[None]:
    """While active, every backbone call gets the memory of its rows' prefixes (see module docstring)."""
    backbone = model.backbone

    def pre(_module, args, kwargs):
        ids = kwargs.get("input_ids", args[0] if args else None)
        if ids is None:
            raise RalmError("SUREALM generation needs input_ids")
        am = kwargs.get("attention_mask")
        if am is not None and am.dim() == 2 and not bool(am.all()):
            raise RalmError("SUREALM generation takes one prompt at a time (no padded batches)")
        dev = ids.device
        kw = {
            k: v
            for k, v in kwargs.items()
            if k not in ("input_ids", "attention_mask", "position_ids", "cache_position", *CACHE_ARGUMENTS)
        }
        keys, values, blk = _memory_for_rows(model, retriever, ids.cpu())
        kw.update(model.backbone_inputs(ids, None, keys.to(dev), values.to(dev), blk.to(dev)))
        kw["input_ids"] = ids
        return (), kw

    def post(_module, _args, _kwargs, output):
        model._cross_ctx = None  # the cross pathway's memory belongs to this call only
        for name in CACHE_ARGUMENTS:  # the memory must not come back as the next step's cache
            if getattr(output, name, None) is not None:
                setattr(output, name, None)
        return output

    h1 = backbone.register_forward_pre_hook(pre, with_kwargs=True)
    h2 = backbone.register_forward_hook(post, with_kwargs=True)
    try:
        yield
    finally:
        h1.remove()
        h2.remove()


@torch.inference_mode()
def generate(
    model: SurealmLM,
    tokenizer,
    store: Datastore,
    prompt: str,
    *,
    strategy: str = "greedy",
    max_new_tokens: int = 20,
    min_new_tokens: int = 0,
    top_p: float = 0.9,
    temperature: float = 1.0,
    num_beams: int = 4,
    num_return_sequences: int = 1,
    seed: int = 0,
    retriever: PrefixRetriever | None = None,
) -> Generation:
    """Continue `prompt` with the backbone's `generate` while retrieving every delta tokens."""
    if strategy not in STRATEGIES:
        raise RalmError(f"strategy {strategy!r}: choose one of {', '.join(STRATEGIES)}")
    bos, eos, pad = lm_special_ids(tokenizer)
    words = tokenizer(prompt, add_special_tokens=False)["input_ids"]
    max_tokens = int(store.manifest.get("max_tokens", 64))
    if len(words) >= max_tokens:
        raise RalmError(
            f"the prompt has {len(words)} tokens; the model was trained on sentences of at most {max_tokens}"
        )
    retriever = retriever or PrefixRetriever(store, tokenizer, model.config.k)
    dev = next(model.parameters()).device
    input_ids = torch.tensor([[bos, *words]], device=dev)
    gen: dict = {
        "max_new_tokens": max_new_tokens,
        "min_new_tokens": min_new_tokens,
        "eos_token_id": eos,
        "pad_token_id": pad,
        "use_cache": False,
        "num_return_sequences": num_return_sequences,
    }
    if strategy == "greedy":
        gen.update(do_sample=False, num_beams=1)
    elif strategy == "top-p":
        torch.manual_seed(seed)
        gen.update(do_sample=True, top_p=top_p, temperature=temperature, top_k=0)
    else:
        if num_return_sequences > num_beams:
            raise RalmError(f"--num-return {num_return_sequences} is more than --beams {num_beams}")
        gen.update(do_sample=False, num_beams=num_beams, early_stopping=True)
    model.eval()
    with retrieval_hooks(model, retriever):
        out = model.backbone.generate(input_ids=input_ids, attention_mask=torch.ones_like(input_ids), **gen)
    new = [[int(x) for x in row[input_ids.shape[1] :].tolist()] for row in out]
    texts = [tokenizer.decode(ids, skip_special_tokens=True) for ids in new]
    return Generation(texts, new, retriever)


def describe_retrievals(retriever: PrefixRetriever, tokenizer, max_entries: int = 3) -> list[str]:
    """SUREALM Table 1 lines: query prefix, then each entry's (retrieved word, retrieved suffix)."""
    store = retriever.store
    lines = []
    for r in retriever.log:
        q = tokenizer.decode(list(r.prefix), skip_special_tokens=True)
        lines.append(f"query {q!r}:")
        for e in r.entries[:max_entries]:
            word_id, suffix_ids = store.entry_tokens(int(e))
            word = tokenizer.decode([word_id], skip_special_tokens=True).strip()
            suffix = tokenizer.decode(suffix_ids.tolist(), skip_special_tokens=True)
            lines.append(f"    word {word!r:<16} suffix {suffix!r}")
    return lines
