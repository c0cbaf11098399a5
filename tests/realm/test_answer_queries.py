"""`answer_queries`: masked queries that only the retriever reads, trained on the answer target with
in-batch negatives (`RealmModel.answer_query_loss`, `answer_queries.answer_query_objective`)."""

from __future__ import annotations

import json
import math

import numpy as np
import pytest
import torch
from tests.realm.test_levers import _batch, _model, _search, _SpanReader, _weights

pytestmark = pytest.mark.usefixtures("one_thread")


@pytest.fixture
def store(realm_store):
    from ralm.corpus.docstore import DocStore

    return DocStore(realm_store)


def test_in_batch_rows_by_hand():
    from ralm.realm.modeling.candidates import in_batch_rows

    out, pad = in_batch_rows(np.array([[1, 2], [2, 3]]))
    # query 0: its own 1, 2, then query 1's 2 (already there: left out) and 3
    assert out.tolist() == [[1, 2, 1, 3], [2, 3, 1, 2]]
    assert pad.tolist() == [[False, False, True, False], [False, False, False, True]]
    out, pad = in_batch_rows(np.array([[4, 5, 6]]))  # one query: its own row, nothing left out
    assert out.tolist() == [[4, 5, 6]] and not pad.any()


def test_salient_answer_target_by_hand():
    """answer_spans = salient: a randomly masked word does not count toward a chunk's share."""
    from ralm.errors import RalmError
    from ralm.realm.masking.causal import SPAN_KINDS
    from ralm.realm.modeling.answer_target import answer_target

    reader = _SpanReader([["Oslo", "the"], ["the"]], {0: "oslo and the fjord", 1: "the king", 2: "a city"})
    rand, ent = SPAN_KINDS.index("random"), 0
    batch = {"lm_span_kind": torch.tensor([[ent, rand], [rand, -1]])}
    rows = [[0, 1, -1], [1, 2, -1]]
    t_all, live_all = answer_target(reader, batch, rows)
    assert t_all.tolist() == [[5.0, 2.5, 0.0], [5.0, 0.0, 0.0]] and live_all.tolist() == [True, True]
    t, live = answer_target(reader, batch, rows, spans="salient")
    assert t.tolist() == [[5.0, 0.0, 0.0], [0.0, 0.0, 0.0]] and live.tolist() == [True, False]
    with pytest.raises(RalmError, match="answer_spans 'some': choose one of all, salient"):
        answer_target(reader, batch, rows, spans="some")


def _naive_answer_kl(model, batch, own: np.ndarray, negatives: str, salient: bool) -> list[float]:
    """The loss by a loop: each query's chunks (its own, then the others' not yet seen), each scored
    from a doc-tower pass of its own, the null's score the mean of the own scores (b = 0), the
    target 5 nats times the share of the query's (salient) spans the chunk holds (0 for the other
    queries' chunks with in_batch_zero)."""
    from ralm.realm.masking.causal import SPAN_KINDS
    from ralm.realm.modeling.answer_target import ANSWER_NATS, span_in_chunk

    in_batch = negatives != "own"
    with torch.no_grad():
        q = model.embed_queries(batch)
    spans = model.reader.span_texts(batch)
    kinds = batch["lm_span_kind"].tolist()
    out = []
    for b in range(len(own)):
        chunks: list[int] = []
        for o in [b, *(o for o in range(len(own)) if o != b)] if in_batch else [b]:
            chunks += [int(c) for c in own[o] if int(c) not in chunks]
        s = []
        for c in chunks:
            with torch.no_grad():
                v = model.doc_vectors(model.docs.tower_batch(np.array([c])), q.device)[0]
                s.append(float(model.encoder.scale_scores(q[b] @ v)))
        s.append(sum(s[: own.shape[1]]) / own.shape[1])  # the null document: b = 0
        texts = [
            x
            for j, x in enumerate(spans[b])
            if x and not (salient and kinds[b][j] == SPAN_KINDS.index("random"))
        ]
        t = [
            ANSWER_NATS * sum(span_in_chunk(model.reader, c, x) for x in texts) / max(len(texts), 1)
            for c in chunks
        ]
        kr, inf = own.shape[1], float("-inf")
        if negatives == "in_batch_zero":  # the others' chunks: target probability 0
            t = t[:kr] + [inf] * (len(t) - kr)
        elif negatives == "in_batch":  # the others' chunks: 0 unless they hold a span
            t = t[:kr] + [x if x > 0 else inf for x in t[kr:]]
        t.append(0.0)
        log_p = torch.log_softmax(torch.tensor(s, dtype=torch.float64), 0)
        log_t = torch.log_softmax(torch.tensor(t, dtype=torch.float64), 0)
        out.append(sum(float(lt.exp() * (lt - lp)) for lt, lp in zip(log_t, log_p, strict=True) if lt > inf))
    return out


@pytest.mark.parametrize(
    ("negatives", "spans"),
    [("in_batch", "all"), ("in_batch_zero", "all"), ("own", "all"), ("in_batch", "salient")],
)
def test_answer_query_loss_equals_a_naive_loop(store, tiny_dir, causal_dirs, negatives, spans):
    model, tok = _model(store, tiny_dir, causal_dirs, k=4, null_doc="logit", answer_spans=spans)
    masking = dict(salient_rate=0.3, random_span_rate=0.15) if spans == "salient" else dict(salient_rate=0.0)
    batch = _batch(store, tiny_dir, tok, n=6, **{"random_span_rate": 0.15, **masking})
    search = _search(model).search
    kl, live = model.answer_query_loss(batch, search, negatives)
    q = model.embed_queries(batch).detach().numpy()
    own = np.asarray(search(q, batch["source_ids"].numpy(), model.n_retrieved))
    want = _naive_answer_kl(model, batch, own, negatives, spans == "salient")
    assert kl.detach().tolist() == pytest.approx(want, abs=1e-5)
    assert int(live.sum()) > 0
    if spans == "all":
        assert int(live.sum()) < len(own)  # the toy corpus has both kinds of query
    else:  # the random spans were left out of the target: it differs from the all-spans one
        model.answer_spans = "all"
        other = model.answer_query_loss(batch, search, negatives)[0]
        assert kl.detach().tolist() != pytest.approx(other.tolist(), abs=1e-5)
    if negatives != "own":  # some query's row grew beyond its own 3 chunks
        assert len({int(c) for c in own.ravel()}) > own.shape[1]


def test_own_negatives_match_the_reader_batch_answer_loss(store, tiny_dir, causal_dirs):
    """Without in-batch negatives the answer queries' KL is the `retriever_loss = answer` term the
    reader's batch gets for the same queries, on the rows that rank something."""
    model, tok = _model(store, tiny_dir, causal_dirs, k=4, null_doc="logit", retriever_loss="answer")
    batch = _batch(store, tiny_dir, tok, n=6, salient_rate=0.0, random_span_rate=0.15)
    search = _search(model).search
    kl, live = model.answer_query_loss(batch, search, "own")
    aux = model(batch, search).aux
    assert (kl * live).detach().tolist() == pytest.approx(aux.detach().tolist(), abs=1e-6)


def test_answer_query_loss_trains_the_query_tower_not_the_reader(store, tiny_dir, causal_dirs):
    model, tok = _model(store, tiny_dir, causal_dirs, k=4, null_doc="logit", score_scale="learned")
    model.train()
    batch = _batch(store, tiny_dir, tok, n=6, salient_rate=0.0, random_span_rate=0.15)
    kl, live = model.answer_query_loss(batch, _search(model).search)
    kl[live].mean().backward()
    assert model.encoder.query_tower.model.embeddings.word_embeddings.weight.grad.abs().sum() > 0
    assert model.prior.log_scale.grad is not None and model.prior.null_logit.grad is not None
    assert all(p.grad is None for p in model.reader.parameters())


def test_answer_query_loss_refuses_unknown_negatives(store, tiny_dir, causal_dirs):
    from ralm.errors import RalmError

    model, tok = _model(store, tiny_dir, causal_dirs, k=4, null_doc="logit")
    batch = _batch(store, tiny_dir, tok, n=2)
    with pytest.raises(RalmError, match="answer_negatives 'all': choose one of own, in_batch, in_batch_zero"):
        model.answer_query_loss(batch, _search(model).search, "all")


def test_answer_query_ids_are_their_own_data_order(realm_store, tiny_cfg):
    from ralm.corpus.docstore import DocStore
    from ralm.realm.data import answer_query_ids, micro_batch_ids, split_ids

    cfg = tiny_cfg(answer_queries=3)
    train, _ = split_ids(cfg, DocStore(realm_store))
    a, b = answer_query_ids(train, cfg, 1), answer_query_ids(train, cfg, 2)
    assert a.shape == (3,) and len({*a.tolist(), *b.tolist()}) == 6  # no repeat within an epoch
    assert set(a.tolist()) <= set(train.tolist())
    assert a.tolist() != micro_batch_ids(train, cfg, 1, 0).tolist()
    assert answer_query_ids(train, cfg, 2).tolist() == b.tolist()  # seeded


ANSWER_RUN = dict(
    steps=2,
    checkpoint_every=1,
    refresh_every=0,
    k=4,
    retriever_loss="answer",
    retriever_train="query",
    null_doc="logit",
    answer_queries=4,
)


def test_answer_queries_run_logs_and_resumes_identically(causal_cfg, tmp_path):
    from ralm.realm.training.trainer import pretrain

    full = pretrain(causal_cfg(out=str(tmp_path / "full"), **ANSWER_RUN), progress=False)
    part = causal_cfg(out=str(tmp_path / "part"), **ANSWER_RUN)
    pretrain(part, progress=False, stop_after=1)
    pretrain(part, resume=True, progress=False)
    a, b = _weights(full, 2), _weights(tmp_path / "part", 2)
    for name in a:
        torch.testing.assert_close(a[name], b[name], rtol=0, atol=0, msg=name)
    # the answer target's spans are part of the run: a resume cannot switch them halfway
    from ralm.errors import RalmError

    salient = causal_cfg(out=str(tmp_path / "part"), **ANSWER_RUN, answer_spans="salient")
    with pytest.raises(RalmError, match="was started with answer_spans='all', not 'salient'"):
        pretrain(salient, resume=True, progress=False)
    rows = [json.loads(x) for x in (full / "metrics.jsonl").read_text().splitlines() if '"loss"' in x]
    assert len(rows) == 2
    assert all(r["answer_kl"] >= 0 and 0 <= r["answer_live"] <= 1 and math.isfinite(r["loss"]) for r in rows)
    assert any(r["answer_live"] > 0 for r in rows)
    # their loss moves the query tower: at weight 0 (the same queries read, the same dropout draws)
    # the run ends elsewhere
    unweighted = causal_cfg(out=str(tmp_path / "w0"), **ANSWER_RUN, answer_weight=0.0)
    c = _weights(pretrain(unweighted, progress=False), 2)
    qkeys = [n for n in a if n.startswith("encoder.query_tower")]
    assert qkeys and any(not torch.equal(a[n], c[n]) for n in qkeys)


@pytest.mark.parametrize(
    ("kw", "message"),
    [
        (dict(mode="mlm", answer_queries=2), "answer_queries: only a retrieval run"),
        (dict(retriever_train="none", answer_queries=2), "answer_queries: only a retrieval run"),
        (dict(answer_queries=-1), "answer_queries=-1: must be >= 0"),
        (dict(answer_negatives="all"), "answer_negatives 'all': choose own, in_batch, in_batch_zero"),
        (dict(answer_weight=-0.5), "answer_weight=-0.5: must be >= 0"),
    ],
)
def test_config_refuses_answer_queries_it_cannot_run(tiny_cfg, kw, message):
    from ralm.errors import RalmError

    with pytest.raises(RalmError, match=message):
        tiny_cfg(**kw)


def test_answer_queries_run_beside_every_lever(causal_cfg, tmp_path):
    """The Norwegian arm's recipe (realm_learns.py `all_answer`): the levers together (learned scale
    and null logit, per-span marginal, hybrid candidates, top-m reader gradient, packed query-first
    rows, query tower only) with the reader's marginal as the retriever loss, plus answer queries.
    Their loss reaches the query tower and nothing else of the retriever: the document tower stays
    as it was."""
    from ralm.realm.training.trainer import pretrain

    levers = dict(
        score_scale="learned",
        null_doc="logit",
        marginal="span",
        candidates="hybrid",
        candidate_depth=4,
        bm25_lang="en",
        reader_backprop_top=1,
        reader_layout="query_first",
    )
    run_kw = {**ANSWER_RUN, **levers, "retriever_loss": "marginal", "answer_spans": "salient"}
    run = pretrain(causal_cfg(out=str(tmp_path / "all"), **run_kw), progress=False)
    rows = [json.loads(x) for x in (run / "metrics.jsonl").read_text().splitlines() if '"loss"' in x]
    assert len(rows) == 2 and all(math.isfinite(r["loss"]) and math.isfinite(r["answer_kl"]) for r in rows)
    assert all(0 <= r["answer_live"] <= 1 for r in rows)
    first, second = _weights(run, 1), _weights(run, 2)
    dkeys = [n for n in first if n.startswith("encoder.doc_tower")]
    qkeys = [n for n in first if n.startswith("encoder.query_tower")]
    assert dkeys and all(torch.equal(first[n], second[n]) for n in dkeys)
    assert any(not torch.equal(first[n], second[n]) for n in qkeys)
