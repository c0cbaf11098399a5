"""Dual-encoder towers on decoder-only LMs (tiny random Gemma-3 and Llama from `causal_dirs`):
last-token pooling, positions from the mask, bidirectional attention, query instructions, saving."""

from __future__ import annotations

import json

import numpy as np
import pytest
import torch

from ralm.errors import RalmError
from ralm.retrieval.encoders import DualEncoder, EncoderConfig

pytestmark = pytest.mark.usefixtures("one_thread")

TEXTS = [
    "Oslo is the capital of Norway.",
    "Bergen",
    "Copenhagen is the capital of Denmark. It lies on Zealand.",
]


def _one_by_one(tower, texts: list[str]) -> torch.Tensor:
    """The reference: each text alone (no padding), hidden state of its last token / mean of all."""
    out = []
    for t in texts:
        ids = torch.tensor([tower.tokenizer(t)["input_ids"]])
        with torch.no_grad():
            h = tower.model(input_ids=ids, attention_mask=torch.ones_like(ids)).last_hidden_state[0]
        out.append(h[-1] if tower.pooling == "last" else h.mean(0))
    return torch.stack(out)


@pytest.mark.parametrize("name", ["llama", "gemma3"])
@pytest.mark.parametrize("pooling", ["last", "mean"])
def test_decoder_tower_pools_like_one_text_at_a_time_on_either_padding_side(name, pooling, causal_dirs):
    enc = DualEncoder.from_pretrained(causal_dirs[name], EncoderConfig(pooling=pooling))
    q = enc.query_tower
    assert q.decoder and not q.model.get_input_embeddings().weight.requires_grad
    assert sum(p.requires_grad for p in q.parameters()) > 0
    want = _one_by_one(q, TEXTS)
    got = torch.from_numpy(enc.encode_queries(TEXTS, progress=False))
    torch.testing.assert_close(got, want, atol=1e-5, rtol=1e-5)
    q.tokenizer.padding_side = "left"
    b = q.tokenizer(TEXTS, padding=True, return_tensors="pt")
    assert b["attention_mask"][1, 0] == 0  # "Bergen" is padded on the left
    with torch.no_grad():
        left = q(b["input_ids"], b["attention_mask"])
    torch.testing.assert_close(left, want, atol=1e-5, rtol=1e-5)


def test_embeddings_train_when_asked(causal_dirs):
    enc = DualEncoder.from_pretrained(
        causal_dirs["llama"], EncoderConfig(pooling="last", train_embeddings=True)
    )
    assert enc.query_tower.model.get_input_embeddings().weight.requires_grad


def test_bidirectional_where_supported_and_refused_where_not(causal_dirs):
    causal = DualEncoder.from_pretrained(causal_dirs["gemma3"], EncoderConfig(pooling="mean"))
    both = DualEncoder.from_pretrained(
        causal_dirs["gemma3"], EncoderConfig(pooling="mean", bidirectional=True)
    )
    tower = both.query_tower
    assert tower.model.config.use_bidirectional_attention is True
    assert all(not layer.self_attn.is_causal for layer in tower.model.layers)
    ids = torch.tensor([tower.tokenizer("Oslo is the capital")["input_ids"]])
    m = torch.ones_like(ids)
    with torch.no_grad():
        h_c = causal.query_tower.model(input_ids=ids, attention_mask=m).last_hidden_state
        h_b = tower.model(input_ids=ids, attention_mask=m).last_hidden_state
        ids2 = ids.clone()
        ids2[0, -1] = 5
        h_b2 = tower.model(input_ids=ids2, attention_mask=m).last_hidden_state
        h_c2 = causal.query_tower.model(input_ids=ids2, attention_mask=m).last_hidden_state
    torch.testing.assert_close(h_c[0, 0], h_c2[0, 0])  # causal: the first token never sees the last
    assert not torch.allclose(h_b[0, 0], h_b2[0, 0], atol=1e-4)  # bidirectional: it does
    assert not torch.allclose(h_b, h_c, atol=1e-4)
    with pytest.raises(RalmError, match="llama has no bidirectional-attention switch"):
        DualEncoder.from_pretrained(causal_dirs["llama"], EncoderConfig(bidirectional=True))


@pytest.mark.parametrize("bidirectional", [False, True])
def test_saved_decoder_encoder_reloads_and_loads_in_sentence_transformers(
    bidirectional, causal_dirs, tmp_path
):
    from sentence_transformers import SentenceTransformer

    cfg = EncoderConfig(
        pooling="last", bidirectional=bidirectional, query_instruction="query: ", normalize=True
    )
    enc = DualEncoder.from_pretrained(causal_dirs["gemma3"], cfg)
    plain = DualEncoder.from_pretrained(
        causal_dirs["gemma3"], EncoderConfig(pooling="last", bidirectional=bidirectional, normalize=True)
    )
    q = enc.encode_queries(TEXTS, progress=False)
    # the instruction is the only difference: queries = plain queries of "query: " + text; docs unchanged
    np.testing.assert_allclose(
        q, plain.encode_queries(["query: " + t for t in TEXTS], progress=False), atol=1e-6
    )
    np.testing.assert_allclose(
        enc.encode_docs(None, TEXTS, progress=False),
        plain.encode_docs(None, TEXTS, progress=False),
        atol=1e-6,
    )
    assert enc.fingerprint() != plain.fingerprint()
    enc.save(tmp_path / "enc")
    again = DualEncoder.from_pretrained(tmp_path / "enc")
    assert again.config == enc.config and again.fingerprint() == enc.fingerprint()
    np.testing.assert_allclose(again.encode_queries(TEXTS, progress=False), q, atol=1e-6)
    assert again.query_tower.model.config.use_bidirectional_attention is bidirectional
    st_cfg = json.loads((tmp_path / "enc" / "query" / "config_sentence_transformers.json").read_text())
    assert st_cfg["prompts"] == {"query": "query: "}
    st = SentenceTransformer(str(tmp_path / "enc" / "query"), device="cpu")
    np.testing.assert_allclose(st.encode(TEXTS, prompt_name="query"), q, atol=1e-5)
    with pytest.raises(RalmError, match="bidirectional"):
        DualEncoder.from_pretrained(
            tmp_path / "enc",
            EncoderConfig(
                pooling="last", bidirectional=not bidirectional, query_instruction="query: ", normalize=True
            ),
        )


def test_index_build_and_search_with_a_decoder_encoder(causal_dirs, tmp_path):
    from ralm.cli import main
    from ralm.corpus.build import BuildConfig, build_docstore

    rows = [{"title": c, "text": t} for c, t in zip(["Oslo", "Bergen", "Copenhagen"], TEXTS, strict=True)]
    (tmp_path / "d.jsonl").write_text("\n".join(json.dumps(r) for r in rows) + "\n", encoding="utf-8")
    build_docstore(
        [tmp_path / "d.jsonl"],
        tmp_path / "store",
        BuildConfig(chunk_size=24, tokenizer=str(causal_dirs["gemma3"])),
        progress=False,
        log=lambda m: None,
    )
    args = [
        "index",
        "build",
        str(tmp_path / "store"),
        "--out",
        str(tmp_path / "idx"),
        "--encoder",
        str(causal_dirs["gemma3"]),
        "--pooling",
        "last",
        "--bidirectional",
        "--query-instruction",
        "query: ",
    ]
    assert main(args) == 0
    meta = json.loads((tmp_path / "idx" / "encoder" / "ralm_encoder.json").read_text())
    assert meta["config"]["pooling"] == "last" and meta["config"]["bidirectional"] is True
    assert meta["config"]["query_instruction"] == "query: "
    enc = DualEncoder.from_pretrained(tmp_path / "idx" / "encoder")
    from ralm import Retriever

    r = Retriever.load(tmp_path / "idx")
    hits = r.search("Oslo is the capital of Norway.", k=3)
    q = enc.encode_queries(["Oslo is the capital of Norway."], progress=False)[0]
    d = enc.encode_docs([h.title for h in hits], [h.text for h in hits], progress=False)
    np.testing.assert_allclose(
        [h.score for h in hits], d @ q, rtol=2e-3, atol=2e-3
    )  # batched vs one-by-one float32
    assert [h.score for h in hits] == sorted((h.score for h in hits), reverse=True)
