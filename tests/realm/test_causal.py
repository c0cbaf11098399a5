"""The causal reader on tiny random Llama and Gemma-3 LMs: the masked text and its targets, span
log-probabilities against a naive full-logits sum, the null document, the marginal's gradient to the
query tower, resume, fill, export, LoRA and the one-line errors."""

from __future__ import annotations

import json

import numpy as np
import pytest
import torch
from tests.realm.conftest import tiny_config

from testkit import run_ralm

pytestmark = pytest.mark.usefixtures("one_thread")

LMS = ("llama", "gemma3")


def _lm(d):
    from ralm.models.causal import load_causal_lm

    lm, tok, _ = load_causal_lm(str(d))
    return lm.eval(), tok


@pytest.fixture
def store(realm_store):
    from ralm.corpus.docstore import DocStore

    return DocStore(realm_store)


def _collator(store, tiny_dir, lm_tok, **kw):
    from ralm.models.tokenizers import load_tokenizer
    from ralm.realm.masking.causal import CausalMaskingCollator

    return CausalMaskingCollator(store, load_tokenizer(tiny_dir), lm_tok, seed=1, **kw)


def _batch(store, col, n=3):
    from ralm.realm.masking.mlm import eligible_ids

    return col(eligible_ids(store, col.cfg)[:n])


# ----------------------------------------------------------------------------- the text view
def test_span_query_and_merging():
    from ralm.realm.masking.causal import SpanQuery, merge_char_spans, span_query

    text = "Ibsen ble født i Skien i 1828 og døde i Kristiania."
    q = span_query(text, [(17, 22, "link"), (25, 29, "date"), (40, 50, "random")])
    assert q == SpanQuery(
        "Ibsen ble født i [1] i [2] og døde i [3].",
        ["Skien", "1828", "Kristiania"],
        ["link", "date", "random"],
    )
    assert q.target() == ("[1] Skien\n[2] 1828\n[3] Kristiania\n", [(4, 9), (14, 18), (23, 33)])
    # touching spans (or only whitespace apart) become one; the kind is the first non-random one
    assert merge_char_spans([(0, 5, "random"), (6, 11, "date")], "Skien 1828 x") == [(0, 10, "date")]
    assert merge_char_spans([(0, 5, "name"), (7, 9, "number")], "Skien, 18") == [
        (0, 5, "name"),
        (7, 9, "number"),
    ]
    assert span_query("a b", [(1, 2, "random")]).spans == []  # whitespace alone is no span
    assert span_query("Oslo", [(0, 4, "name")], blank="<{i}>").masked_text == "<1>"


@pytest.mark.parametrize("lm", LMS)
def test_lm_rows_score_span_tokens_only(causal_dirs, lm):
    from ralm.realm.masking.causal import SpanQuery, lm_rows

    _, tok = _lm(causal_dirs[lm])
    q = SpanQuery("Oslo is the capital of [1]. It was founded in [2].", ["Norway", "1040"], ["link", "date"])
    qids, tids, flags, span, content = lm_rows(q, tok)
    assert qids == tok(q.masked_text + "\n", add_special_tokens=False)["input_ids"]
    assert tids == tok("[1] Norway\n[2] 1040\n", add_special_tokens=False)["input_ids"]
    scored = [t for t, f in zip(tids, flags, strict=True) if f]
    assert tok.decode([t for t, s in zip(tids, span, strict=True) if s == 0]).strip() == "Norway"
    assert tok.decode([t for t, s in zip(tids, span, strict=True) if s == 1]).strip() == "1040"
    assert len(scored) == sum(s >= 0 for s in span) and all(s in (-1, 0, 1) for s in span)
    assert "[" not in tok.decode(scored) and tok.decode(scored).count("\n") == 2  # each span's end is scored
    # content tokens: the span's own characters, without the closing line breaks
    kept = [t for t, c in zip(tids, content, strict=True) if c]
    assert all(f for f, c in zip(flags, content, strict=True) if c)
    assert tok.decode(kept).split() == ["Norway", "1040"] and "\n" not in tok.decode(kept)


def test_collator_masks_like_the_mlm_collator(store, tiny_dir, causal_dirs):
    """Same chunks, same generators: the tower's view is MaskingCollator's, and every masked span's
    text is in the target while the masked text keeps everything else."""
    from ralm.models.tokenizers import load_tokenizer
    from ralm.realm.masking.mlm import MaskingCollator, eligible_ids

    _, lm_tok = _lm(causal_dirs["llama"])
    ids = eligible_ids(store, MaskingCollator(store, load_tokenizer(tiny_dir)).cfg)[:6]
    plain = MaskingCollator(store, load_tokenizer(tiny_dir), seed=3)(ids)
    col = _collator(store, tiny_dir, lm_tok)
    col.rng = np.random.default_rng(3)
    causal = col(ids)
    for key in ("input_ids", "attention_mask", "labels", "source_ids"):
        torch.testing.assert_close(causal[key], plain[key])
    for b, cid in enumerate(causal["source_ids"].tolist()):
        text = store.get(cid)["text"]
        n = int(causal["lm_query_len"][b])
        masked = lm_tok.decode(causal["lm_query_ids"][b, :n].tolist())
        spans = [
            s
            for s in col.lm_tokenizer.decode(
                causal["lm_target_ids"][b, : int(causal["lm_target_len"][b])].tolist()
            ).split("\n")[:-1]  # the target ends with a line break
        ]
        assert masked.endswith("\n") and "[1]" in masked
        rebuilt = masked[:-1]
        for line in spans:
            tag, span = line.split(" ", 1)
            rebuilt = rebuilt.replace(tag, span, 1)
        assert rebuilt == text  # the sentinels put back give the chunk
        kinds = causal["lm_span_kind"][b]
        assert int((kinds >= 0).sum()) == len(spans)


# ----------------------------------------------------------------------------- scores
def _naive(lm, tok, prefix, doc_text, q, blank="[{i}]"):
    """log p(spans) from full logits of one unpadded row, span tokens (and each span's closing line
    break) found by character overlap."""
    target, where = q.target(blank)
    d = tok(doc_text + "\n\n", add_special_tokens=False)["input_ids"] if doc_text is not None else []
    x = tok(q.masked_text + "\n", add_special_tokens=False)["input_ids"]
    enc = tok(target, add_special_tokens=False, return_offsets_mapping=True)
    ids = prefix + d + x + enc["input_ids"]
    with torch.no_grad():
        logp = torch.log_softmax(lm(input_ids=torch.tensor([ids])).logits[0].double(), -1)
    total = 0.0
    start = len(prefix) + len(d) + len(x)
    for j, (a, b) in enumerate(enc["offset_mapping"]):
        chars = set(range(a, b))
        if any(chars & (set(range(s, e)) | {e}) for s, e in where):  # the span and the line break after it
            total += float(logp[start + j - 1, enc["input_ids"][j]])
    return total


@pytest.mark.parametrize("lm_name", LMS)
def test_span_log_prob_equals_naive_sum(store, tiny_dir, causal_dirs, lm_name):
    from ralm.realm.masking.causal import SpanQuery
    from ralm.realm.readers.causal import CausalReader

    lm, tok = _lm(causal_dirs[lm_name])
    reader = CausalReader(lm, tok, max_length=400, store=store).eval()
    assert reader.prefix == ([1] if lm_name == "gemma3" else [])
    col = _collator(store, tiny_dir, tok)
    batch = _batch(store, col)
    docs = [[5, 9, -1], [0, 2, -1], [11, 3, -1]]
    with torch.no_grad():
        got = reader.log_p_y_given_docs(batch, docs)
    assert got.shape == (3, 3)
    for b in range(3):
        n = int(batch["lm_query_len"][b])
        masked = tok.decode(batch["lm_query_ids"][b, :n].tolist())[:-1]
        lines = tok.decode(batch["lm_target_ids"][b, : int(batch["lm_target_len"][b])].tolist()).split("\n")[
            :-1
        ]
        q = SpanQuery(masked, [line.split(" ", 1)[1] for line in lines], ["x"] * len(lines))
        for k, cid_doc in enumerate(docs[b]):
            text = reader.doc_text(cid_doc) if cid_doc >= 0 else None
            want = _naive(lm, tok, reader.prefix, text, q)
            assert float(got[b, k]) == pytest.approx(want, abs=1e-4)


def test_null_document_equals_closed_book(store, tiny_dir, causal_dirs):
    from ralm.realm.modeling.model import ChunkDocs, RealmModel
    from ralm.realm.readers.causal import CausalReader
    from ralm.realm.refresh.sync import SyncRefresher
    from ralm.retrieval.encoders import DualEncoder, EncoderConfig

    lm, tok = _lm(causal_dirs["gemma3"])
    batch = _batch(store, _collator(store, tiny_dir, tok))
    torch.manual_seed(0)
    enc = DualEncoder.from_pretrained(tiny_dir, EncoderConfig(max_length=32, scale_by_sqrt_dim=True))
    model = RealmModel(
        CausalReader(lm, tok, max_length=400, store=store), enc, ChunkDocs(store, enc), k=3
    ).eval()
    ref = SyncRefresher(model.docs, autocast="off")
    ref.refresh(model.encoder, 0)
    closed = RealmModel(CausalReader(lm, tok, max_length=400), k=3).eval()
    with torch.no_grad():
        out = model(batch, ref.search)
        alone = closed(batch)
    assert out.log_p_y_given_z.shape == (3, 3) and closed.causal
    torch.testing.assert_close(out.log_p_y_given_z[:, -1], alone.log_p_y, rtol=0, atol=1e-5)
    torch.testing.assert_close(alone.log_p_y, model.reader_only(batch).log_p_y, rtol=0, atol=0)
    assert torch.equal(out.n_masked, batch["lm_target_labels"].sum(1)) and torch.equal(
        alone.n_masked, out.n_masked
    )
    torch.testing.assert_close(out.log_p_z.exp().sum(1), torch.ones(3))
    for b in range(3):
        assert batch["source_ids"][b].item() not in out.doc_ids[b]


def test_marginal_gradient_to_the_query_tower(store, tiny_dir, causal_dirs, monkeypatch):
    """d log p(y|x) / d q = sum_z r(z) d_z / sqrt(d), r(z) = p(z|x) (p(y|z,x) / p(y|x) - 1) (REALM §3.3);
    e.g. scores (0, ln 3) and p(y|z,x) = (0.8, 0.2): p(z|x) = (.25, .75), p(y|x) = .35, r = (0.3214, -0.3214)."""
    from ralm.realm.modeling.marginal import doc_log_probs, marginal_log_likelihood
    from ralm.realm.modeling.model import ChunkDocs, RealmModel
    from ralm.realm.readers.causal import CausalReader
    from ralm.realm.refresh.sync import SyncRefresher
    from ralm.retrieval.encoders import DualEncoder, EncoderConfig

    # the hand-computed case through the marginal itself
    s = torch.tensor([[0.0, float(np.log(3))]], requires_grad=True)
    marginal_log_likelihood(doc_log_probs(s), torch.tensor([[0.8, 0.2]]).log()).sum().backward()
    np.testing.assert_allclose(
        s.grad.numpy(), [[0.25 * (0.8 / 0.35 - 1), 0.75 * (0.2 / 0.35 - 1)]], atol=1e-6
    )
    np.testing.assert_allclose(s.grad.numpy(), [[0.32142857, -0.32142857]], atol=1e-6)

    lm, tok = _lm(causal_dirs["llama"])
    batch = _batch(store, _collator(store, tiny_dir, tok), n=2)
    torch.manual_seed(0)
    enc = DualEncoder.from_pretrained(tiny_dir, EncoderConfig(max_length=32, scale_by_sqrt_dim=True))
    model = RealmModel(
        CausalReader(lm, tok, max_length=400, store=store), enc, ChunkDocs(store, enc), k=4, null_doc="zeros"
    ).eval()
    with torch.no_grad():
        model.null_vector.normal_()
    ref = SyncRefresher(model.docs, autocast="off")
    ref.refresh(model.encoder, 0)
    with torch.no_grad():
        q0 = model.embed_queries(batch)
    q = q0.clone().requires_grad_(True)
    monkeypatch.setattr(model, "embed_queries", lambda _b: q)
    out = model(batch, ref.search)
    out.log_p_y.sum().backward()
    with torch.no_grad():
        d = model.encoder.doc_tower(**model.docs.tower_batch(out.doc_ids.ravel())).view(2, 3, -1)
        d = torch.cat([d, model.null_vector.expand(2, 1, -1)], dim=1)  # (B, K, dim), null last
        p_z = out.log_p_z.exp()
        p_y_z = out.log_p_y_given_z.double().exp()
        r = p_z * (p_y_z / p_y_z.mul(p_z).sum(1, keepdim=True) - 1)
        want = torch.einsum("bk,bkd->bd", r.float(), d) / np.sqrt(d.shape[-1])
    torch.testing.assert_close(q.grad, want, rtol=1e-3, atol=1e-6)
    assert model.null_vector.grad is not None and lm.model.layers[0].mlp.up_proj.weight.grad is not None


# ----------------------------------------------------------------------------- training runs
def _tensors(run):
    from safetensors.torch import load_file

    ck = sorted((run / "checkpoints").iterdir())[-1]
    return load_file(str(ck / "model.safetensors"))


def _losses(run):
    return [json.loads(x)["loss"] for x in (run / "metrics.jsonl").read_text().splitlines() if '"loss"' in x]


@pytest.mark.parametrize("mode", ["realm", "mlm"])
def test_causal_resume_reaches_the_same_parameters(causal_cfg, tmp_path, mode):
    from ralm.realm.training.trainer import pretrain

    kw = dict(mode=mode, steps=5, checkpoint_every=2, refresh_every=2, grad_accum=2)
    full = pretrain(causal_cfg(out=str(tmp_path / "full"), **kw), progress=False)
    part = causal_cfg(out=str(tmp_path / "part"), **kw)
    pretrain(part, progress=False, stop_after=3)
    pretrain(part, resume=True, progress=False)
    a, b = _tensors(full), _tensors(tmp_path / "part")
    assert a.keys() == b.keys() and any(k.startswith("reader.lm.") for k in a)
    for name in a:
        torch.testing.assert_close(a[name], b[name], rtol=0, atol=0, msg=name)
    assert _losses(full) == _losses(tmp_path / "part") and len(_losses(full)) == 5
    rows = [json.loads(x) for x in (full / "metrics.jsonl").read_text().splitlines() if '"loss"' in x]
    if mode == "realm":
        assert {"answers_in_docs", "null_mass", "utility_1", "utility_2", "entropy"} <= set(rows[0])


@pytest.mark.parametrize("lora", [0, 4])
def test_reader_checkpointing_gives_the_same_training(causal_cfg, tmp_path, lora):
    """Recomputing the reader's activations in backward changes memory, not the numbers: the same
    losses and parameters after 3 REALM steps (towers included), with and without LoRA."""
    from ralm.realm.training.build import build_model, is_checkpointing
    from ralm.realm.training.run import open_stores
    from ralm.realm.training.trainer import pretrain

    kw = dict(steps=3, checkpoint_every=3, refresh_every=0, reader_lora_r=lora)
    plain = pretrain(causal_cfg(out=str(tmp_path / "plain"), **kw), progress=False)
    cfg = causal_cfg(out=str(tmp_path / "ckpt"), reader_checkpointing=True, **kw)
    model, _ = build_model(cfg, open_stores(cfg)[0])
    assert is_checkpointing(model.reader.lm)
    assert not is_checkpointing(build_model(causal_cfg(**kw), open_stores(cfg)[0])[0].reader.lm)
    pretrain(cfg, progress=False)
    a, b = _tensors(plain), _tensors(tmp_path / "ckpt")
    assert a.keys() == b.keys() and any(k.startswith("encoder.") for k in a)
    for name in a:
        torch.testing.assert_close(b[name], a[name], rtol=1e-5, atol=1e-7, msg=name)
    assert _losses(tmp_path / "ckpt") == pytest.approx(_losses(plain), rel=1e-6)


def test_masked_lm_reader_checkpointing(tiny_cfg, tmp_path):
    from ralm.realm.training.build import build_model, is_checkpointing
    from ralm.realm.training.run import open_stores
    from ralm.realm.training.trainer import pretrain

    cfg = tiny_cfg(reader_checkpointing=True)
    assert is_checkpointing(build_model(cfg, open_stores(cfg)[0])[0].reader.mlm)

    kw = dict(steps=2, checkpoint_every=2, refresh_every=0)
    plain = pretrain(tiny_cfg(out=str(tmp_path / "plain"), **kw), progress=False)
    ckpt = pretrain(tiny_cfg(out=str(tmp_path / "ckpt"), reader_checkpointing=True, **kw), progress=False)
    a, b = _tensors(plain), _tensors(ckpt)
    for name in a:
        torch.testing.assert_close(b[name], a[name], rtol=1e-5, atol=1e-7, msg=name)


def test_causal_reader_trains_without_its_embeddings(causal_cfg, tmp_path):
    from ralm.realm.training.build import build_model, optimizer_for
    from ralm.realm.training.run import open_stores

    cfg = causal_cfg()
    store, _ = open_stores(cfg)
    model, tok = build_model(cfg, store)
    emb = model.reader.lm.get_input_embeddings().weight
    assert model.causal and not emb.requires_grad and tok.mask_token == "[MASK]"
    names = {id(p) for g in optimizer_for(model, cfg).param_groups for p in g["params"]}
    assert id(emb) not in names and id(model.reader.lm.model.layers[0].self_attn.q_proj.weight) in names
    model, _ = build_model(causal_cfg(reader_embeddings="train"), store)
    assert model.reader.lm.get_input_embeddings().weight.requires_grad


def test_saved_towers_with_a_reserialised_tokenizer_are_accepted(causal_cfg, tiny_dir, tmp_path):
    """A saved dual encoder's tokenizer.json may carry padding/truncation settings (another sha256) and
    still give the DocStore's ids: the closed-book run masks with it."""
    from ralm.models.tokenizers import load_tokenizer, tokenizer_fingerprint
    from ralm.realm.training.build import build_model
    from ralm.realm.training.run import open_stores
    from ralm.retrieval.encoders import DualEncoder, EncoderConfig

    enc = DualEncoder.from_pretrained(tiny_dir, EncoderConfig(max_length=32))
    enc.query_tower.tokenizer.enable_padding() if hasattr(
        enc.query_tower.tokenizer, "enable_padding"
    ) else None
    saved = enc.save(tmp_path / "towers")
    tok = load_tokenizer(saved / "query")
    tok.backend_tokenizer.enable_truncation(32)
    tok.save_pretrained(saved / "query")
    cfg = causal_cfg(mode="mlm", retriever=str(saved))
    store, _ = open_stores(cfg)
    assert tokenizer_fingerprint(load_tokenizer(saved / "query")) != store.manifest["tokenizer"]["sha256"]
    model, masking_tok = build_model(cfg, store)
    assert masking_tok.mask_token_id == load_tokenizer(tiny_dir).mask_token_id and not model.retrieval


def test_reader_kind_auto(causal_dirs, tiny_dir, tmp_path):
    from ralm.realm.config import PretrainConfig
    from ralm.realm.training.build import is_causal_reader

    def kind(**kw):
        return is_causal_reader(PretrainConfig(docstore="d", out="o", **kw))

    assert kind(reader=str(causal_dirs["llama"])) and kind(reader="gemma3") and kind(reader="smollm2")
    assert not kind() and not kind(reader=str(tiny_dir)) and not kind(reader="minilm")
    g = tmp_path / "m.gguf"
    g.write_bytes(b"GGUF")
    assert kind(reader=str(g)) and kind(reader=str(tmp_path))
    assert not kind(reader=str(causal_dirs["llama"]), reader_kind="mlm") and kind(reader_kind="causal")


# ----------------------------------------------------------------------------- inference on runs
@pytest.fixture(scope="module")
def causal_runs(tmp_path_factory, realm_store, tiny_dir, causal_dirs):
    from ralm.realm.training.trainer import pretrain

    root = tmp_path_factory.mktemp("causal-runs")
    n = torch.get_num_threads()
    torch.set_num_threads(1)
    out = {}
    for mode in ("realm", "mlm"):
        cfg = tiny_config(
            realm_store,
            tiny_dir,
            out=str(root / mode),
            mode=mode,
            reader=str(causal_dirs["gemma3"]),
            retriever=str(tiny_dir),
            steps=2,
            reader_max_length=200,
            refresh_every=1,
        )
        out[mode] = pretrain(cfg, progress=False)
    torch.set_num_threads(n)
    return out


def test_evaluate_causal_run_by_kind_and_initial(causal_runs):
    from ralm.realm.inference.evaluate import evaluate_mlm, format_table
    from ralm.realm.training.run import load_run

    run, base = load_run(causal_runs["realm"]), load_run(causal_runs["mlm"])
    rows = evaluate_mlm(run, base)
    assert [r.name for r in rows] == [
        "realm (retrieval)",
        "realm reader alone, closed-book",
        "closed-book baseline",
    ]
    for r in rows:
        assert r.examples == 3 and r.by_kind and sum(v["spans"] for v in r.by_kind.values()) == 3
        assert sum(v["tokens"] for v in r.by_kind.values()) == r.tokens
        nll = sum(v["nll"] * v["tokens"] for v in r.by_kind.values()) / r.tokens
        assert nll == pytest.approx(r.nll)
    assert rows[0].answers_in_docs is not None and "perplexity by span kind" in format_table(rows)
    # step 0: both runs start from the same LM, so the closed-book rows agree exactly
    start = evaluate_mlm(
        load_run(causal_runs["realm"], initial=True), load_run(causal_runs["mlm"], initial=True)
    )
    assert start[1].nll == pytest.approx(start[2].nll, abs=1e-9)
    assert start[1].nll != pytest.approx(rows[1].nll, abs=1e-9)  # training moved the reader


def test_evaluate_cli_initial(causal_runs, capsys):
    code, out, _ = run_ralm(
        capsys,
        "evaluate-mlm",
        causal_runs["realm"],
        "--baseline",
        causal_runs["mlm"],
        "--initial",
        "--device",
        "cpu",
    )
    assert code == 0
    assert "closed-book baseline" in out and "perplexity by span kind" in out
    saved = json.loads((causal_runs["realm"] / "eval_mlm_initial.json").read_text())
    assert (saved["checkpoint"], saved["step"]) == ("initial", 0) and len(saved["rows"]) == 3
    assert all("by_kind" in r for r in saved["rows"])
    for r in saved["rows"]:  # the per-span scores a paired interval across evaluations needs
        per = r["per_example"]
        assert {len(v) for v in per.values()} == {r["examples"]}
        assert sum(per["n_content"]) == r["content_tokens"] and sum(per["n"]) == r["tokens"]
        assert sum(per["nll"]) / r["tokens"] == pytest.approx(r["nll"])
    assert len({tuple(r["per_example"]["n_content"]) for r in saved["rows"]}) == 1  # the same spans


def test_evaluate_content_rows_and_ratio_intervals(causal_runs):
    from ralm.realm.inference.evaluate import evaluate_mlm, ratios
    from ralm.realm.training.run import load_run

    rows = evaluate_mlm(load_run(causal_runs["realm"]), load_run(causal_runs["mlm"]))
    for r in rows:
        assert r.content_tokens < r.tokens and r.content_ppl is not None  # line breaks left out
        assert int(r.per_example["n_content"].sum()) == r.content_tokens
    got = ratios(rows)
    assert [d["row"] for d in got] == [rows[0].name, rows[1].name]
    for d, r in zip(got, rows, strict=False):
        assert d["ratio"] == pytest.approx(r.ppl / rows[-1].ppl)
        assert d["content_ratio"] == pytest.approx(r.content_ppl / rows[-1].content_ppl)
        assert d["ratio_low"] <= d["ratio"] <= d["ratio_high"]


def test_diagnose_agrees_with_evaluate(causal_runs, capsys):
    from ralm.cli import main
    from ralm.realm.inference.diagnose import diagnose, score_utility_agreement
    from ralm.realm.inference.evaluate import evaluate_mlm
    from ralm.realm.training.run import load_run

    run, base = load_run(causal_runs["realm"]), load_run(causal_runs["mlm"])
    diag = diagnose(run, base, depth=10, reader_depth=4)
    rows = evaluate_mlm(run, base)
    s = diag.summary
    assert s["queries"] == 3 and len(diag.records) == 3 and s["k"] == 3
    # the run's own p(z|x) over its k documents is what evaluate-mlm scores
    assert s["ratios"]["all"]["run_k"]["run"]["ratio"] == pytest.approx(rows[0].ppl / rows[2].ppl, rel=1e-4)
    assert s["ratios"]["content"]["run_k"]["run"]["ratio"] == pytest.approx(
        rows[0].content_ppl / rows[2].content_ppl, rel=1e-4
    )
    for part in ("all", "content"):
        for block in ("run_k", "K=5"):
            r = s["ratios"][part][block]
            assert r["oracle"]["ratio"] <= min(r["run"]["ratio"], r["uniform"]["ratio"]) + 1e-9
    # uniform p(z|x) over the k documents, by hand from the records
    nll_u, nll_c, tok = 0.0, 0.0, 0
    for rec in diag.records:
        lp = [rec["lp_all"][0], rec["lp_all"][1], rec["lp_all"][-1]]
        nll_u -= np.logaddexp.reduce(np.array(lp) - np.log(3))
        nll_c -= rec["closed_all"]
        tok += rec["n_all"]
    assert s["ratios"]["all"]["run_k"]["uniform"]["ratio"] == pytest.approx(np.exp((nll_u - nll_c) / tok))
    for src in ("dense", "bm25", "hybrid"):
        vals = list(s["answers_in_candidates"][src].values())
        assert list(s["answers_in_candidates"][src]) == ["3", "8"] and vals == sorted(vals)
    assert all(len(rec["candidates"]["dense"]) == 10 for rec in diag.records)
    assert 0 < s["entropy_ratio"] <= 1 and 0 < s["null_mass"] < 1
    # the ranking agreement is over the 4 reader chunks' prior and content log-likelihood, null left out
    by_hand = score_utility_agreement(
        np.array([rec["log_p_z_r"][:4] for rec in diag.records]),
        np.array([rec["lp_content"][:4] for rec in diag.records]),
    )
    assert s["score_utility"] == by_hand and s["score_utility"]["top_chance"] == 0.25
    assert (
        main(
            [
                "evaluate-mlm",
                str(causal_runs["realm"]),
                "--baseline",
                str(causal_runs["mlm"]),
                "--diagnose",
                "--depth",
                "10",
                "--reader-depth",
                "4",
                "--device",
                "cpu",
            ]
        )
        == 0
    )
    printed = capsys.readouterr().out
    assert (
        "answers in candidates" in printed and "scores vs the reader's log p(y|x,z) over 4 chunks" in printed
    )
    saved = json.loads((causal_runs["realm"] / "diagnose.json").read_text())
    assert saved["ratios"]["all"]["run_k"]["run"]["ratio"] == pytest.approx(
        s["ratios"]["all"]["run_k"]["run"]["ratio"]
    )
    assert len((causal_runs["realm"] / "diagnose_queries.jsonl").read_text().splitlines()) == 3


def test_fill_causal_run(causal_runs):
    from ralm.realm.inference.fill import fill, fill_many
    from ralm.realm.training.run import load_run

    run = load_run(causal_runs["realm"])
    res = fill(run, "Oslo is the capital of [MASK]. It was founded in [MASK] [MASK] by Harald.")
    assert len(res.prediction) == 2 and all(isinstance(s, str) and s for s in res.prediction)
    assert len(res.docs) == 3 and res.docs[-1].chunk_id == -1
    assert sum(d.p_z for d in res.docs) == pytest.approx(1.0, abs=1e-5)
    assert all(len(d.prediction) == 2 and 0 <= d.p_y <= 1 for d in res.docs)
    assert 0 <= res.p_y <= 1 and len(res.alternatives) == 2
    assert res.prediction in [d.prediction for d in res.docs]  # the marginal picks a generated answer
    # p(y|x) = sum_z p(z|x) p(y|z,x) >= the term of any chunk that generated y
    assert res.p_y >= max(d.p_z * d.p_y for d in res.docs if d.prediction == res.prediction) - 1e-9
    two = fill_many(run, ["Oslo is the capital of [MASK].", "Bergen was founded in [MASK]."])
    assert len(two) == 2 and all(len(r.prediction) == 1 for r in two)
    closed = fill(load_run(causal_runs["mlm"]), "Oslo is the capital of [MASK].")
    assert closed.docs == [] and len(closed.prediction) == 1
    with pytest.raises(Exception, match=r"no \[MASK\]"):
        fill(run, "no mask here")


def test_export_causal_reader(causal_runs, tmp_path):
    from transformers import AutoModelForCausalLM

    from ralm.realm.inference.export import export_reader
    from ralm.realm.training.run import load_run

    run = load_run(causal_runs["realm"])
    out = export_reader(run, tmp_path / "reader")
    assert json.loads((out / "ralm_export.json").read_text())["reader_kind"] == "causal"
    assert "text-generation" in (out / "README.md").read_text()
    lm = AutoModelForCausalLM.from_pretrained(out).eval()
    ids = torch.tensor([[1, 40, 41, 42, 43]])
    with torch.no_grad():
        torch.testing.assert_close(lm(ids).logits, run.model.reader.lm(ids).logits)

    from ralm.frozen.lm import load_frozen_lm

    assert load_frozen_lm(out, device="cpu", autocast="off").model.config.model_type == "gemma3_text"


def test_lora_reader_trains_adapters_and_exports_merged(causal_cfg, tmp_path):
    from ralm.realm.inference.export import export_reader
    from ralm.realm.training.run import load_run
    from ralm.realm.training.trainer import pretrain

    run = pretrain(causal_cfg(reader_lora_r=2, steps=2, checkpoint_every=2), progress=False)
    loaded = load_run(run)
    lm = loaded.model.reader.lm
    train = [n for n, p in lm.named_parameters() if p.requires_grad]
    assert train and all("lora_" in n for n in train)
    ids = torch.tensor([[5, 40, 41, 42]])
    with torch.no_grad():
        before = lm(ids).logits
    out = export_reader(loaded, tmp_path / "merged")
    from safetensors.torch import load_file

    assert not any("lora" in k for k in load_file(str(out / "model.safetensors")))
    from transformers import AutoModelForCausalLM

    with torch.no_grad():
        torch.testing.assert_close(
            AutoModelForCausalLM.from_pretrained(out)(ids).logits, before, rtol=1e-4, atol=1e-5
        )


# ----------------------------------------------------------------------------- errors
def test_errors_are_one_line_and_exit_2(realm_store, tiny_dir, causal_dirs, tmp_path, capsys):
    common = [
        "pretrain",
        "--docstore",
        str(realm_store),
        "--steps",
        "1",
        "--batch-size",
        "2",
        "--k",
        "3",
        "--heldout",
        "2",
        "--device",
        "cpu",
        "--quiet",
    ]
    llama, tiny = str(causal_dirs["llama"]), str(tiny_dir)
    cases = [
        # a reader that is no causal LM
        (["--reader", tiny, "--reader-kind", "causal", "--retriever", tiny], "is not a causal LM"),
        # a masked text with its spans longer than the reader's budget
        (["--reader", llama, "--retriever", tiny, "--set", "reader_max_length=8"], "reader_max_length=8"),
        # towers whose tokenizer is not the DocStore's
        (["--reader", llama, "--mode", "mlm", "--retriever", llama], "tokenizer"),
        (["--reader", llama, "--set", "causal_blank=[x]"], "causal_blank"),
    ]
    for name, (options, want) in zip("abcd", cases, strict=True):
        code, _, err = run_ralm(capsys, *common, "--out", tmp_path / name, *options)
        assert code == 2 and len(err) == 1 and want in err[0]


def test_decoder_lm_towers_are_refused_in_one_line(causal_cfg, causal_dirs, realm_store, tmp_path):
    """REALM's masked queries need [CLS]/[SEP]/[MASK]: decoder-LM towers (raw, or a saved encoder made
    from one) are refused before anything is written, naming the towers."""
    from ralm.errors import RalmError
    from ralm.realm.training.trainer import pretrain
    from ralm.retrieval.encoders import DualEncoder, EncoderConfig

    g = str(causal_dirs["gemma3"])
    DualEncoder.from_pretrained(g, EncoderConfig(pooling="last")).save(tmp_path / "enc")
    for towers in (g, str(tmp_path / "enc")):
        out = tmp_path / f"run-{len(towers)}"
        with pytest.raises(RalmError, match=r"decoder-LM towers cannot be REALM's retriever") as e:
            pretrain(causal_cfg(lm="gemma3", retriever=towers, out=str(out)), progress=False)
        assert str(e.value).startswith(towers) and "\n" not in str(e.value)
        assert not out.exists()
