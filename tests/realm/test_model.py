"""RealmModel and SyncRefresher on a tiny random BERT: marginal vs a naive loop, null documents,
source exclusion, gradients, index versions."""

from __future__ import annotations

import numpy as np
import pytest
import torch

pytestmark = pytest.mark.usefixtures("one_thread")


@pytest.fixture
def parts(realm_store, tiny_dir):
    from ralm.corpus.docstore import DocStore
    from ralm.realm.masking.mlm import MaskingCollator, eligible_ids
    from ralm.realm.training.build import load_reader
    from ralm.retrieval.encoders import DualEncoder, EncoderConfig

    store = DocStore(realm_store)

    def make(null_doc="empty", k=3, scale=True):
        from ralm.realm.modeling.model import ChunkDocs, RealmModel

        torch.manual_seed(0)
        reader, _ = load_reader(str(tiny_dir))
        enc = DualEncoder.from_pretrained(tiny_dir, EncoderConfig(max_length=32, scale_by_sqrt_dim=scale))
        model = RealmModel(reader, enc, ChunkDocs(store, enc), k=k, null_doc=null_doc, reader_max_length=96)
        return model.eval()

    col = MaskingCollator(store, reader_tok(tiny_dir), seed=1)
    ids = eligible_ids(store, col.cfg)[:4]
    return store, make, col(ids)


def reader_tok(d):
    from ralm.models.tokenizers import load_tokenizer

    return load_tokenizer(d)


def refresher_for(model, **kw):
    from ralm.realm.refresh.sync import SyncRefresher

    r = SyncRefresher(model.docs, autocast="off", **kw)
    r.refresh(model.encoder, 0)
    return r


def test_marginal_equals_naive_loop_over_documents(parts):
    """log p(y|x) of the batched model == a loop: each (x, z) alone through towers and reader."""
    from ralm.realm.readers.mlm import build_reader_inputs

    store, make, batch = parts
    model = make("empty", k=4)
    ref = refresher_for(model)
    with torch.no_grad():
        out = model(batch, ref.search)
        for b in range(batch["labels"].shape[0]):
            lq = int(batch["attention_mask"][b].sum())
            x = {k: batch[k][b : b + 1, :lq] for k in ("input_ids", "attention_mask", "labels")}
            visible = x["attention_mask"] * (x["input_ids"] != model.mask_id)  # query_masks="hide"
            q = model.encoder.query_tower(x["input_ids"], visible)[0]
            terms = []
            docs = [*out.doc_ids[b].tolist(), None]
            raw = []
            for cid in docs:
                if cid is None:
                    e = model.docs.empty_batch()
                    doc = ([], [])
                else:
                    e = model.docs.tower_batch(np.array([cid]))
                    doc = model.docs.reader_doc(cid)
                d = model.encoder.doc_tower(**e)[0]
                raw.append(float(q @ d) / np.sqrt(q.shape[0]))
                rin = build_reader_inputs(
                    x["input_ids"], x["labels"], [[doc]], model.sep_id, model.pad_id, 96
                )
                logits = model.reader.mlm(
                    input_ids=rin["input_ids"],
                    attention_mask=rin["attention_mask"],
                    token_type_ids=rin["token_type_ids"],
                ).logits[0]
                lp = 0.0
                for pos in range(rin["labels"].shape[1]):
                    y = int(rin["labels"][0, pos])
                    if y != -100:
                        lp += float(torch.log_softmax(logits[pos].double(), -1)[y])
                terms.append(lp)
            raw = np.array(raw)
            log_pz = raw - np.log(np.exp(raw - raw.max()).sum()) - raw.max()
            naive = np.log(np.sum(np.exp(log_pz + np.array(terms))))
            assert float(out.log_p_y[b]) == pytest.approx(naive, abs=1e-4)
            np.testing.assert_allclose(out.log_p_z[b].numpy(), log_pz, atol=1e-5)
            np.testing.assert_allclose(out.log_p_y_given_z[b].numpy(), terms, atol=1e-4)


def test_source_chunk_is_never_retrieved_and_rest_is_exact(parts):
    """Each chunk's own doc vector as the query: it would be its own top hit; it must never come back."""
    from ralm.realm.refresh.sync import embed_chunks

    store, make, _ = parts
    model = make("none", k=4)
    ref = refresher_for(model)
    vecs = embed_chunks(model.encoder, model.docs)
    n = len(store)
    got = ref.search(vecs, np.arange(n), 4)
    scores = vecs @ vecs.T
    for i in range(n):
        assert i not in got[i]
        s = scores[i].copy()
        s[i] = -np.inf
        want = np.lexsort((np.arange(n), -s))[:4]  # best first, ties by lower id
        np.testing.assert_array_equal(got[i], want)


@pytest.mark.parametrize("null_doc", ["empty", "zeros", "none"])
def test_null_document_settings(parts, null_doc):
    store, make, batch = parts
    model = make(null_doc, k=3)
    ref = refresher_for(model)
    model.train()
    out = model(batch, ref.search)
    B = batch["labels"].shape[0]
    assert out.log_p_z.shape == (B, 3) and out.log_p_y_given_z.shape == (B, 3)
    assert out.doc_ids.shape == (B, 3 if null_doc == "none" else 2)
    torch.testing.assert_close(out.log_p_z.exp().sum(1), torch.ones(B))
    model.eval()  # no dropout for the exact comparisons
    with torch.no_grad():
        q = model.embed_queries(batch)
        check_null_score(model, q, null_doc, B)
    out.loss().backward()
    if null_doc == "zeros":
        assert model.null_vector.grad is not None and model.null_vector.grad.abs().sum() > 0
    # the likelihood trains the reader and, through p(z|x), both towers
    for part in (model.reader, model.encoder.query_tower, model.encoder.doc_tower):
        g = sum(float(p.grad.abs().sum()) for p in part.parameters() if p.grad is not None)
        assert g > 0


def check_null_score(model, q, null_doc, B):
    if null_doc == "zeros":  # a zero vector scores 0 for every query
        torch.testing.assert_close(model.null_score(q), torch.zeros(B))
    elif null_doc == "empty":
        e = model.encoder.doc_tower(**model.docs.empty_batch())[0]
        torch.testing.assert_close(model.null_score(q), (q @ e) / np.sqrt(e.shape[0]))
    else:
        assert model.null_score(q) is None


def test_refresh_changes_index_version_and_vectors(parts):
    store, make, batch = parts
    model = make("empty", k=3)
    ref = refresher_for(model, every=3)
    assert ref.version == 0
    v0 = ref.index.index.reconstruct_n(0, len(store)).copy()
    fp0 = ref.index.encoder_fingerprint
    opt = torch.optim.SGD(model.encoder.doc_tower.parameters(), lr=1.0)
    model.train()
    model(batch, ref.search).loss().backward()
    opt.step()
    assert [ref.maybe_refresh(s, model.encoder) is not None for s in range(1, 7)] == [
        False,
        False,
        True,
        False,
        False,
        True,
    ]
    assert ref.version == 2 and ref.built_at_step == 6
    assert ref.index.manifest["index_version"] == 2
    assert ref.index.encoder_fingerprint != fp0
    assert not np.allclose(ref.index.index.reconstruct_n(0, len(store)), v0)


def test_k_larger_than_corpus_is_one_clear_error(parts):
    from ralm.errors import RalmError

    store, make, batch = parts
    model = make("empty", k=3)
    ref = refresher_for(model)
    with pytest.raises(RalmError, match="lower k"):
        ref.search(np.zeros((1, model.encoder.dim), np.float32), np.array([0]), len(store))


def test_query_masks_hide_and_keep(parts):
    """hide: the query vector ignores what the [MASK] positions hold; keep: they change it."""
    store, make, batch = parts
    model = make("empty", k=3)
    other = dict(batch)
    ids = batch["input_ids"].clone()
    ids[batch["labels"] != -100] = 1000  # another token at every masked position
    other["input_ids"] = ids
    with torch.no_grad():
        keep_a = model.encoder.query_tower(batch["input_ids"], batch["attention_mask"])
        hide_a = model.embed_queries(batch)
        model.query_masks = "keep"
        torch.testing.assert_close(model.embed_queries(batch), keep_a)
        assert not torch.allclose(model.embed_queries(other), keep_a)
        model.query_masks = "hide"
        # positions whose attention is off change nothing: with 1000 there it is the same vector
        vis = other["attention_mask"] * (batch["labels"] == -100)
        torch.testing.assert_close(model.encoder.query_tower(ids, vis), hide_a, rtol=1e-5, atol=1e-5)
    assert not torch.allclose(hide_a, keep_a)


def test_answers_found_counts_masked_tokens_present_in_titles_or_bodies():
    from ralm.realm.modeling.model import answers_found

    labels = torch.tensor([[-100, 7, 9], [5, -100, 5]])
    docs = [[([7], [1, 2]), ([], [3])], [([], []), ([], [5, 6])]]
    assert answers_found(labels, docs).tolist() == [1, 2]
