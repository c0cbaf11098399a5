"""The JSON API's request and response models, and the caps on what one request may ask for.

The models are what /openapi.json (and /docs) describe; the caps are pydantic constraints, so a
request over one gets a 422 whose one-line `error` names the cap (see `validation_line`).
Left out: pagination (k is capped instead) and streaming responses.
"""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field

MAX_QUERY_CHARS = 1000  # characters of a search query, a fill text or a generation prefix
MAX_K = 100  # results of one search / documents of one fill
MAX_TOP = 20  # alternatives listed per [MASK]
MAX_NEW_TOKENS = 200  # tokens one generation may add
MAX_BEAMS = 8  # beams (and returned sequences) of one generation
MAX_ENTRIES = 20  # data-store entries shown per retrieval step
MAX_ASK_K = 20  # passages one question may be given (ralm.rag.ask.MAX_K)

Retriever = Literal["dense", "bm25", "hybrid"]
AskMode = Literal["rag", "replug", "closed-book"]
PAGES = ("fill", "generate", "ask", "search", "corpus", "runs")  # in the order of the navigation bar


class Error(BaseModel):
    """Every error: one line saying what is wrong and what to do (`detail`: validation errors)."""

    error: str
    status: int
    detail: list[dict[str, Any]] | None = None


class Caps(BaseModel):
    query_chars: int = MAX_QUERY_CHARS
    k: int = MAX_K
    top: int = MAX_TOP
    max_new_tokens: int = MAX_NEW_TOKENS
    beams: int = MAX_BEAMS
    ask_k: int = MAX_ASK_K


class QueueState(BaseModel):
    """One model's batching queue."""

    waiting: int = Field(description="requests waiting for their batch now")
    running: int = Field(description="requests in the batch running now")
    batches: int = Field(description="batches run since the start")
    requests: int = Field(description="requests run in them")
    dropped: int = Field(description="requests taken out of the queue because their client left")
    rejected: int = Field(description="requests answered 503 (queue full)")
    batch_sizes: dict[str, int] = Field(description="batch size -> batches of that size")


class Batching(BaseModel):
    """How concurrent search and fill requests are batched per model (`ralm serve --max-batch ...`)."""

    enabled: bool = Field(description="False with max_batch 1 (one request at a time)")
    max_batch: int
    max_fill_batch: int = Field(
        description="fills per batch (4 on a CPU unless set, where fills are compute-bound)"
    )
    max_wait_ms: float = Field(description="how long the oldest request waits for more to batch with")
    max_queue: int = Field(description="waiting requests per model beyond which the answer is 503")
    queues: dict[str, QueueState] = Field(
        description="model (query tower: dense, hybrid, fill), bm25 and, with --generator, generator "
        "(Ask: one question at a time)"
    )


class GeneratorInfo(BaseModel):
    """The LM of the Ask page (`ralm serve --generator`) and its defaults."""

    name: str = Field(description="smollm2, or the model's directory or .gguf file")
    device: str
    dtype: str = Field(description="the compute dtype (bfloat16 under autocast)")
    backend: str = Field(description="where greedy decoding runs: torch, torch-int8 or llama.cpp")
    mode: AskMode = Field(description="the mode of a question that names none (--ask-mode)")
    k: int = Field(description="passages per question unless it asks for another k (--ask-k)")
    max_new_tokens: int = Field(description="tokens an answer may have (--ask-max-new-tokens)")


class Info(BaseModel):
    """What the server serves: the kind of TARGET, its pages and retrievers."""

    kind: Literal["realm", "surealm", "index", "docstore", "run"]
    target: str
    pages: list[str]
    retrievers: list[str]
    chunks: int | None = Field(None, description="chunks in the DocStore, when there is one")
    mask_token: str | None = Field(None, description="the token `fill` predicts, e.g. [MASK]")
    device: str
    threads: int = Field(description="torch intra-op threads of the inference calls")
    batching: Batching
    notes: list[str] = Field(default_factory=list, description="what was left out at start, and why")
    generator: GeneratorInfo | None = Field(None, description="Ask's LM; None without --generator")
    caps: Caps = Field(default_factory=Caps)
    version: str


# ----------------------------------------------------------------------------- search
class SearchHit(BaseModel):
    rank: int
    id: int
    score: float
    title: str
    text: str
    article: int
    position: int
    highlights: list[tuple[int, int]] = Field(
        description="[start, end) of the words matching a query term, in Unicode code points of `text`"
    )


class SearchResponse(BaseModel):
    query: str
    retriever: Retriever
    k: int
    terms: list[str] = Field(description="the query's terms after analysis (what is highlighted)")
    results: list[SearchHit]


# ----------------------------------------------------------------------------- fill
class FillRequest(BaseModel):
    model_config = ConfigDict(extra="forbid")

    text: str = Field(max_length=MAX_QUERY_CHARS, description="text with one or more [MASK] tokens")
    k: int | None = Field(
        None, ge=1, le=MAX_K, description="documents incl. the null one (default: the run's k)"
    )
    top: int = Field(5, ge=1, le=MAX_TOP, description="alternatives listed per mask")


class FillDoc(BaseModel):
    chunk_id: int = Field(description="-1 for the null document")
    title: str
    text: str
    p_z: float = Field(description="p(z|x)")
    prediction: list[str] = Field(
        description="the reader's argmax token at each mask given z (a causal reader: the span it generates)"
    )
    p_y: float = Field(description="p(y|z,x) of that prediction (product over the masks)")


class FillResponse(BaseModel):
    text: str
    prediction: list[str] = Field(
        description="the marginal prediction, one token per mask (a causal reader: one span per run of masks)"
    )
    p_y: float = Field(description="p(y|x) of the marginal prediction")
    alternatives: list[list[tuple[str, float]]] = Field(description="per mask: top tokens and p")
    docs: list[FillDoc] = Field(description="best p(z|x) first, the null document last")
    null_mass: float | None = Field(description="p(z|x) of the null document (None without one)")
    retrieval: bool = Field(description="False for an MLM-only run: the reader alone")


# ----------------------------------------------------------------------------- corpus
class Link(BaseModel):
    start: int
    end: int
    target: str


class Salient(BaseModel):
    start: int
    end: int
    token_start: int
    token_end: int
    source: str
    label: str


class Chunk(BaseModel):
    """A DocStore row (`DocStore.get`), as stored."""

    id: int
    article: int
    title: str
    position: int
    char_start: int
    char_end: int
    text: str
    input_ids: list[int]
    links: list[Link]
    salient: list[Salient]


class ChunkResponse(BaseModel):
    chunk: Chunk
    prev: int | None = Field(description="the previous chunk of the same article")
    next: int | None = Field(description="the next chunk of the same article")


class CorpusResponse(BaseModel):
    root: str
    chunks: int
    summary: str = Field(description="`ralm corpus info` as text")
    manifest: dict[str, Any]


# ----------------------------------------------------------------------------- generate
class GenerateRequest(BaseModel):
    model_config = ConfigDict(extra="forbid")

    prefix: str = Field(max_length=MAX_QUERY_CHARS, description="the start of the sentence")
    max_new_tokens: int = Field(20, ge=1, le=MAX_NEW_TOKENS)
    strategy: Literal["greedy", "top-p", "beam"] = "greedy"
    top_p: float = Field(0.9, gt=0.0, le=1.0)
    temperature: float = Field(1.0, gt=0.0, le=10.0)
    num_beams: int = Field(4, ge=1, le=MAX_BEAMS)
    num_return: int = Field(1, ge=1, le=MAX_BEAMS)
    seed: int = 0
    show_entries: int = Field(3, ge=1, le=MAX_ENTRIES, description="entries listed per retrieval")


class Continuation(BaseModel):
    text: str
    token_ids: list[int]


class RetrievedEntry(BaseModel):
    entry: int
    sentence_id: int
    sentence: str = Field(description="the training sentence the entry comes from")
    prefix: str = Field(description="its prefix w_1..w_{i-1} (the key)")
    word: str = Field(description="its current word w_i")
    suffix: str = Field(description="its suffix as stored (the value)")


class RetrievalStep(BaseModel):
    query: str = Field(description="the prefix the retrieval was made for")
    prefix_tokens: int
    entries: list[RetrievedEntry]


class GenerateResponse(BaseModel):
    prefix: str
    continuations: list[Continuation]
    retrieval: bool = Field(description="False for a --no-retrieval baseline (nothing is retrieved)")
    retrievals: list[RetrievalStep] = Field(description="every retrieval made, in order")


# ----------------------------------------------------------------------------- ask
class AskRequest(BaseModel):
    model_config = ConfigDict(extra="forbid")

    question: str = Field(max_length=MAX_QUERY_CHARS, description="the question")
    k: int | None = Field(
        None, ge=1, le=MAX_ASK_K, description="passages given to the LM (default: `ralm serve --ask-k`)"
    )
    mode: AskMode | None = Field(
        None,
        description="rag (the top-k passages in one prompt), replug (one prompt per passage, the "
        "next-token distributions mixed by retrieval score) or closed-book (no passages); "
        "default: `ralm serve --ask-mode`",
    )
    retriever: Retriever | None = Field(
        None, description="dense, bm25 or hybrid; default: the first TARGET offers (as /api/search)"
    )


class AskPassage(BaseModel):
    rank: int
    id: int = Field(description="the chunk id in the DocStore")
    score: float = Field(description="the retriever's score")
    title: str
    text: str
    url: str = Field(description="the chunk's page in the corpus browser")


class AskResponse(BaseModel):
    question: str = Field(description="the question as answered (whitespace stripped)")
    answer: str = Field(description="the generated answer (its first line)")
    mode: AskMode
    retriever: Retriever | None = Field(description="None in closed-book mode")
    passages: list[AskPassage] = Field(description="what the LM was given, in rank order")
    prompt: str = Field(description="the prompt as the LM saw it (the first passage's, for replug)")
    retrieve_seconds: float
    generate_seconds: float


# ----------------------------------------------------------------------------- runs
class RunStatus(BaseModel):
    state: Literal["training", "finished", "stopped", "no metrics"]
    step: int | None = Field(description="the last step logged")
    steps: int | None = Field(description="the steps the run is configured for")
    writer: str | None = Field(None, description="the process writing the run, while it trains")
    checkpoint: str | None = Field(None, description="the checkpoint (or model) this server loaded")


class MetricsResponse(BaseModel):
    offset: int = Field(description="index of the first row returned")
    total: int = Field(description="rows in metrics.jsonl now")
    reset: bool = Field(description="True when the file shrank (a resumed run): rows restart at 0")
    rows: list[dict[str, Any]]
    status: RunStatus


class ConfigResponse(BaseModel):
    kind: str
    config: dict[str, Any]
    status: RunStatus | None = None


def validation_line(errors: list[dict[str, Any]]) -> str:
    """One line for pydantic validation errors, naming the cap when a limit was exceeded.

    Example: [{"loc": ("query", "k"), "type": "less_than_equal", "ctx": {"le": 100}, "input": "500"}]
    -> "query parameter k=500 is over the cap of 100".
    """
    lines = []
    for e in errors:
        loc = [str(x) for x in e.get("loc", ())]
        where = loc[0] if loc else ""
        name = ".".join(loc[1:]) or where
        field = (
            f"query parameter {name}"
            if where == "query"
            else f"path parameter {name}"
            if where == "path"
            else name
        )
        ctx, typ, value = e.get("ctx") or {}, e.get("type", ""), e.get("input")
        if typ == "json_invalid":
            lines.append(f"malformed JSON body ({ctx.get('error', e.get('msg', ''))}); send a JSON object")
        elif typ == "string_too_long":
            n = len(value) if isinstance(value, str) else "too many"
            lines.append(f"{field} has {n} characters, over the cap of {ctx.get('max_length')}")
        elif typ == "less_than_equal":
            lines.append(f"{field}={value} is over the cap of {ctx.get('le')}")
        elif typ == "extra_forbidden":
            lines.append(f"unknown field {name!r}")
        else:
            lines.append(f"{field}: {e.get('msg', typ)}")
    return "; ".join(lines) or "invalid request"
