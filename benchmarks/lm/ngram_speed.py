"""N-gram LM speed: ralm vs nltk.lm (estimation + scoring) and vs KenLM (scoring).

Data (~1M tokens, all from gensim's test data, no repetition): the English Wikipedia
sample (markup stripped with plain regexes: a token stream, not clean prose) and
lee_background.cor, lower-cased, word-tokenised and split into sentences; plus
head500.noblanks.cor (stemmed Wikipedia, no punctuation) cut into 25-token pieces. Every
20th sentence is held out (~0.95M training tokens, ~50k held out).

Measured (wall clock, this process, best of 3 for scoring):
- ralm fit (trigram modified Kneser-Ney, also 5-gram) and held-out scoring;
- KenLM (`kenlm.Model` on ralm's exported ARPA file, `score()` per sentence string) scoring
  of the same held-out text, plus the largest per-sentence difference between the two;
- nltk.lm Laplace trigram (the same probabilities as ralm's `laplace`) fit + scoring on a
  100k-token training subset and the first 5k held-out tokens, extrapolated linearly to the
  full sizes (nltk counts are linear in tokens and its Laplace score is O(1) per token);
- nltk.lm KneserNeyInterpolated trigram vs ralm `kn`, both on a 20k-token subset and 300
  held-out tokens with no extrapolation: nltk's KN scans every higher-order n-gram for each
  score, so its cost per token grows with the training set and a linear extrapolation
  would flatter it.

Loading, writing and memory (issue "Faults and bad files"), on the order-5 modified-KN model
of the same ~0.95M training tokens (2.9M n-grams, a 168 MB ARPA file):
- ralm_score_with_load_vs_kenlm_ratio: seconds for `NGramLM.from_arpa(file)` + scoring the
  held-out sentences over seconds for `kenlm.Model(file)` + `Model.score` per held-out line, the
  two interleaved in this process, best of 5 each (lower is better; target <= 2);
- arpa_write_share_of_train: the seconds `NGramLM.to_arpa` takes inside `ralm ngram train TEXT
  --order 5 --out M.arpa` (default tokenizer) over the whole command's wall clock, the command
  run as a user runs it (a fresh interpreter: start-up and imports included), median of 5
  runs (target < 0.5); arpa_write_share_of_train_in_process: the same through the CLI entry
  point in this process (no start-up or imports), median of 5;
- train_peak_rss_bytes_per_ngram: peak RSS of that command over the model's n-grams, and
  train_marginal_rss_bytes_per_ngram, the slope between the half and the full training text
  (what each further n-gram costs; the intercept is the interpreter, numpy, pyarrow and the
  rest of the `ralm` command).
BEFORE holds the same measurements of the code before this change (ralm.lm at commit a6f7e22,
run with PYTHONPATH pointing at an export of that commit's src/, same machine, same day).

Targets: speedup_vs_nltk_fit_score >= 10; ralm_score_with_load_vs_kenlm_ratio <= 2;
arpa_write_share_of_train < 0.5. The throughput-only KenLM ratio is reported, not targeted.
Run: python -m benchmarks.lm.ngram_speed   (writes benchmarks/results/ngram_speed.json)
     python -m benchmarks.lm.ngram_speed --faults-only   (prints the loading/writing/memory part)
"""

from __future__ import annotations

import bz2
import html
import json
import os
import re
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

from benchmarks.common import RESULTS, script_command, write_result
from benchmarks.lm.ngram_speed_kenlm import faults_metrics
from ralm.lm import NGramLM, word_tokenize

SENT_SPLIT = re.compile(r"(?<=[.!?])\s+")


def strip_wiki(text: str) -> str:
    """Rough MediaWiki markup removal: enough for a token stream, not for clean prose."""
    text = html.unescape(text)
    text = re.sub(r"<!--.*?-->", " ", text, flags=re.S)
    text = re.sub(r"<ref[^>]*/>|<ref[^>]*>.*?</ref>", " ", text, flags=re.S)
    for _ in range(5):  # innermost templates / tables first
        text, n = re.subn(r"\{\{[^{}]*\}\}|\{\|[^{}]*?\|\}", " ", text, flags=re.S)
        if not n:
            break
    text = re.sub(r"\[\[(?:File|Image|Category):[^\[\]]*(?:\[\[[^\]]*\]\][^\[\]]*)*\]\]", " ", text)
    text = re.sub(r"\[\[(?:[^|\]]*\|)?([^\]]*)\]\]", r"\1", text)
    text = re.sub(r"\[https?://\S+\s*([^\]]*)\]", r"\1", text)
    text = re.sub(r"^\s*(?:\{\||\|\}|\|-|\|\+).*$", " ", text, flags=re.M)  # table frame lines
    text = re.sub(r"<[^>]+>|'{2,}|\|\||!!|^[=*#:;|!]+|=+\s*$", " ", text, flags=re.M)
    text = re.sub(r"(?:^|\|)\s*[\w-]+\s*=\s*\"[^\"]*\"\s*\|", " ", text, flags=re.M)  # cell attributes
    return text.replace("|", " ")


def load_corpus() -> tuple[list[list[str]], list[list[str]]]:
    import gensim

    data = Path(gensim.__file__).parent / "test" / "test_data"
    wiki = data / "enwiki-latest-pages-articles1.xml-p000000010p000030302-shortened.bz2"
    with bz2.open(wiki, "rt", encoding="utf-8") as f:
        raw = f.read()
    lines = []
    for page in re.findall(r"<text[^>]*>(.*?)</text>", raw, flags=re.S):
        lines.extend(strip_wiki(page).split("\n"))
    lines.extend((data / "lee_background.cor").read_text(encoding="utf-8").splitlines())
    sentences = []
    for line in lines:
        for s in SENT_SPLIT.split(line):
            tokens = word_tokenize(s, lowercase=True)
            if len(tokens) >= 3:
                sentences.append(tokens)
    # Stemmed Wikipedia text without punctuation, one article per line: 25-token pieces.
    for line in (data / "head500.noblanks.cor").read_text(encoding="utf-8").splitlines():
        words = line.split()
        sentences.extend(words[i : i + 25] for i in range(0, len(words), 25))
    train = [s for i, s in enumerate(sentences) if i % 20]
    held = [s for i, s in enumerate(sentences) if i % 20 == 0]
    return train, held


def best_of(fn, n: int = 3) -> tuple[float, object]:
    best, out = float("inf"), None
    for _ in range(n):
        t = time.perf_counter()
        out = fn()
        best = min(best, time.perf_counter() - t)
    return best, out


def take_tokens(sentences: list[list[str]], n_tokens: int) -> list[list[str]]:
    out, total = [], 0
    for s in sentences:
        if total >= n_tokens:
            break
        out.append(s)
        total += len(s)
    return out


def ntok(sentences: list[list[str]]) -> int:
    return sum(len(s) for s in sentences)


def nltk_fit_score(cls, train, held, order=3):
    """Seconds to fit nltk `cls` on train and to score every held-out token (with </s>)."""
    from nltk.lm.preprocessing import padded_everygram_pipeline

    t = time.perf_counter()
    ngrams, vocab = padded_everygram_pipeline(order, train)
    model = cls(order)
    model.fit(ngrams, vocab)
    fit_s = time.perf_counter() - t
    t = time.perf_counter()
    total = 0.0
    for s in held:
        padded = ["<s>"] * (order - 1) + s + ["</s>"]
        for i in range(order - 1, len(padded)):
            total += model.logscore(padded[i], padded[i - order + 1 : i])
    return fit_s, time.perf_counter() - t, total


def ralm_fit_score(estimator: str, train, held, fit_tries: int) -> tuple[float, float]:
    """nltk_fit_score's counterpart: the best seconds of `fit_tries` fits of ralm's trigram
    `estimator` on train, and of 3 scorings of held with it."""
    fit_s, lm = best_of(lambda: NGramLM.fit(train, order=3, estimator=estimator), fit_tries)
    score_s, _ = best_of(lambda: lm.score_sentences(held))
    return fit_s, score_s


# Measured with faults_metrics() on the code before this change (see the module docstring).
BEFORE = {
    "ralm_score_with_load_vs_kenlm_ratio": 5.08,  # ralm 7.90 s, kenlm 1.56 s
    "arpa_write_share_of_train": 0.80,  # 4.07 of 5.08 s
    "arpa_write_share_of_train_in_process": 0.79,  # 4.20 of 5.29 s
    "train_peak_rss_bytes": 812625920,  # 775 MiB for 2960265 n-grams
    "train_peak_rss_bytes_per_ngram": 274.5,
    "train_marginal_rss_bytes_per_ngram": 250.2,
    "measured": "2026-11-23, ralm.lm of commit a6f7e22, this machine, faults_metrics()",
}

# `ralm ngram train` in a fresh interpreter, as a user runs it, reporting the seconds spent in
# NGramLM.to_arpa and the peak RSS (VmHWM, not ru_maxrss: Linux carries ru_maxrss over from the
# large parent across fork + exec).


def main() -> int:
    import kenlm
    from nltk.lm import KneserNeyInterpolated, Laplace

    t0 = time.perf_counter()
    train, held = load_corpus()
    load_s = time.perf_counter() - t0
    n_train, n_held = ntok(train), ntok(held)
    n_pred = n_held + len(held)  # + </s> per sentence
    print(f"corpus: {n_train} train tokens ({len(train)} sentences), {n_held} held-out; {load_s:.1f}s")
    if "--faults-only" in sys.argv[1:]:
        print(
            json.dumps(
                {
                    k: (round(v, 4) if isinstance(v, float) else v)
                    for k, v in faults_metrics(train, held).items()
                },
                indent=1,
            )
        )
        return 0

    m: dict[str, float] = {"train_tokens": n_train, "heldout_tokens": n_held, "heldout_sentences": len(held)}
    m["load_average_1min_at_start"] = os.getloadavg()[0]  # other jobs on the machine skew timings
    m.update(faults_metrics(train, held))

    # ---- ralm: fit + score (trigram MKN), 5-gram fit
    fit3_s, lm3 = best_of(lambda: NGramLM.fit(train, order=3, estimator="mkn"), 1)
    fit5_s, lm5 = best_of(lambda: NGramLM.fit(train, order=5, estimator="mkn"), 1)
    score_s, ours = best_of(lambda: lm3.score_sentences(held))
    score5_s, _ = best_of(lambda: lm5.score_sentences(held))
    m.update(
        vocab_size=lm3.vocab_size,
        ralm_mkn3_fit_seconds=fit3_s,
        ralm_fit_tokens_per_s=n_train / fit3_s,
        ralm_mkn5_fit_seconds=fit5_s,
        ralm_mkn5_fit_tokens_per_s=n_train / fit5_s,
        ralm_mkn3_score_seconds=score_s,
        ralm_score_tokens_per_s=n_pred / score_s,
        ralm_mkn5_score_tokens_per_s=n_pred / score5_s,
        ralm_mkn3_heldout_perplexity=lm3.perplexity(held),
        ralm_mkn5_heldout_perplexity=lm5.perplexity(held),
    )
    print(f"ralm mkn3 fit {fit3_s:.2f}s, score {score_s:.3f}s; mkn5 fit {fit5_s:.2f}s")

    # ---- KenLM on ralm's ARPA
    with tempfile.TemporaryDirectory() as tmp:
        path = os.path.join(tmp, "mkn3.arpa")
        write_s, _ = best_of(lambda: lm3.to_arpa(path), 1)
        read_s, back = best_of(lambda: NGramLM.from_arpa(path), 1)
        kload_s, km = best_of(lambda: kenlm.Model(path), 1)
        lines = [" ".join(s) for s in held]
        kscore_s, theirs = best_of(lambda: np.array([km.score(x) for x in lines]))
        assert np.array_equal(back.score_sentences(held), ours)
    m.update(
        ralm_arpa_write_seconds=write_s,
        ralm_arpa_read_seconds=read_s,
        kenlm_arpa_load_seconds=kload_s,
        kenlm_score_tokens_per_s=n_pred / kscore_s,
        ralm_score_vs_kenlm_ratio=(n_pred / score_s) / (n_pred / kscore_s),
        max_abs_sentence_log10_diff_vs_kenlm=float(np.abs(ours - theirs).max()),
    )
    print(f"kenlm score {kscore_s:.3f}s; ralm/kenlm throughput {m['ralm_score_vs_kenlm_ratio']:.2f}")

    # ---- nltk Laplace trigram: subset, extrapolated linearly
    sub_train = take_tokens(train, 100_000)
    sub_held = take_tokens(held, 5_000)
    nfit_s, nscore_s, _ = nltk_fit_score(Laplace, sub_train, sub_held)
    rfit_s, rscore_s = ralm_fit_score("laplace", train, held, fit_tries=1)
    scale_fit = n_train / ntok(sub_train)
    scale_score = n_pred / (ntok(sub_held) + len(sub_held))
    nltk_total = nfit_s * scale_fit + nscore_s * scale_score
    m.update(
        nltk_subset_train_tokens=ntok(sub_train),
        nltk_subset_heldout_tokens=ntok(sub_held),
        nltk_laplace3_fit_seconds_subset=nfit_s,
        nltk_laplace3_score_seconds_subset=nscore_s,
        nltk_laplace3_fit_score_seconds_extrapolated=nltk_total,
        ralm_laplace3_fit_score_seconds=rfit_s + rscore_s,
        speedup_vs_nltk_fit_score=nltk_total / (rfit_s + rscore_s),
        speedup_vs_nltk_fit=nfit_s * scale_fit / rfit_s,
        speedup_vs_nltk_score=nscore_s * scale_score / rscore_s,
    )
    print(f"nltk laplace (extrapolated) {nltk_total:.1f}s vs ralm {rfit_s + rscore_s:.2f}s")

    # ---- nltk KN vs ralm kn on one small subset, no extrapolation
    kn_train = take_tokens(train, 20_000)
    kn_held = take_tokens(held, 300)
    kfit_s, kscore_s2, _ = nltk_fit_score(KneserNeyInterpolated, kn_train, kn_held)
    rk_s, rks_s = ralm_fit_score("kn", kn_train, kn_held, fit_tries=3)
    m.update(
        nltk_kn3_subset_train_tokens=ntok(kn_train),
        nltk_kn3_subset_heldout_tokens=ntok(kn_held),
        nltk_kn3_fit_score_seconds_subset=kfit_s + kscore_s2,
        ralm_kn3_fit_score_seconds_subset=rk_s + rks_s,
        speedup_vs_nltk_kn_fit_score_subset=(kfit_s + kscore_s2) / (rk_s + rks_s),
    )
    print(f"nltk KN subset {kfit_s + kscore_s2:.1f}s vs ralm {rk_s + rks_s:.3f}s")

    m["load_average_1min_at_end"] = os.getloadavg()[0]
    metrics = {k: (round(v, 6) if isinstance(v, float) else v) for k, v in m.items()}
    write_result(
        "ngram_speed",
        command=script_command(__file__, ""),
        metrics=metrics,
        targets={
            "speedup_vs_nltk_fit_score": ">= 10",
            "max_abs_sentence_log10_diff_vs_kenlm": "<= 1e-4",
            "ralm_score_with_load_vs_kenlm_ratio": "<= 2.0",
            "arpa_write_share_of_train": "< 0.5",
        },
        holds={
            "ralm_score_with_load_vs_kenlm_ratio": m["ralm_score_with_load_vs_kenlm_ratio"] <= 2.0,
            "arpa_write_share_of_train": m["arpa_write_share_of_train"] < 0.5,
        },
        before=BEFORE,
        notes=(
            "speedup_vs_nltk_fit_score: nltk.lm Laplace trigram measured on a 100k-token training "
            "subset and 5k held-out tokens, extrapolated linearly to the full sizes, vs ralm laplace "
            "trigram measured on the full data. ralm_score_vs_kenlm_ratio = ralm held-out tokens/s "
            "(batch score_sentences on token lists) / kenlm tokens/s (Model.score per sentence "
            "string, Python loop), same ARPA file; > 1 means ralm is faster. The nltk KN comparison "
            "is one 20k-token subset, not extrapolated. ralm_score_with_load_vs_kenlm_ratio: "
            "NGramLM.from_arpa + score_sentences over kenlm.Model + Model.score per line, order-5 "
            "MKN ARPA file of the whole training text, interleaved, best of 5 each (lower is "
            "better). arpa_write_share_of_train: NGramLM.to_arpa seconds inside `ralm ngram train "
            "--order 5` run as a command (fresh interpreter, default tokenizer) over the command's "
            "seconds, median of 5 runs; *_in_process: the same through ralm.cli.main in this process. "
            "train_peak_rss: VmHWM of that command; marginal: the slope between the half and the "
            "whole training text. `before`: the same measurements of the previous code. Wall "
            "clock; the load averages show how busy the (shared) machine was."
        ),
    )
    print(f"wrote {RESULTS / 'ngram_speed.json'}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
