"""The generator of `ralm serve --generator` (the Ask page): its settings, and loading it onto a TARGET.

`attach_generator(t, AskConfig("smollm2"))` loads the LM once at start (`load_frozen_lm`) on the
TARGET's device and adds the Ask page; a TARGET without a corpus to retrieve from is refused in
one line (`no_corpus`), before anything loads. Answering a question is ralm.serve.ask.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from ralm.errors import RalmError
from ralm.rag.ask import MAX_K

__all__ = ["ASK_MODES", "MAX_NEW_TOKENS", "AskConfig", "Generator", "attach_generator", "no_corpus"]

ASK_MODES = ("rag", "replug", "closed-book")
MAX_NEW_TOKENS = 200  # the cap of --ask-max-new-tokens (as /api/generate's)


@dataclass(frozen=True)
class AskConfig:
    """The generator and its defaults (`ralm serve --generator ... --ask-k ... --ask-mode ...`)."""

    generator: str  # "smollm2", a causal LM directory or a .gguf file
    gguf_file: str | None = None  # the .gguf file inside the generator's directory, when it holds several
    k: int = 3  # passages per question, unless the request asks for another k
    mode: str = "rag"  # rag, replug or closed-book, unless the request asks for another mode
    max_new_tokens: int = 32  # tokens an answer may have
    autocast: str = "auto"  # bf16 compute where the device has it; "off": float32
    backend: str = "auto"  # where greedy decoding runs (ralm.frozen.backends)

    def __post_init__(self) -> None:
        if not 1 <= self.k <= MAX_K:
            raise RalmError(f"--ask-k {self.k}: choose 1 to {MAX_K} passages")
        if self.mode not in ASK_MODES:
            raise RalmError(f"--ask-mode {self.mode}: choose one of {', '.join(ASK_MODES)}")
        if not 1 <= self.max_new_tokens <= MAX_NEW_TOKENS:
            raise RalmError(f"--ask-max-new-tokens {self.max_new_tokens}: choose 1 to {MAX_NEW_TOKENS}")


@dataclass
class Generator:
    """A loaded generator (`lm`: a FrozenLM) and the defaults it was started with."""

    lm: Any
    config: AskConfig

    def info(self) -> dict[str, Any]:
        """/api/info's `generator`."""
        c = self.config
        return {
            "name": self.lm.name,
            "device": str(self.lm.device),
            "dtype": self.lm.dtype_name,
            "backend": self.lm.backend,
            "mode": c.mode,
            "k": c.k,
            "max_new_tokens": c.max_new_tokens,
        }


def attach_generator(t: Any, cfg: AskConfig, device: str | None = None) -> Any:
    """`t`: a ralm.serve.loaders.Target. Load `cfg.generator` on `device` (None: auto) and give `t` the Ask page; RalmError with one
    line for a TARGET without a corpus or a model that is not a causal LM."""
    if t.store is None or not t.retrievers:
        raise no_corpus(t.path)
    from ralm.frozen.lm import load_frozen_lm
    from ralm.serve.schemas import PAGES

    lm = load_frozen_lm(
        cfg.generator,
        gguf_file=cfg.gguf_file,
        device=device or "auto",
        autocast=cfg.autocast,
        backend=cfg.backend,
    )
    t.generator = Generator(lm, cfg)
    t.pages = [p for p in PAGES if p in t.pages or p == "ask"]
    return t


def no_corpus(path) -> RalmError:
    """The error for `--generator` with a TARGET that has no corpus to retrieve from."""
    return RalmError(
        f"{path}: --generator needs a corpus to retrieve from; serve a REALM run, an index directory "
        "or a DocStore with it"
    )
