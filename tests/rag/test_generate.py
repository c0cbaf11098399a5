"""Greedy decoding batched vs one by one, and REPLUG's mixture against a naive per-passage loop."""

from __future__ import annotations

import numpy as np
import torch

from ralm.rag.generate import answer_text, greedy, passage_weights, replug
from ralm.rag.prompt import PromptBuilder


def _prompts(lm):
    b = PromptBuilder(lm.tokenizer, 400)
    return [
        b.ids("Who was president?", ["Abraham Lincoln was the 16th president."]),
        b.ids("Oslo?", []),
        b.ids(
            "Hvor bor mange mennesker?", ["Oslo er hovedstaden i Norge.", "København er Danmarks hovedstad."]
        ),
    ]


def _naive_greedy(lm, prompt, n, stop):
    ids = list(prompt)
    out = []
    with torch.no_grad():
        for _ in range(n):
            t = int(lm.model(input_ids=torch.tensor([ids])).logits[0, -1].argmax())
            if t in stop:
                break
            out.append(t)
            ids.append(t)
    return out


def test_batched_greedy_equals_one_by_one_and_a_naive_loop(chat_lm):
    prompts = _prompts(chat_lm)
    stop = [chat_lm.tokenizer.eos_token_id]
    together = greedy(chat_lm, prompts, max_new_tokens=12, stop_ids=stop, batch_size=8)
    alone = [greedy(chat_lm, [p], max_new_tokens=12, stop_ids=stop)[0] for p in prompts]
    assert together == alone
    assert together == [_naive_greedy(chat_lm, p, 12, set(stop)) for p in prompts]
    assert all(len(g) == 12 for g in together)  # a random LM rarely stops: each ran to the limit


def test_greedy_stops_at_a_stop_token_and_excludes_it(chat_lm):
    p = _prompts(chat_lm)[0]
    free = greedy(chat_lm, [p], max_new_tokens=6, stop_ids=[])[0]
    cut = greedy(chat_lm, [p], max_new_tokens=6, stop_ids=[free[2]])[0]
    assert cut == free[: free.index(free[2])]


def _naive_replug(lm, group, weights, n, stop):
    rows = [list(p) for p in group]
    out = []
    with torch.no_grad():
        for _ in range(n):
            mix = sum(
                w * torch.softmax(lm.model(input_ids=torch.tensor([r])).logits[0, -1].float(), -1)
                for w, r in zip(weights, rows, strict=True)
            )
            t = int(mix.argmax())
            if t in stop:
                break
            out.append(t)
            for r in rows:
                r.append(t)
    return out


def test_replug_mixture_equals_a_naive_per_passage_loop(chat_lm):
    b = PromptBuilder(chat_lm.tokenizer, 400)
    passages = [
        ["Abraham Lincoln was the 16th president.", "Oslo er hovedstaden i Norge.", "København"],
        ["Det bor mange mennesker der.", "Abraham Lincoln"],
    ]
    groups = [[b.ids(q, [p]) for p in ps] for q, ps in zip(["Who?", "Hvor?"], passages, strict=True)]
    weights = [passage_weights([2.0, 1.0, 0.5]), passage_weights([0.3, 0.1], temperature=0.5)]
    stop = [chat_lm.tokenizer.eos_token_id]
    got = replug(chat_lm, groups, weights, max_new_tokens=8, stop_ids=stop, batch_size=16)
    want = [_naive_replug(chat_lm, g, w, 8, set(stop)) for g, w in zip(groups, weights, strict=True)]
    assert got == want
    # one passage with weight 1 is plain greedy decoding of that prompt
    assert replug(chat_lm, [[groups[0][0]]], [[1.0]], max_new_tokens=8, stop_ids=stop) == greedy(
        chat_lm, [groups[0][0]], max_new_tokens=8, stop_ids=stop
    )


def test_passage_weights_are_a_softmax():
    w = passage_weights([1.0, 0.0], temperature=0.5)
    np.testing.assert_allclose(w, [np.exp(2) / (np.exp(2) + 1), 1 / (np.exp(2) + 1)])
    assert passage_weights([5.0]).tolist() == [1.0]


def test_answer_text_keeps_the_first_line(chat_lm):
    tok = chat_lm.tokenizer
    ids = tok(" Oslo\nDet bor<|im_end|>", add_special_tokens=False)["input_ids"]
    assert answer_text(tok, ids) == "Oslo"


def test_first_line_stops_early_with_the_same_answers(chat_lm):
    """Decoding that stops once the first line is whole gives every prompt the answer that full
    decoding gives (answer_text keeps the first line), in fewer tokens. The tiny LM is first taught
    (60 Adam steps) to answer in two lines, so that a line break does come."""
    import copy

    from ralm.frozen.lm import FrozenLM
    from ralm.rag.generate import answer_text, first_line_done

    tok = chat_lm.tokenizer
    words = ["fjord", "city", "river", "lake", "hill", "bay"]
    prompts = [tok.encode(f"where is the {w}?") for w in words]
    model = copy.deepcopy(chat_lm.model).train()
    for p in model.parameters():
        p.requires_grad_(True)
    rows = [
        torch.tensor([p + tok.encode(f" the {w} is here\nand more text follows")])
        for p, w in zip(prompts, words, strict=True)
    ]
    opt = torch.optim.Adam(model.parameters(), lr=1e-2)
    torch.manual_seed(0)
    for _ in range(60):
        for x in rows:
            opt.zero_grad()
            model(input_ids=x, labels=x).loss.backward()
            opt.step()
    lm = FrozenLM(model, tok, device="cpu", autocast="off")
    full = greedy(lm, prompts, max_new_tokens=24, stop_ids=[], batch_size=3)
    short = greedy(lm, prompts, max_new_tokens=24, stop_ids=[], batch_size=3, first_line=True)
    done = first_line_done(tok)
    for f, s in zip(full, short, strict=True):
        assert answer_text(tok, s) == answer_text(tok, f)
        assert f[: len(s)] == s  # a prefix of the full decoding
        cut = next((j for j in range(1, len(f) + 1) if done(f[:j])), len(f))
        assert len(s) == cut  # ends right where the first line is whole
    assert sum(len(s) < len(f) for f, s in zip(full, short, strict=True)) >= 4
    assert answer_text(tok, short[0]) == "the fjord is here"
