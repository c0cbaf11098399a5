"""Late interaction: MaxSim vs a naive loop, masking, exhaustive search, re-ranking, real MiniLM."""

from __future__ import annotations

import json

import numpy as np
import pytest
import torch

from ralm.corpus.build import BuildConfig, build_docstore
from ralm.errors import RalmError
from ralm.retrieval.base import Searcher
from ralm.retrieval.late_interaction import (
    LateInteractionConfig,
    LateInteractionSearcher,
    TokenEncoder,
    maxsim,
    maxsim_batched,
    pad_ragged,
)
from testkit import tiny_bert_dir

DOCS = [
    ("Oslo", "Oslo is the capital of Norway."),
    ("Bananas", "Bananas are yellow fruit that grow in warm countries."),
    ("Football", "Football is played by two teams of eleven players."),
    ("Piano", "The piano is a keyboard instrument with strings and hammers."),
    ("Volcano", "A volcano erupts with lava, ash and gas."),
    ("Rivers", "Rivers flow downhill into lakes or the sea."),
]


pytestmark = pytest.mark.usefixtures("one_thread")  # see tests/conftest.py


def naive_maxsim(q, qm, d, dm) -> float:
    total = 0.0
    for i in range(q.shape[0]):
        if not qm[i]:
            continue
        best = None
        for j in range(d.shape[0]):
            if dm[j]:
                s = float(sum(float(a) * float(b) for a, b in zip(q[i], d[j], strict=True)))
                best = s if best is None else max(best, s)
        total += 0.0 if best is None else best
    return total


def test_maxsim_matches_naive_loops_with_masks():
    g = torch.Generator().manual_seed(0)
    q = torch.randn(3, 5, 8, generator=g)
    d = torch.randn(4, 7, 8, generator=g)
    qm = torch.rand(3, 5, generator=g) > 0.3
    dm = torch.rand(4, 7, generator=g) > 0.4
    dm[2] = False  # a document with no usable token scores 0
    qm[1, 0] = True
    got = maxsim_batched(q, qm, d, dm)
    assert got.shape == (3, 4) and got.dtype == torch.float32
    for a in range(3):
        for b in range(4):
            assert float(got[a, b]) == pytest.approx(naive_maxsim(q[a], qm[a], d[b], dm[b]), abs=1e-4)
            assert float(maxsim(q[a], d[b], qm[a], dm[b])) == pytest.approx(float(got[a, b]), abs=1e-5)
    assert float(got[0, 2]) == 0.0
    # the docstring's example
    assert float(maxsim(torch.tensor([[1.0, 0.0]]), torch.tensor([[0.5, 0.0], [2.0, 0.0]]))) == 2.0


def test_pad_ragged():
    flat = torch.arange(12, dtype=torch.float32).view(6, 2)
    offsets = np.array([0, 2, 2, 6])
    out, mask = pad_ragged(flat, offsets, np.array([2, 1, 0]))
    assert mask.tolist() == [[True] * 4, [False] * 4, [True, True, False, False]]
    assert out[0].tolist() == flat[2:6].tolist() and out[2, :2].tolist() == flat[0:2].tolist()
    assert float(out[1].abs().sum()) == 0 and float(out[2, 2:].abs().sum()) == 0


@pytest.fixture(scope="module")
def store(tmp_path_factory):
    d = tmp_path_factory.mktemp("li")
    src = d / "docs.jsonl"
    with open(src, "w", encoding="utf-8") as f:
        for title, text in DOCS:
            f.write(json.dumps({"title": title, "text": text}) + "\n")
    return build_docstore([src], d / "store", BuildConfig(chunk_size=64), progress=False, log=lambda m: None)


@pytest.fixture(scope="module")
def tiny_dir(tmp_path_factory, minilm_dir):
    """A random 2-layer BERT, hidden 64 (2 heads, 256 positions), on the bundled MiniLM's vocab.txt/tokenizer."""
    vocab_size = len((minilm_dir / "vocab.txt").read_text(encoding="utf-8").splitlines())
    return tiny_bert_dir(
        tmp_path_factory.mktemp("tiny-bert"),
        minilm_dir,
        vocab_size=vocab_size,
        num_attention_heads=2,
        max_position_embeddings=256,
    )


@pytest.fixture(scope="module")
def tiny(tiny_dir):
    return TokenEncoder.from_pretrained(str(tiny_dir), LateInteractionConfig(autocast="off"))


def test_encoder_shapes_norms_and_masks(tiny):
    q, qm = tiny.encode_queries(["capital of norway", "a much longer query about volcanoes and lava"])
    assert q.shape == (2, 32, 64) and qm.shape == (2, 32)
    assert torch.allclose(q[qm].norm(dim=-1), torch.ones(int(qm.sum())), atol=1e-5)
    assert int(qm[0].sum()) == len(tiny.tokenizer("capital of norway")["input_ids"])  # incl. [CLS]/[SEP]
    flat, offsets = tiny.encode_docs(["Oslo, Norway!", "rivers"])
    # "oslo , norway !" -> punctuation and [CLS]/[SEP] dropped: oslo, norway (+ word pieces)
    words = tiny.tokenizer("Oslo, Norway!", add_special_tokens=False)["input_ids"]
    assert offsets[1] == len(words) - 2 and flat.dtype == torch.float16
    assert offsets[2] - offsets[1] == len(tiny.tokenizer("rivers", add_special_tokens=False)["input_ids"])
    p1, p2 = (
        TokenEncoder(tiny.model, tiny.tokenizer, LateInteractionConfig(proj_dim=16, autocast="off"))
        for _ in range(2)
    )
    assert p1.dim == 16 and torch.equal(p1.proj.weight, p2.proj.weight)  # seeded projection
    pq, _ = p1.encode_queries(["oslo"])
    assert pq.shape == (1, 32, 16) and float(pq[0, 0].norm()) == pytest.approx(1.0, abs=1e-5)
    aug = TokenEncoder(tiny.model, tiny.tokenizer, LateInteractionConfig(query_augment=True, autocast="off"))
    _, am = aug.encode_queries(["oslo"])
    assert bool(am.all())  # [MASK] padding takes part


def test_exhaustive_search_contract(tiny, store):
    li = LateInteractionSearcher(tiny, store).index()
    assert li.count == len(DOCS) and li.memory_bytes() > 0
    backend: Searcher = li
    qs = ["capital of Norway", "lava and ash"]
    full = li.scores(qs)
    res = backend.search_text(qs, 3)
    for i in range(2):  # best first, ties by lower id, scores are the full matrix's
        order = sorted(range(len(DOCS)), key=lambda j: (-full[i, j], j))[:3]
        assert res.ids[i].tolist() == order
        assert res.scores[i].tolist() == pytest.approx(full[i, order].tolist())
    ex = li.search_text(qs, len(DOCS) - 1, exclude_ids=[int(res.ids[0, 0]), None])
    assert res.ids[0, 0] not in ex.ids[0] and len(set(ex.ids[0].tolist())) == len(DOCS) - 1
    with pytest.raises(RalmError, match="chunks left"):
        li.search_text(qs, len(DOCS), exclude_ids=[0, None])
    with pytest.raises(RalmError, match="more than"):
        li.search_text(qs, len(DOCS) + 1)
    with pytest.raises(RalmError, match="empty"):
        li.search_text([""], 1)
    with pytest.raises(RalmError, match="index"):
        LateInteractionSearcher(tiny, store).search_text(["x"], 1)


def test_rerank_keeps_candidates_and_orders_by_naive_maxsim(tiny, store):
    qs = ["capital of Norway", "keyboard instrument"]
    cand = np.array([[5, 0, 3, 1], [2, 4, -1, 3]])
    for li in (LateInteractionSearcher(tiny, store), LateInteractionSearcher(tiny, store).index()):
        res = li.rerank(qs, cand)
        q, qm = tiny.encode_queries(qs)
        flat, off = tiny.encode_docs([f"{t} | {x}" for t, x in DOCS])
        for i in range(2):
            ids = [c for c in cand[i].tolist() if c >= 0]
            naive = {
                c: naive_maxsim(
                    q[i],
                    qm[i],
                    flat[off[c] : off[c + 1]].float(),
                    torch.ones(off[c + 1] - off[c], dtype=torch.bool),
                )
                for c in ids
            }
            expected = sorted(ids, key=lambda c: (-naive[c], c))
            assert sorted(res.ids[i].tolist()) == sorted(cand[i].tolist())  # same candidate set
            assert res.ids[i].tolist()[: len(ids)] == expected
            assert res.scores[i, : len(ids)].tolist() == pytest.approx([naive[c] for c in expected], abs=1e-3)
        assert res.ids[1, -1] == -1 and res.scores[1, -1] == -np.inf
    with pytest.raises(RalmError, match="chunk ids"):
        li.rerank(qs, np.array([[0, 99], [1, 2]]))


def test_real_minilm_obvious_document_wins(tmp_path):
    docs = [
        ("Oslo", "Oslo is the capital and largest city of Norway."),
        ("Pasta", "Spaghetti is boiled in salted water and served with tomato sauce."),
        ("Jupiter", "Jupiter is the largest planet in the solar system."),
        ("Tennis", "Tennis players hit a ball over a net with rackets."),
    ]
    src = tmp_path / "docs.jsonl"
    src.write_text("\n".join(json.dumps({"title": t, "text": x}) for t, x in docs) + "\n", encoding="utf-8")
    st = build_docstore(
        [src], tmp_path / "store", BuildConfig(chunk_size=64), progress=False, log=lambda m: None
    )
    li = LateInteractionSearcher.from_pretrained(None, st).index()
    res = li.search_text(
        ["What is the capital of Norway?", "how to cook pasta", "biggest planet", "racket sports"], 1
    )
    assert res.ids[:, 0].tolist() == [0, 1, 2, 3]
