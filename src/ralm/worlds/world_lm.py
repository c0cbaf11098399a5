"""A small BERT with random weights over a controlled world's own vocabulary.

A world's words are invented syllables and a few template words, so a backbone over them needs about
1,300 WordPiece pieces rather than BERT's 30,522: its steps go to the world instead of a 30k-way output
layer, and it has nothing pre-trained to lose. `ralm surealm datastore --lm DIR` and `train --lm DIR`
run the directory as a causal LM (a fresh output layer tied to the word embeddings); tests and the
worlds' benchmarks build it with `write_world_lm`.
"""

from __future__ import annotations

import os
from pathlib import Path

from ralm.atomic import staged_dir, write_text_atomic

__all__ = ["write_world_lm"]


def write_world_lm(
    out: str | os.PathLike,
    vocab: list[str],
    hidden: int = 128,
    layers: int = 2,
    heads: int = 4,
    positions: int = 64,
    seed: int = 0,
) -> Path:
    """Write a BERT directory (config, safetensors weights, lower-casing WordPiece tokenizer over `vocab`)
    with `layers` layers of hidden size `hidden`, `heads` heads, feed-forward 4 x hidden and `positions`
    positions, its weights drawn under `seed`. An existing directory (its config.json there) is kept as
    it is; returns `out`."""
    import torch
    from transformers import BertConfig, BertModel, BertTokenizerFast

    out = Path(out)
    if (out / "config.json").is_file():
        return out
    generator_state = torch.random.get_rng_state()
    torch.manual_seed(seed)
    cfg = BertConfig(
        vocab_size=len(vocab),
        hidden_size=hidden,
        num_hidden_layers=layers,
        num_attention_heads=heads,
        intermediate_size=4 * hidden,
        max_position_embeddings=positions,
    )
    model = BertModel(cfg, add_pooling_layer=False)
    torch.random.set_rng_state(generator_state)
    with staged_dir(out) as tmp:  # a stopped write leaves no half directory at `out`
        write_text_atomic(tmp / "vocab.txt", "\n".join(vocab) + "\n")
        BertTokenizerFast(vocab=str(tmp / "vocab.txt"), do_lower_case=True).save_pretrained(tmp)
        model.save_pretrained(tmp)
    return out
