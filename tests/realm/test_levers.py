"""Issue 45's levers on REALM: the per-span marginal against a naive loop, the learned score scale and
null logit, the top-m reader backpropagation, query-side-only training, perplexity distillation,
the span cap of the masking, and the causal reader's length groups."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch

pytestmark = pytest.mark.usefixtures("one_thread")


# ----------------------------------------------------------------------------- pure math
def test_span_marginal_equals_a_naive_loop():
    from ralm.realm.modeling.marginal import span_marginal_log_likelihood

    g = torch.Generator().manual_seed(0)
    lpz = torch.log_softmax(torch.randn(3, 4, generator=g), 1)
    lp = -torch.rand(3, 4, 5, generator=g) * 6
    mask = torch.tensor([[1, 1, 1, 0, 0], [1, 1, 1, 1, 1], [1, 0, 0, 0, 0]])
    got = span_marginal_log_likelihood(lpz, lp, mask)
    for b in range(3):
        want = 0.0
        for s in range(5):
            if not mask[b, s]:
                continue
            want += math.log(sum(math.exp(lpz[b, z] + lp[b, z, s]) for z in range(4)))
        assert float(got[b]) == pytest.approx(want, abs=1e-5)
    # the docstring's case: the joint marginal .13, the per-span one .25
    half = torch.tensor([[0.5, 0.5]]).log()
    per = torch.tensor([[[0.8, 0.1], [0.2, 0.9]]]).log()
    assert float(span_marginal_log_likelihood(half, per, torch.ones(1, 2)).exp()) == pytest.approx(0.25)


def test_distillation_loss_hand_computed():
    from ralm.realm.modeling.marginal import distillation_loss

    # p(z|x) = (.5, .5), log p(y|z,x) = (0, -inf): target (1, 0), KL = ln 2
    lpz = torch.tensor([[0.5, 0.5]]).log().requires_grad_(True)
    kl = distillation_loss(lpz, torch.tensor([[0.0, -math.inf]]))
    assert float(kl.detach()) == pytest.approx(math.log(2))
    # tau = 2, p(y|z) = (.9, .1): target ∝ (.9^.5, .1^.5) = (.75, .25); p(z|x) = (.6, .4)
    lpz2 = torch.tensor([[0.6, 0.4]]).log()
    kl2 = distillation_loss(lpz2, torch.tensor([[0.9, 0.1]]).log(), tau=2.0)
    want = 0.75 * math.log(0.75 / 0.6) + 0.25 * math.log(0.25 / 0.4)
    assert float(kl2) == pytest.approx(want, abs=1e-6)
    # the gradient reaches p(z|x), never the target
    lpyz = torch.tensor([[0.0, -1.0]], requires_grad=True)
    distillation_loss(lpz, lpyz).sum().backward()
    assert lpz.grad is not None and lpyz.grad is None


def test_prior_learns_its_scale_and_null_logit():
    from ralm.realm.modeling.prior import RetrievalPrior

    scores = torch.tensor([[2.0, 1.0, 0.0]])
    fixed = RetrievalPrior("fixed")
    assert list(fixed.parameters()) == [] and fixed.scale == 1.0
    torch.testing.assert_close(fixed.log_probs(scores), torch.log_softmax(scores, 1))
    learned = RetrievalPrior("learned", null_logit=True, null_logit_init=-1.0)
    lpz = learned.log_probs(learned.scaled(scores))
    # null = mean(2, 1, 0) - 1 = 0, appended last
    torch.testing.assert_close(lpz, torch.log_softmax(torch.tensor([[2.0, 1.0, 0.0, 0.0]]), 1))
    lpz[0, 0].backward()
    assert learned.log_scale.grad is not None and float(learned.log_scale.grad) != 0
    assert learned.null_logit.grad is not None and float(learned.null_logit.grad) != 0


def test_null_logit_gives_no_gradient_to_raise_every_score():
    """The null document scores the mean of the retrieved scores plus b, so adding c to every score
    changes nothing, and no loss may push every score up at once: the gradient over a query's scores
    sums to 0. (With the mean detached, a loss that wants less null mass pushed every score, and
    the query vector's norm, up without end: retrieval drifted to hub chunks, issue 45.)"""
    from ralm.realm.modeling.prior import RetrievalPrior

    prior = RetrievalPrior("learned", null_logit=True, null_logit_init=0.5)
    scores = torch.tensor([[2.0, 1.0, 0.0], [0.5, -1.0, 3.0]], requires_grad=True)
    lpz = prior.log_probs(prior.scaled(scores))
    torch.testing.assert_close(prior.log_probs(prior.scaled(scores + 7.0)), lpz)
    (-lpz[:, :3].logsumexp(1)).sum().backward()  # less null mass
    torch.testing.assert_close(scores.grad.sum(1), torch.zeros(2), atol=1e-6, rtol=0)
    assert float(prior.null_logit.grad) > 0  # b is what moves the null's mass


# ----------------------------------------------------------------------------- models
@pytest.fixture
def store(realm_store):
    from ralm.corpus.docstore import DocStore

    return DocStore(realm_store)


def _model(store, tiny_dir, causal_dirs, lm_name="llama", **kw):
    from ralm.models.causal import load_causal_lm
    from ralm.realm.modeling.model import ChunkDocs, RealmModel
    from ralm.realm.readers.causal import CausalReader
    from ralm.retrieval.encoders import DualEncoder, EncoderConfig

    lm, tok, _ = load_causal_lm(str(causal_dirs[lm_name]))
    torch.manual_seed(0)
    enc = DualEncoder.from_pretrained(tiny_dir, EncoderConfig(max_length=32, scale_by_sqrt_dim=True))
    reader = CausalReader(
        lm,
        tok,
        max_length=400,
        store=store,
        bucket_slack=kw.pop("bucket_slack", 1.1),
        layout=kw.pop("layout", "doc_first"),
    )
    return RealmModel(reader, enc, ChunkDocs(store, enc), **kw).eval(), tok


def _batch(store, tiny_dir, tok, n=3, **masking):
    from ralm.models.tokenizers import load_tokenizer
    from ralm.realm.masking.causal import CausalMaskingCollator
    from ralm.realm.masking.mlm import MaskingConfig, eligible_ids

    cfg = MaskingConfig(**masking)
    col = CausalMaskingCollator(store, load_tokenizer(tiny_dir), tok, cfg, seed=1)
    return col(eligible_ids(store, cfg)[:n])


def _search(model):
    from ralm.realm.refresh.sync import SyncRefresher

    ref = SyncRefresher(model.docs, autocast="off")
    ref.refresh(model.encoder, 0)
    return ref


def test_per_span_scores_and_marginal_through_the_reader(store, tiny_dir, causal_dirs):
    """The reader's per-span scores sum to its joint ones; the model's per-span marginal equals a
    naive loop over spans and documents of those scores and p(z|x)."""
    model, tok = _model(store, tiny_dir, causal_dirs, k=4, marginal="span", null_doc="logit")
    batch = _batch(store, tiny_dir, tok, salient_rate=0.5, random_span_rate=0.1)
    assert int((batch["lm_span_kind"] >= 0).sum(1).max()) >= 2  # several spans a query
    ref = _search(model)
    with torch.no_grad():
        out = model(batch, ref.search)
        rows = [[*r, -1] for r in out.doc_ids.tolist()]
        per = model.reader.log_p_y_given_docs(batch, rows, per_span=True)
        joint = model.reader.log_p_y_given_docs(batch, rows)
    torch.testing.assert_close(per.sum(2), joint, rtol=0, atol=1e-4)
    torch.testing.assert_close(out.log_p_y_given_z, joint, rtol=0, atol=1e-4)
    nspans = (batch["lm_span_kind"] >= 0).sum(1)
    for b in range(per.shape[0]):
        want = sum(
            math.log(sum(math.exp(out.log_p_z[b, z] + per[b, z, s]) for z in range(4)))
            for s in range(int(nspans[b]))
        )
        assert float(out.log_p_y[b]) == pytest.approx(want, abs=1e-4)


def test_mlm_reader_per_token_marginal(tiny_cfg):
    """A masked-LM reader with marginal = "span" marginalises per masked token (REALM's code)."""
    from ralm.corpus.docstore import DocStore
    from ralm.realm.masking.mlm import eligible_ids
    from ralm.realm.training.build import build_model, make_collator

    cfg = tiny_cfg(marginal="span")
    store = DocStore(cfg.docstore)
    model, tok = build_model(cfg, store)
    model.eval()
    col = make_collator(cfg, store, tok, model, return_tensors="pt")
    batch = col(eligible_ids(store, cfg.masking)[:2])
    ref = _search(model)
    with torch.no_grad():
        out = model(batch, ref.search)
        docs = [[model.docs.reader_doc(i) for i in row] + [([], [])] for row in out.doc_ids]
        per = model._mlm_scores(batch, docs)  # (B, K, L) per masked token
    torch.testing.assert_close(per.sum(2), out.log_p_y_given_z, rtol=0, atol=1e-4)
    labels = batch["labels"]
    for b in range(labels.shape[0]):
        cols = (labels[b] != -100).nonzero()[:, 0].tolist()
        assert len(cols) >= 2
        want = sum(math.log(sum(math.exp(out.log_p_z[b, z] + per[b, z, j]) for z in range(3))) for j in cols)
        assert float(out.log_p_y[b]) == pytest.approx(want, abs=1e-4)


@pytest.mark.parametrize("marginal", ["joint", "span"])
def test_top_m_backprop_gives_the_same_loss_and_retriever_gradient(store, tiny_dir, causal_dirs, marginal):
    batch = None
    grads, losses = [], []
    for m in (0, 1):
        model, tok = _model(
            store,
            tiny_dir,
            causal_dirs,
            k=4,
            reader_backprop_top=m,
            marginal=marginal,
            score_scale="learned",
            null_doc="logit",
        )
        if batch is None:
            batch = _batch(store, tiny_dir, tok, salient_rate=0.4)
            ref = _search(model)
        out = model(batch, ref.search)
        (-out.log_p_y.sum()).backward()
        losses.append(out.log_p_y.detach())
        grads.append(
            {
                "query": model.encoder.query_tower.model.embeddings.word_embeddings.weight.grad.clone(),
                "doc": model.encoder.doc_tower.model.encoder.layer[0].output.dense.weight.grad.clone(),
                "scale": model.prior.log_scale.grad.clone(),
                "null": model.prior.null_logit.grad.clone(),
                "reader": model.reader.lm.model.layers[0].mlp.up_proj.weight.grad.clone(),
            }
        )
    torch.testing.assert_close(losses[0], losses[1], rtol=0, atol=1e-5)
    for part in ("query", "doc", "scale", "null"):
        torch.testing.assert_close(grads[0][part], grads[1][part], rtol=1e-4, atol=1e-7, msg=part)
    # the reader's gradient differs: it comes from 2 of the 4 rows
    assert not torch.allclose(grads[0]["reader"], grads[1]["reader"])


def _weights(run, step: int) -> dict[str, torch.Tensor]:
    """The model weights a run saved at checkpoint `step`."""
    from safetensors.torch import load_file

    return load_file(str(run / "checkpoints" / f"step-{step:07d}" / "model.safetensors"))


def _count_reader_passes(model) -> list[int]:
    """Wrap `model`'s causal scoring: the returned list gets the documents a query of each pass."""
    calls: list[int] = []
    score = model._causal_scores

    def counted(batch, docs):
        calls.append(len(docs[0]))
        return score(batch, docs)

    model._causal_scores = counted
    return calls


@pytest.mark.parametrize("retriever_loss", ["marginal", "distill"])
def test_frozen_reader_gives_the_same_loss_and_retriever_gradient(
    store, tiny_dir, causal_dirs, retriever_loss
):
    """reader_train = freeze: the same loss and the same gradient for the towers, the score scale and the
    null logit as a trained reader's, and no reader gradient at all (one pass over the rows)."""
    batch = None
    grads, losses = [], []
    for reader_train in ("train", "freeze"):
        model, tok = _model(
            store,
            tiny_dir,
            causal_dirs,
            k=4,
            reader_backprop_top=1,
            score_scale="learned",
            null_doc="logit",
            reader_train=reader_train,
            retriever_loss=retriever_loss,
        )
        model.train()
        if batch is None:
            batch = _batch(store, tiny_dir, tok, salient_rate=0.4)
            ref = _search(model)
        calls = _count_reader_passes(model)
        out = model(batch, ref.search)
        objective = -out.log_p_y.sum() + (out.aux.sum() if out.aux is not None else 0)
        objective.backward()
        losses.append(float(objective.detach()))
        grads.append(
            {
                "query": model.encoder.query_tower.model.embeddings.word_embeddings.weight.grad.clone(),
                "doc": model.encoder.doc_tower.model.encoder.layer[0].output.dense.weight.grad.clone(),
                "scale": model.prior.log_scale.grad.clone(),
                "null": model.prior.null_logit.grad.clone(),
            }
        )
        if reader_train == "freeze":
            assert calls == [4]  # every row once; the top-m rows are not scored again
            assert all(p.grad is None and not p.requires_grad for p in model.reader.parameters())
            assert not model.reader.training
        else:
            assert calls == [4, 2]  # all rows without gradient, then the top 1 and the null with it
    assert losses[0] == pytest.approx(losses[1], abs=1e-5)
    for part in ("query", "doc", "scale", "null"):
        torch.testing.assert_close(grads[0][part], grads[1][part], rtol=1e-4, atol=1e-7, msg=part)


def _kept_while_the_query_tower_moved(end, kept, kept_from, first):
    """The weights `end` under the prefix `kept` equal `kept_from`'s, and some query-tower weight
    differs from `first`'s (both kinds present)."""
    kept_keys = [k for k in end if k.startswith(kept)]
    query = [k for k in end if k.startswith("encoder.query_tower.")]
    assert kept_keys and query
    for k in kept_keys:
        assert torch.equal(end[k], kept_from[k]), k
    assert any(not torch.equal(end[k], first[k]) for k in query)


def test_frozen_reader_run_keeps_the_reader_and_trains_the_towers(causal_cfg, tmp_path):
    from ralm.errors import RalmError
    from ralm.realm.config import PretrainConfig
    from ralm.realm.training.trainer import pretrain

    cfg = dict(reader_train="freeze", retriever_train="query", steps=2, checkpoint_every=1, warmup_steps=0)
    run = pretrain(causal_cfg(out=str(tmp_path / "f"), lr_retriever=1e-3, **cfg), progress=False)
    first, end = _weights(run, 1), _weights(run, 2)
    start = pretrain(causal_cfg(out=str(tmp_path / "s"), lr_retriever=0.0, **cfg), progress=False)
    init = _weights(start, 2)
    _kept_while_the_query_tower_moved(end, "reader.", init, first)
    with pytest.raises(RalmError, match="reader_train = freeze"):
        PretrainConfig(docstore="x", out="y", mode="mlm", reader_train="freeze")


def test_query_side_only_leaves_doc_tower_and_index_bit_identical(causal_cfg, tmp_path):
    from ralm.realm.training.trainer import pretrain

    run = pretrain(
        causal_cfg(
            out=str(tmp_path / "q"), retriever_train="query", steps=3, refresh_every=1, checkpoint_every=3
        ),
        progress=False,
    )
    start = pretrain(
        causal_cfg(
            out=str(tmp_path / "s"),
            retriever_train="query",
            steps=1,
            refresh_every=1,
            lr_retriever=0.0,
            lr_reader=0.0,
            checkpoint_every=1,
        ),
        progress=False,
    )
    end, first = _weights(run, 3), _weights(start, 1)
    _kept_while_the_query_tower_moved(end, "encoder.doc_tower.", first, first)
    # one index version, built at step 0 and never rebuilt
    versions = sorted(p.name for p in (run / "index").iterdir())
    assert versions == ["v00000"]
    import faiss

    a = faiss.read_index(str(run / "index" / "v00000" / "index.faiss"))
    b = faiss.read_index(str(start / "index" / "v00000" / "index.faiss"))
    assert np.array_equal(
        faiss.rev_swig_ptr(a.get_xb(), a.ntotal * a.d), faiss.rev_swig_ptr(b.get_xb(), b.ntotal * b.d)
    )


def test_fixed_scale_stays_fixed_and_learned_ones_move(causal_cfg, tmp_path):
    import json

    from ralm.realm.training.trainer import pretrain

    fixed = pretrain(causal_cfg(out=str(tmp_path / "f"), steps=2, checkpoint_every=2), progress=False)
    learned = pretrain(
        causal_cfg(
            out=str(tmp_path / "l"),
            steps=2,
            checkpoint_every=2,
            score_scale="learned",
            null_doc="logit",
            lr_scale=0.1,
            warmup_steps=0,
        ),
        progress=False,
    )
    rows_f = [json.loads(x) for x in (fixed / "metrics.jsonl").read_text().splitlines() if '"loss"' in x]
    rows_l = [json.loads(x) for x in (learned / "metrics.jsonl").read_text().splitlines() if '"loss"' in x]
    assert [r["score_scale"] for r in rows_f] == [1.0, 1.0] and "null_logit" not in rows_f[0]
    assert rows_l[-1]["score_scale"] != 1.0 and rows_l[-1]["null_logit"] != 0.0


def test_distill_run_trains_and_logs_the_kl(causal_cfg, tmp_path):
    import json

    from ralm.realm.training.trainer import pretrain

    run = pretrain(
        causal_cfg(
            out=str(tmp_path / "d"), steps=2, checkpoint_every=2, retriever_loss="distill", distill_tau=0.5
        ),
        progress=False,
    )
    rows = [json.loads(x) for x in (run / "metrics.jsonl").read_text().splitlines() if '"loss"' in x]
    assert all(r["distill_kl"] >= 0 and math.isfinite(r["loss"]) for r in rows)


# ----------------------------------------------------------------------------- masking and rows
def test_masking_caps_spans_per_chunk(store, tiny_dir):
    from ralm.models.tokenizers import load_tokenizer
    from ralm.realm.masking.mlm import MaskingCollator, MaskingConfig, eligible_ids

    tok = load_tokenizer(tiny_dir)
    for cap in (1, 2):
        cfg = MaskingConfig(salient_rate=0.9, random_span_rate=0.3, max_spans=cap)
        col = MaskingCollator(store, tok, cfg)
        for cid in eligible_ids(store, cfg):
            ex = col.mask(int(cid), np.random.default_rng(int(cid)))
            assert ex is not None and 1 <= len(ex.masked_spans) <= cap
            kinds = [k for _, _, k in ex.masked_spans]
            assert "salient" in kinds and (cap > 1 or kinds == ["salient"])  # salient spans are taken first
            assert int((ex.labels != -100).sum()) == sum(e - s for s, e, _ in ex.masked_spans)
    with pytest.raises(ValueError, match="max_spans"):
        MaskingConfig(max_spans=0)


@pytest.mark.parametrize("layout", ["doc_first", "query_first"])
def test_length_groups_give_the_same_scores(store, tiny_dir, causal_dirs, layout):
    """Rows (packed sequences in the query_first layout) run in length groups score every span token
    as one padded batch does, per span too, and with the same gradient."""
    from ralm.realm.readers.causal import length_buckets

    assert [g.tolist() for g in length_buckets(np.array([100, 40, 98, 41]), 1.25)] == [[0, 2], [3, 1]]
    assert [g.tolist() for g in length_buckets(np.array([100, 40]), math.inf)] == [[0, 1]]
    one, tok = _model(
        store, tiny_dir, causal_dirs, lm_name="gemma3", k=4, bucket_slack=math.inf, layout=layout
    )
    many, _ = _model(store, tiny_dir, causal_dirs, lm_name="gemma3", k=4, bucket_slack=1.0, layout=layout)
    batch = _batch(store, tiny_dir, tok, salient_rate=0.4)
    rows = [[5, 9, 2, -1], [0, 2, 7, -1], [11, 3, 1, -1]]
    rr = many.reader.build_rows(batch, rows)
    assert rr.input_ids.shape[0] == (12 if layout == "doc_first" else 3)
    assert len(length_buckets(rr.attention_mask.sum(1).numpy(), 1.0)) > 1
    with torch.no_grad():
        a = one.reader.log_p_y_given_docs(batch, rows, per_span=True)
    b = many.reader.log_p_y_given_docs(batch, rows, per_span=True)
    torch.testing.assert_close(a, b.detach(), rtol=0, atol=1e-4)
    # the two readers load the same weights: their gradients through both ways of running the rows agree
    name = next(n for n, p in many.reader.lm.named_parameters() if p.dim() == 2 and "layers" in n)
    (g_many,) = torch.autograd.grad(b.sum(), many.reader.lm.get_parameter(name))
    a = one.reader.log_p_y_given_docs(batch, rows, per_span=True)
    (g_one,) = torch.autograd.grad(a.sum(), one.reader.lm.get_parameter(name))
    assert float(g_one.abs().sum()) > 0
    torch.testing.assert_close(g_many, g_one, rtol=1e-4, atol=1e-5)


def test_content_token_perplexity_equals_a_hand_count(store, tiny_dir, causal_dirs):
    """Closed-book content-token log-probabilities against full logits of unpadded rows, the content
    tokens counted by hand: those whose characters fall inside a span, never its line break."""
    from ralm.realm.inference.evaluate import causal_span_scores
    from ralm.realm.masking.causal import SpanQuery
    from ralm.realm.modeling.model import RealmModel
    from ralm.realm.readers.causal import CausalReader

    _, tok = _model(store, tiny_dir, causal_dirs, k=3)
    lm = _model(store, tiny_dir, causal_dirs, k=3)[0].reader.lm
    closed = RealmModel(CausalReader(lm, tok, max_length=400), k=3).eval()
    batch = _batch(store, tiny_dir, tok, salient_rate=0.5)
    with torch.no_grad():
        got = causal_span_scores(closed, batch)
    for b in range(batch["lm_query_ids"].shape[0]):
        masked = tok.decode(batch["lm_query_ids"][b, : int(batch["lm_query_len"][b])].tolist())[:-1]
        lines = tok.decode(batch["lm_target_ids"][b, : int(batch["lm_target_len"][b])].tolist()).split("\n")[
            :-1
        ]
        q = SpanQuery(masked, [line.split(" ", 1)[1] for line in lines], ["x"] * len(lines))
        target, where = q.target()
        x = tok(q.masked_text + "\n", add_special_tokens=False)["input_ids"]
        enc = tok(target, add_special_tokens=False, return_offsets_mapping=True)
        ids = x + enc["input_ids"]
        with torch.no_grad():
            logp = torch.log_softmax(lm(input_ids=torch.tensor([ids])).logits[0].double(), -1)
        total, count, count_all = 0.0, 0, 0
        for j, (a, e) in enumerate(enc["offset_mapping"]):
            inside = [any(s <= c < t for s, t in where) for c in range(a, e)]
            if any(inside):
                total += float(logp[len(x) + j - 1, enc["input_ids"][j]])
                count += 1
            if any(any(s <= c <= t for s, t in where) for c in range(a, e)):
                count_all += 1
        assert int(got["n_content"][b]) == count and int(got["n_all"][b]) == count_all
        assert count < count_all  # the line breaks are left out
        assert float(got["content"][b]) == pytest.approx(total, abs=1e-4)


@pytest.mark.parametrize("lm_name", ["llama", "gemma3"])
def test_query_first_packed_rows_equal_separate_rows(store, tiny_dir, causal_dirs, lm_name):
    """The query_first layout packs the K documents after one copy of the query; each segment's span
    log-probabilities equal those of its own unpacked row [bos] x z y (full logits, no mask)."""
    from ralm.realm.readers.causal import CausalReader

    model, tok = _model(store, tiny_dir, causal_dirs, lm_name=lm_name, k=4)
    lm = model.reader.lm
    packed = CausalReader(lm, tok, max_length=400, store=store, layout="query_first")
    batch = _batch(store, tiny_dir, tok, salient_rate=0.4)
    docs = [[5, 9, 2, -1], [0, 2, 7, -1], [11, 3, 1, -1]]
    with torch.no_grad():
        got = packed.log_p_y_given_docs(batch, docs)
        per_span = packed.log_p_y_given_docs(batch, docs, per_span=True)
    rr = packed.build_rows(batch, docs)
    assert rr.input_ids.shape[0] == 3  # one packed sequence a query
    for b in range(3):
        q = batch["lm_query_ids"][b, : int(batch["lm_query_len"][b])].tolist()
        t = batch["lm_target_ids"][b, : int(batch["lm_target_len"][b])].tolist()
        scored = batch["lm_target_labels"][b, : len(t)].nonzero().flatten().tolist()
        for k, cid in enumerate(docs[b]):
            d = packed.doc_ids(cid) if cid >= 0 else []
            ids = packed.prefix + q + d + t
            with torch.no_grad():
                logp = torch.log_softmax(lm(input_ids=torch.tensor([ids])).logits[0].double(), -1)
            start = len(packed.prefix) + len(q) + len(d)
            want = sum(float(logp[start + j - 1, t[j]]) for j in scored)
            assert float(got[b, k]) == pytest.approx(want, abs=1e-4)
    torch.testing.assert_close(per_span.sum(2), got, rtol=0, atol=1e-4)


def test_query_first_training_runs_and_resumes_identically(causal_cfg, tmp_path):
    from ralm.realm.training.trainer import pretrain

    kw = dict(
        steps=3, checkpoint_every=1, refresh_every=0, reader_layout="query_first", reader_backprop_top=1, k=4
    )
    full = pretrain(causal_cfg(out=str(tmp_path / "full"), **kw), progress=False)
    part = causal_cfg(out=str(tmp_path / "part"), **kw)
    pretrain(part, progress=False, stop_after=2)
    pretrain(part, resume=True, progress=False)
    a, b = _weights(full, 3), _weights(tmp_path / "part", 3)
    assert a.keys() == b.keys()
    for name in a:
        torch.testing.assert_close(a[name], b[name], rtol=0, atol=0, msg=name)


# ----------------------------------------------------------------------------- answer supervision
class _SpanReader:
    """The two reader methods `answer_target` reads, over fixed texts (a hand case)."""

    def __init__(self, spans, texts):
        self.spans, self.texts = spans, texts

    def span_texts(self, batch):
        return self.spans

    def doc_text(self, cid):
        return self.texts[cid]


def test_answer_target_by_hand():
    from ralm.realm.modeling.answer_target import answer_target

    reader = _SpanReader(
        [["Oslo"], ["1040", "Harald"], [""]],
        {0: "oslo is a city", 1: "Bergen", 2: "King HARALD", 3: "in 1040 Harald founded Oslo"},
    )
    target, live = answer_target(reader, {}, [[0, 1, -1], [2, 3, -1], [0, 3, -1]])
    assert target.tolist() == [[5.0, 0.0, 0.0], [2.5, 5.0, 0.0], [0.0, 0.0, 0.0]]
    assert live.tolist() == [True, True, False]  # the empty span ranks nothing


def test_answer_loss_is_the_kl_on_live_rows_and_the_marginal_leaves_the_retriever(
    store, tiny_dir, causal_dirs
):
    """retriever_loss = answer: the aux term is the distillation KL from the answer target on the rows
    that rank something, 0 elsewhere; the reader's marginal sends the towers no gradient."""
    from ralm.realm.modeling.answer_target import answer_target
    from ralm.realm.modeling.marginal import distillation_loss

    model, tok = _model(store, tiny_dir, causal_dirs, k=4, null_doc="logit", retriever_loss="answer")
    model.train()
    batch = _batch(store, tiny_dir, tok, n=8, salient_rate=0.0, random_span_rate=0.15)
    out = model(batch, _search(model).search)
    rows = [[*r, -1] for r in out.doc_ids.tolist()]
    target, live = answer_target(model.reader, batch, rows)
    assert 0 < int(live.sum()) < len(rows)  # the toy corpus has both kinds of query
    want = distillation_loss(out.log_p_z.detach(), target) * live
    assert out.aux.detach().tolist() == pytest.approx(want.tolist(), abs=1e-6)
    assert all(v == 0 for v, ok in zip(out.aux.tolist(), live.tolist(), strict=True) if not ok)
    (-out.log_p_y.sum()).backward()
    q = model.encoder.query_tower.model.embeddings.word_embeddings.weight.grad
    assert q is None or not q.any()
    out = model(batch, _search(model).search)
    out.aux.sum().backward()
    assert model.encoder.query_tower.model.embeddings.word_embeddings.weight.grad.abs().sum() > 0


def test_answer_loss_run_trains_and_logs_the_kl(causal_cfg, tmp_path):
    import json

    from ralm.realm.training.trainer import pretrain

    run = pretrain(
        causal_cfg(out=str(tmp_path / "a"), steps=2, checkpoint_every=2, retriever_loss="answer"),
        progress=False,
    )
    rows = [json.loads(x) for x in (run / "metrics.jsonl").read_text().splitlines() if '"loss"' in x]
    assert len(rows) == 2 and all(r["distill_kl"] >= 0 and math.isfinite(r["loss"]) for r in rows)


def test_answer_loss_needs_a_causal_reader(tiny_cfg, tmp_path):
    from ralm.errors import RalmError
    from ralm.realm.training.trainer import pretrain

    with pytest.raises(RalmError, match="retriever_loss = answer needs a causal reader"):
        pretrain(tiny_cfg(out=str(tmp_path / "m"), steps=1, retriever_loss="answer"), progress=False)
