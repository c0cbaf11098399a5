"""Helpers shared by several test folders (tests/ is on sys.path through tests/conftest.py): `ralm` run
in-process, JSONL files, [[link]] markup, a title/text DocStore and its tiny index, tiny random Llamas,
a ChatML byte-level BPE, SUREALM dialogues and a 1-step SUREALM run."""

from __future__ import annotations

import json
import re

CHATML = (
    "{% for m in messages %}<|im_start|>{{ m['role'] }}\n{{ m['content'] }}<|im_end|>\n{% endfor %}"
    "{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}"
)


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


def tiny_llama(tok, **config):
    """A random 2-layer Llama (hidden 32, 4 heads, 2 KV heads; seed 0) for the tokenizer `tok`;
    `config` adds to or overrides its LlamaConfig."""
    import torch
    from transformers import LlamaConfig, LlamaForCausalLM

    torch.manual_seed(0)
    base = dict(
        vocab_size=len(tok),
        hidden_size=32,
        intermediate_size=64,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=2,
        architectures=["LlamaForCausalLM"],
    )
    return LlamaForCausalLM(LlamaConfig(**{**base, **config}))


def chat_llama(tok):
    """tiny_llama for a ChatML tokenizer: 512 positions, its EOS/PAD/BOS ids, tied embeddings."""
    return tiny_llama(
        tok,
        max_position_embeddings=512,
        eos_token_id=tok.eos_token_id,
        pad_token_id=tok.pad_token_id,
        bos_token_id=tok.bos_token_id,
        tie_word_embeddings=True,
    )


def chatml_tokenizer(text):
    """A byte-level BPE (300 tokens) trained on `text`, with <|im_start|>/<|im_end|> and a ChatML
    template (SmolLM2's layout)."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
    from transformers import PreTrainedTokenizerFast

    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    tok.train_from_iterator(
        text,
        trainers.BpeTrainer(
            vocab_size=300,
            special_tokens=["<|endoftext|>", "<|im_start|>", "<|im_end|>"],
            initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        ),
    )
    return PreTrainedTokenizerFast(
        tokenizer_object=tok,
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
        device="cpu",
        autocast="off",
        tensorboard=False,
    )
    return train(cfg, progress=False)
