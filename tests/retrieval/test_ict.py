import json

import numpy as np
import pytest
import torch

from ralm.corpus.build import BuildConfig, build_docstore
from ralm.retrieval.encoders import DualEncoder, EncoderConfig
from ralm.retrieval.ict import ICTConfig, ict_loss, ict_pair, train_ict


def test_ict_pair_docstring_example():
    assert ict_pair("A b. C d. E f.", 1, True) == ("C d.", "A b. E f.")
    assert ict_pair("A b. C d. E f.", 1, False) == ("C d.", "A b. C d. E f.")
    assert ict_pair("A b. C d. E f.", 0, True) == ("A b.", "C d. E f.")
    assert ict_pair("A b. C d. E f.", 2, True) == ("E f.", "A b. C d.")


@pytest.fixture(scope="module")
def tiny_store(tmp_path_factory, tiny_dir):
    d = tmp_path_factory.mktemp("ict")
    rng = np.random.default_rng(0)
    words = [
        "alpha",
        "beta",
        "gamma",
        "delta",
        "oslo",
        "norway",
        "king",
        "queen",
        "river",
        "mountain",
        "snow",
    ]
    lines = []
    for i in range(60):
        sents = [" ".join(rng.choice(words, size=6)).capitalize() + "." for _ in range(3)]
        lines.append(json.dumps({"title": f"Doc {i}", "text": " ".join(sents)}))
    (d / "docs.jsonl").write_text("\n".join(lines) + "\n")
    cfg = BuildConfig(chunk_size=64, tokenizer=str(tiny_dir))
    return build_docstore([d / "docs.jsonl"], d / "store", cfg, progress=False, log=lambda m: None)


def test_ict_loss_decreases_on_a_fixed_batch(tiny_dir):
    torch.manual_seed(0)
    enc = DualEncoder.from_pretrained(tiny_dir, EncoderConfig(pooling="cls", proj_dim=32))
    batch = [
        (f"query about {w} number {i}", f"T{i}", f"a document that talks about {w} and more {i}")
        for i, w in enumerate(
            ["oslo", "bergen", "albedo", "lincoln", "aristotle", "alabama", "anarchism", "autism"]
        )
    ]
    opt = torch.optim.AdamW(enc.parameters(), lr=5e-4)
    enc.eval()  # no dropout: the same batch gives the same loss, so the trend is the model's
    losses = []
    for _ in range(30):
        loss, _ = ict_loss(enc, batch, None, torch.device("cpu"))
        opt.zero_grad()
        loss.backward()
        torch.nn.utils.clip_grad_norm_(enc.parameters(), 1.0)  # as train_ict does
        opt.step()
        losses.append(loss.item())
    assert losses[0] == pytest.approx(np.log(8), abs=0.1)  # chance level: 8 equally likely documents
    assert np.mean(losses[-5:]) < 0.8 * np.mean(losses[:5])
    assert losses[-1] < 0.7 * losses[0]


def test_train_ict_end_to_end(tiny_store, tiny_dir, tmp_path):
    enc = DualEncoder.from_pretrained(tiny_dir, EncoderConfig(pooling="mean"))
    cfg = ICTConfig(
        steps=6, batch_size=8, lr=5e-4, heldout_frac=0.2, eval_every=3, log_every=2, autocast="off"
    )
    last = train_ict(enc, tiny_store, tmp_path / "run", cfg, progress=False)
    rows = [json.loads(x) for x in (tmp_path / "run" / "metrics.jsonl").read_text().splitlines()]
    # step 0 eval, train logs at 2/4/6, evals at 3/6
    assert [r["step"] for r in rows] == [0, 2, 3, 4, 6, 6]
    assert rows[0]["heldout_queries"] == 12  # 20% of 60 chunks, all with 3 sentences
    assert set(last) == {"heldout_recall@1", "heldout_recall@5", "heldout_recall@10"}
    assert all(0.0 <= v <= 1.0 for v in last.values())
    assert json.loads((tmp_path / "run" / "ict_config.json").read_text())["steps"] == 6
    again = DualEncoder.from_pretrained(tmp_path / "run" / "encoder")
    q = ["alpha beta gamma"]
    np.testing.assert_allclose(again.encode_queries(q), enc.encode_queries(q), atol=1e-5)


def test_train_ict_bad_device_writes_nothing(tiny_store, tiny_dir, tmp_path):
    from ralm.errors import RalmError

    enc = DualEncoder.from_pretrained(tiny_dir, EncoderConfig(pooling="mean"))
    with pytest.raises(RalmError, match=r"device 'tpu7': use auto, cpu, cuda or cuda:N"):
        train_ict(enc, tiny_store, tmp_path / "run", ICTConfig(steps=1, device="tpu7"), progress=False)
    assert not (tmp_path / "run").exists()
