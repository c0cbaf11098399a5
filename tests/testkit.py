"""Helpers shared by several test folders (tests/ is on sys.path through tests/conftest.py): `ralm` run
in-process, JSONL files, [[link]] markup and a small linked corpus, random filler text, quiet DocStore
builds and a tiny index, byte-level BPEs, tiny random BERTs and Llamas, a ChatML byte-level BPE, SUREALM
dialogues and a 1-step SUREALM run, the settings of a quiet CPU run and a process holding a writer lock."""

from __future__ import annotations

import contextlib
import json
import re

CHATML = (
    "{% for m in messages %}<|im_start|>{{ m['role'] }}\n{{ m['content'] }}<|im_end|>\n{% endfor %}"
    "{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}"
)


# The settings every training run of the tests shares: CPU, float32 (no autocast), no TensorBoard
CPU_RUN = dict(device="cpu", autocast="off", tensorboard=False)


@contextlib.contextmanager
def one_thread_of(get_threads, set_threads):
    """Runs its body with set_threads(1), then gives back the count get_threads() had before."""
    before = get_threads()
    set_threads(1)
    try:
        yield
    finally:
        set_threads(before)


def quiet(message) -> None:
    """A `log` that says nothing."""


def run_ralm(capsys, *argv):
    """`ralm ARGV` in this process: (exit code, stdout, stderr's lines)."""
    from ralm.cli import main

    code = main([str(a) for a in argv])
    cap = capsys.readouterr()
    return code, cap.out, cap.err.strip().splitlines()


def run_ralm_errors(capsys, *argv):
    """`ralm ARGV` in this process: (exit code, stdout, stderr's `ralm: error` lines)."""
    from ralm.cli import main

    code = main([str(a) for a in argv])
    cap = capsys.readouterr()
    return code, cap.out, [ln for ln in cap.err.splitlines() if ln.startswith("ralm: error")]


def cli_store_and_index(d, docs, tiny_dir, corpus_options=(), index_options=()):
    """`ralm corpus build` of the (title, text) pairs `docs` (d/docs.jsonl; tiny_dir's tokenizer, then
    `corpus_options`) into d/store and `ralm index build` of that (tiny_dir's encoder, then
    `index_options`) into d/index, both --quiet and asserted to succeed; returns d."""
    from ralm.cli import main

    write_jsonl(d / "docs.jsonl", [{"title": t, "text": x} for t, x in docs])
    corpus = ["corpus", "build", d / "docs.jsonl", "--out", d / "store", "--tokenizer", tiny_dir]
    assert main([str(a) for a in [*corpus, *corpus_options, "--quiet"]]) == 0
    index = ["index", "build", d / "store", "--out", d / "index", "--encoder", tiny_dir]
    assert main([str(a) for a in [*index, *index_options, "--quiet"]]) == 0
    return d


def write_jsonl(path, rows):
    """`rows` as JSON lines (UTF-8) at `path`; returns `path`."""
    path.write_text("".join(json.dumps(r) + "\n" for r in rows), encoding="utf-8")
    return path


def unlink(marked: str) -> tuple[str, list[dict]]:
    """Wiki markup "... [[x]] ..." -> the text with x in place of [[x]], and its link spans
    [{"start", "end", "target": x}]."""
    text, links, pos = "", [], 0
    for m in re.finditer(r"\[\[([^\]]+)\]\]", marked):
        text += marked[pos : m.start()]
        links.append({"start": len(text), "end": len(text) + len(m.group(1)), "target": m.group(1)})
        text += m.group(1)
        pos = m.end()
    return text + marked[pos:], links


# A small linked corpus: Nordic capitals and countries in wiki markup ([[target]] marks a link)
FACTS = [
    ("Oslo", "Oslo is the capital of [[Norway]]. It was founded in 1040 by [[Harald Hardrada]]."),
    ("Bergen", "Bergen is a city in [[Norway]] on the west coast. It was founded in 1070 by [[Olav Kyrre]]."),
    (
        "Norway",
        "Norway is a country in [[Scandinavia]]. Its capital is [[Oslo]] and its king is [[Harald V]].",
    ),
    ("Harald Hardrada", "Harald Hardrada was king of [[Norway]]. He died at [[Stamford Bridge]] in 1066."),
    ("Copenhagen", "Copenhagen is the capital of [[Denmark]]. It lies on the island of [[Zealand]]."),
    (
        "Denmark",
        "Denmark is a country in [[Scandinavia]]. Its capital is [[Copenhagen]] and its queen was [[Margrethe II]].",
    ),
    (
        "Stockholm",
        "Stockholm is the capital of [[Sweden]]. It lies where [[Lake Malaren]] meets the [[Baltic Sea]].",
    ),
    (
        "Sweden",
        "Sweden is a country in [[Scandinavia]]. Its capital is [[Stockholm]] and it borders [[Norway]].",
    ),
    ("Helsinki", "Helsinki is the capital of [[Finland]]. It was founded in 1550 by [[Gustav Vasa]]."),
    ("Finland", "Finland is a country east of [[Sweden]]. Its capital is [[Helsinki]]."),
    ("Reykjavik", "Reykjavik is the capital of [[Iceland]]. It was settled by [[Ingolfur Arnarson]] in 874."),
    ("Iceland", "Iceland is an island country in the North Atlantic. Its capital is [[Reykjavik]]."),
]


def linked_jsonl(path, facts=FACTS, links: bool = True):
    """(title, wiki markup) pairs as JSONL rows {"title", "text" (the unlinked text twice), "links"} at
    `path` (no link spans when not `links`); returns `path`."""
    rows = []
    for title, marked in facts:
        text, spans = unlink(marked)
        rows.append({"title": title, "text": (text + " ") * 2, "links": spans if links else []})
    return write_jsonl(path, rows)


WORDS = ["alpha", "beta", "gamma", "delta", "Oslo", "Norway", "king", "queen", "river", "mountain"]


def random_sentences(rng, words: tuple[int, int], sentences: tuple[int, int]) -> str:
    """Filler text: rng.integers(*sentences) capitalised sentences of rng.integers(*words) random WORDS each."""
    return " ".join(
        " ".join(rng.choice(WORDS, size=int(rng.integers(*words)))).capitalize() + "."
        for _ in range(int(rng.integers(*sentences)))
    )


def quiet_store(sources, out, chunk_size: int, tokenizer=None, **build):
    """The DocStore built from the files `sources` at `out`, without progress or log: chunks of
    `chunk_size` tokens of `tokenizer` (a model directory; None: the default), `build` adds to its
    BuildConfig. Returns the DocStore."""
    from ralm.corpus.build import BuildConfig, build_docstore

    if tokenizer is not None:
        build["tokenizer"] = str(tokenizer)
    return build_docstore(
        list(sources), out, BuildConfig(chunk_size=chunk_size, **build), progress=False, log=quiet
    )


def records_world_stores(root, config, tokenizer):
    """A records world (RecordsWorldConfig `config`) written to root/data, and its corpus, queries and
    heldout files as DocStores root/<name> (32-token chunks of `tokenizer`, no automatic annotation or
    dates); returns write_records_world's answer."""
    from ralm.worlds.records import write_records_world

    world = write_records_world(root / "data", config)
    for name in ("corpus", "queries", "heldout"):
        quiet_store(
            [root / "data" / f"{name}.jsonl"], root / name, 32, tokenizer, auto_annotate=False, dates=False
        )
    return world


def articles_store(articles, d):
    """A DocStore of (title, text) pairs in folder d (d/docs.jsonl, chunks of <= 32 MiniLM tokens): its root."""
    from ralm.corpus.build import BuildConfig, build_docstore

    src = write_jsonl(d / "docs.jsonl", [{"title": t, "text": x} for t, x in articles])
    return build_docstore([src], d / "store", BuildConfig(chunk_size=32), progress=False, log=quiet).root


def tiny_index(store, out, tiny_dir):
    """A dense (tiny random BERT, 32 tokens) + BM25 index directory `out` of the DocStore `store`."""
    from ralm.corpus.docstore import DocStore
    from ralm.retrieval.encoders import EncoderConfig
    from ralm.retrieval.index.build import build_index_dir

    build_index_dir(
        DocStore(store),
        out,
        encoder=str(tiny_dir),
        encoder_config=EncoderConfig(max_length=32),
        bm25=True,
        progress=False,
        log=quiet,
    )
    return out


def save_model(d, model, tokenizer):
    """`model` and its `tokenizer` saved as the HF model directory `d`; returns `d`."""
    model.save_pretrained(d)
    tokenizer.save_pretrained(d)
    return d


def tiny_bert_dir(d, minilm_dir, **config):
    """A random 2-layer BERT (hidden 64, 4 heads, 128 positions; seed 0) on the MiniLM vocabulary, saved
    with MiniLM's tokenizer files as the HF model directory `d`; `config` overrides its BertConfig."""
    import shutil

    import torch
    from transformers import BertConfig, BertModel

    torch.manual_seed(0)
    sizes = dict(hidden_size=64, num_hidden_layers=2, num_attention_heads=4, intermediate_size=128)
    cfg = BertConfig(**{"vocab_size": 30522, **sizes, "max_position_embeddings": 128, **config})
    BertModel(cfg, add_pooling_layer=False).save_pretrained(d)
    for f in ("vocab.txt", "tokenizer.json", "tokenizer_config.json", "special_tokens_map.json"):
        shutil.copy(minilm_dir / f, d / f)
    return d


# The sizes of the tests' tiny random decoders (Llama, Gemma 3)
TINY_DECODER = dict(
    hidden_size=32, intermediate_size=64, num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=2
)


def tiny_llama(tok, **config):
    """A random 2-layer Llama (TINY_DECODER; seed 0) for the tokenizer `tok`; `config` adds to or overrides
    its LlamaConfig."""
    import torch
    from transformers import LlamaConfig, LlamaForCausalLM

    torch.manual_seed(0)
    base = dict(vocab_size=len(tok), **TINY_DECODER, architectures=["LlamaForCausalLM"])
    return LlamaForCausalLM(LlamaConfig(**{**base, **config}))


def chat_config(tok) -> dict:
    """The config fields of a tiny decoder for a chat tokenizer `tok`: 512 positions, its EOS/PAD/BOS
    ids, tied embeddings."""
    return dict(
        max_position_embeddings=512,
        eos_token_id=tok.eos_token_id,
        pad_token_id=tok.pad_token_id,
        bos_token_id=tok.bos_token_id,
        tie_word_embeddings=True,
    )


def chat_llama(tok):
    """tiny_llama for a chat tokenizer (chat_config)."""
    return tiny_llama(tok, **chat_config(tok))


def cpu_frozen_lm(d):
    """The FrozenLM of the model directory `d` on the CPU in float32, torch on one thread."""
    import torch

    from ralm.frozen.lm import load_frozen_lm

    torch.set_num_threads(1)
    return load_frozen_lm(d, device="cpu", autocast="off")


def byte_bpe(text, vocab_size: int, special_tokens=()):
    """A byte-level BPE `tokenizers.Tokenizer` (no prefix space) trained on the strings `text` to
    `vocab_size` tokens, `special_tokens` first."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers

    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=vocab_size,
        special_tokens=list(special_tokens),
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
    )
    tok.train_from_iterator(text, trainer)
    return tok


def chatml_tokenizer(text):
    """A byte-level BPE (300 tokens) trained on `text`, with <|im_start|>/<|im_end|> and a ChatML
    template (SmolLM2's layout)."""
    from transformers import PreTrainedTokenizerFast

    return PreTrainedTokenizerFast(
        tokenizer_object=byte_bpe(text, 300, ["<|endoftext|>", "<|im_start|>", "<|im_end|>"]),
        eos_token="<|im_end|>",
        pad_token="<|im_end|>",
        bos_token="<|im_start|>",
        chat_template=CHATML,
    )


# Short dialogues of the SUREALM tests, three turns each
DIALOGUES = [
    ["i would like to book a room", "sure , for how many nights ?", "two nights please"],
    ["i would like to order a pizza", "what size would you like ?", "a large one please"],
    ["can i bring my dog to the hotel ?", "no , pets are not allowed", "ok thanks"],
    ["i want a table for two", "for what time ?", "seven in the evening please"],
    ["is there free wifi in the room ?", "yes , wifi is free", "great"],
    ["i need a taxi to the station", "when do you want to leave ?", "at noon please"],
    ["i would like to book a table", "how many people ?", "four people"],
    ["do you have a room with a view ?", "yes we do", "i will take it"],
    ["i would like a cup of tea", "milk or sugar ?", "just milk"],
    ["where is the train station ?", "it is two streets away", "thanks a lot"],
]


def dialogue_jsonl(path, dialogues=DIALOGUES):
    """The dialogues' turns as SUREALM JSONL rows {"text", "group": "d<dialogue number>"}."""
    return write_jsonl(path, [{"text": t, "group": f"d{i}"} for i, d in enumerate(dialogues) for t in d])


def train_tiny_surealm(datastore, out, tiny_dir):
    """A 1-step SUREALM run (tiny BERT as LM, K=3, batch 4, fp32 CPU) on `datastore`: its run folder."""
    from ralm.surealm.train import TrainConfig, train

    cfg = TrainConfig(
        datastore=str(datastore),
        out=str(out),
        lm=str(tiny_dir),
        k=3,
        steps=1,
        eval_every=1,
        batch_size=4,
        **CPU_RUN,
    )
    return train(cfg, progress=False)
