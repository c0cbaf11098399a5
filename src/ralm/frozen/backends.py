"""Inference backends for greedy decoding with a frozen causal LM: the PyTorch reference and the
faster CPU paths, chosen by name (`--backend` on `ralm serve`, `ralm rag ask` and `ralm rag eval`;
`load_frozen_lm(..., backend=)` in Python).

* "torch": Hugging Face `generate` in PyTorch, float32 (bf16 only where one-row products measure
  faster, `ralm.models.precision`). The reference every other backend is checked against.
* "torch-int8": the same `generate` on a copy of the model whose `nn.Linear` layers PyTorch
  quantises dynamically to int8 (weights per tensor, activations per batch; fbgemm/oneDNN kernels).
  No install, any architecture; ~1.4x the float32 speed for Gemma-3-270M on 2 cores.
* "llama.cpp": llama-cpp-python over a GGUF file, one prompt at a time with its KV cache. The
  model's own GGUF (the named LMs and .gguf specs), or the GGUF `ralm convert-gguf` wrote for a
  Hugging Face directory (`ralm.frozen.to_gguf`, cached beside it with the source's fingerprint).
  The same token ids as the torch path's tokenizer: transformers builds that tokenizer from the
  GGUF's own vocabulary.
* "auto": torch on CUDA; on a CPU llama.cpp where llama-cpp-python is installed and the model has
  a GGUF, else torch, with a one-line note saying why. Under "auto" llama.cpp decodes one prompt at
  a time (Ask) and a batch of prompts (`ralm rag eval`) stays in torch, whose batched `generate`
  answered NorQuAD questions faster on 2 cores than llama.cpp one by one
  (`benchmarks/results/ask_latency.json`). torch-int8 is never chosen by "auto": it broke
  Gemma-3-270M's answers there (F1 1.05 against float32's 14.76).

Only greedy decoding goes through a backend; scoring (`FrozenLM.score`) and REPLUG's mixed
decoding (`ralm.rag.generate.replug`) stay in PyTorch, which needs every step's distribution.
"""

from __future__ import annotations

import atexit
import copy
import sys
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any, Protocol

from ralm.errors import RalmError

__all__ = [
    "BACKENDS",
    "DEFAULT_BACKEND",
    "Decoder",
    "LlamaCppDecoder",
    "TorchInt8Decoder",
    "check_backend",
    "llama_cpp_installed",
    "open_decoder",
]

BACKENDS = ("auto", "torch", "torch-int8", "llama.cpp")
# the default of `--backend` and `--generator-backend`; `load_frozen_lm` keeps "torch", the reference,
# so that a library call gives the same tokens on every machine unless a backend is asked for
DEFAULT_BACKEND = "auto"
LLAMA_CPP_INSTALL = "`make setup-fast` (pip install llama-cpp-python: it compiles llama.cpp, 5 to 16 min)"


class Decoder(Protocol):
    """What a backend that decodes itself gives `ralm.rag.generate.greedy`: new ids per prompt,
    stop token excluded; a row may stop early once `done(its new ids)` holds (None: never). A
    backend that runs PyTorch's decoding on another model (torch-int8) has `torch_lm` instead."""

    name: str

    def greedy(
        self,
        prompts: Sequence[Sequence[int]],
        max_new_tokens: int,
        stop_ids: Sequence[int],
        done: Callable[[Sequence[int]], bool] | None = None,
    ) -> list[list[int]]: ...


def check_backend(backend: str) -> None:
    """RalmError with one line for a backend name ralm does not know."""
    if backend not in BACKENDS:
        raise RalmError(f"--backend {backend}: choose one of {', '.join(BACKENDS)}")


def llama_cpp_installed() -> bool:
    """Whether llama-cpp-python can be imported (without importing it)."""
    import importlib.util

    return importlib.util.find_spec("llama_cpp") is not None


class LlamaCppDecoder:
    """Greedy decoding in llama.cpp over `gguf` (`n_ctx` positions, `threads` CPU threads; default:
    torch's, which `--threads` and OMP_NUM_THREADS set)."""

    name = "llama.cpp"

    def __init__(
        self, gguf: Path, *, n_ctx: int = 2048, threads: int | None = None, batches_in_torch: bool = False
    ) -> None:
        try:
            import llama_cpp
        except ImportError:
            raise RalmError(
                f"backend llama.cpp: llama-cpp-python is not installed; {LLAMA_CPP_INSTALL}"
            ) from None
        import torch

        n = threads or torch.get_num_threads()  # torch's threads: `--threads` and OMP_NUM_THREADS alike
        try:
            self.llm = llama_cpp.Llama(
                model_path=str(gguf),
                n_ctx=n_ctx,
                n_batch=512,
                n_threads=n,
                n_threads_batch=n,
                verbose=False,
            )
        except (ValueError, RuntimeError) as exc:
            raise RalmError(
                f"backend llama.cpp: {gguf} does not load in llama.cpp ({str(exc).strip()[:120]}); "
                "choose --backend torch"
            ) from None
        atexit.register(self.llm.close)  # freed before the interpreter tears llama_cpp down
        self.gguf = Path(gguf)
        self.n_ctx = n_ctx
        # "auto": a batch of several prompts decodes in torch (batched generate is faster there)
        self.batches_in_torch = batches_in_torch

    def greedy(
        self,
        prompts: Sequence[Sequence[int]],
        max_new_tokens: int,
        stop_ids: Sequence[int],
        done: Callable[[Sequence[int]], bool] | None = None,
    ) -> list[list[int]]:
        stop = set(int(t) for t in stop_ids)
        out: list[list[int]] = []
        for p in prompts:
            if len(p) + max_new_tokens > self.n_ctx:
                raise RalmError(
                    f"a prompt of {len(p)} tokens plus {max_new_tokens} new exceeds llama.cpp's {self.n_ctx}"
                )
            ids: list[int] = []
            if max_new_tokens > 0:
                gen = self.llm.generate(
                    list(p), top_k=1, top_p=1.0, min_p=0.0, temp=0.0, repeat_penalty=1.0, reset=True
                )
                for t in gen:
                    if t in stop:
                        break
                    ids.append(int(t))
                    if len(ids) >= max_new_tokens or (done is not None and done(ids)):
                        break
            out.append(ids)
        return out


class TorchInt8Decoder:
    """A dynamically int8-quantised copy of `lm`'s model for PyTorch's own greedy decoding: it
    does not decode itself but hands `ralm.rag.generate.greedy` the FrozenLM to run (`torch_lm`)."""

    name = "torch-int8"

    def __init__(self, lm: Any) -> None:
        import warnings

        import torch
        from torch.ao.quantization import quantize_dynamic

        if lm.device.type != "cpu":
            raise RalmError(f"backend torch-int8 runs on a CPU, not {lm.device}; choose --backend torch")
        with warnings.catch_warnings():  # torch.ao's eager quantisation announces its move to torchao
            warnings.simplefilter("ignore")
            q = quantize_dynamic(copy.deepcopy(lm.model), {torch.nn.Linear}, dtype=torch.qint8)
        self.torch_lm = type(lm)(q, lm.tokenizer, name=lm.name, device="cpu", autocast="off")  # a FrozenLM


def open_decoder(backend: str, lm: Any, gguf: Path | None, *, note=None) -> Decoder | None:
    """The decoder of `backend` for the FrozenLM `lm` (None: the torch path itself). `gguf`: the
    model's GGUF file, if it has one. `note(line)` hears why "auto" fell back to torch (default:
    stderr). RalmError with one line for a backend that is not installed or cannot load the model."""
    check_backend(backend)
    say = note or print_note
    if backend == "auto":
        if lm.device.type != "cpu":
            return None
        if not llama_cpp_installed():
            say(
                f"backend auto: torch (llama-cpp-python is not installed; {LLAMA_CPP_INSTALL} for faster answers on a CPU)"
            )
            return None
        if gguf is None:
            say(f"backend auto: torch ({lm.name} has no GGUF file; `ralm convert-gguf {lm.name}` writes one)")
            return None
        try:
            return LlamaCppDecoder(gguf, n_ctx=_context(lm), batches_in_torch=True)
        except RalmError as exc:
            say(f"backend auto: torch ({exc})")
            return None
    if backend == "torch":
        return None
    if backend == "torch-int8":
        return TorchInt8Decoder(lm)
    if lm.device.type != "cpu":
        raise RalmError(
            f"backend llama.cpp: ralm runs it on the CPU, not {lm.device}; choose --backend torch"
        )
    if gguf is None:
        raise RalmError(
            f"backend llama.cpp: {lm.name} has no GGUF file; run `ralm convert-gguf {lm.name}` first, "
            "or choose --backend torch"
        )
    return LlamaCppDecoder(gguf, n_ctx=_context(lm))


def print_note(line: str) -> None:
    """A note on stderr (the default `note` of `open_decoder`)."""
    print(line, file=sys.stderr)


def _context(lm: Any) -> int:
    """llama.cpp's context: the model's positions, at most 4096 (a RAG prompt's budget is less)."""
    return int(min(lm.max_positions or 2048, 4096))
