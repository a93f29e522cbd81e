"""Request and response bodies (pydantic): what /openapi.json publishes and what requests are checked against.

Unknown fields are ignored, as text-embeddings-inference and OpenAI clients send fields this server
does not use (``prompt_name``, ``user``, ...).
"""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, Field

Inputs = str | list[str]
TruncationDirection = Literal["Left", "Right", "left", "right"]


class EmbedRequest(BaseModel):
    """TEI ``/embed``: one pooled vector per input."""

    inputs: Inputs = Field(description="a text or a list of texts; each is tokenised by the server's tokenizer")
    normalize: bool = Field(True, description="scale each vector to unit length (L2)")
    truncate: bool = Field(False, description="cut texts longer than max_input_tokens instead of refusing them (422)")
    layer: int = Field(-1, description="the layer to pool: 0 is the token layer, -1 (default) the top layer")
    pooling: Literal["mean"] = Field("mean", description="mean over the text's tokens (the only pooling)")
    truncation_direction: TruncationDirection = Field("Right", description="with truncate: keep the first tokens "
                                                      "(Right, cut at the end) or the last (Left)")
    dimensions: int | None = Field(None, description="must equal the model's dim if given (no Matryoshka shortening: 422)")
    prompt_name: str | None = Field(None, description="the model has no prompts: any name is a 422, as TEI answers")


class EmbedAllRequest(BaseModel):
    """TEI ``/embed_all``: the vectors of every token of one layer."""

    inputs: Inputs
    truncate: bool = False
    truncation_direction: TruncationDirection = "Right"
    layer: int = Field(-1, description="the layer: 0 is the token layer, -1 (default) the top layer")
    prompt_name: str | None = Field(None, description="the model has no prompts: any name is a 422, as TEI answers")
    return_tokens: bool = Field(False, description="false (default): TEI's bare [[[float]]]; true: "
                                "[{tokens, embeddings}] per input")


class TokenizeRequest(BaseModel):
    """TEI ``/tokenize``."""

    inputs: Inputs
    add_special_tokens: bool = Field(True, description="accepted for TEI clients; ELMo adds no special tokens")
    prompt_name: str | None = Field(None, description="the model has no prompts: any name is a 422, as TEI answers")


class OpenAIEmbeddingRequest(BaseModel):
    """OpenAI ``/v1/embeddings``: unit-length mean of the top layer per input."""

    input: Inputs | list[int] | list[list[int]] = Field(description="a text or a list of texts (token id arrays "
                                                        "are not supported: ELMo reads characters)")
    model: str | None = Field(None, description="any value; the response names the served model")
    encoding_format: Literal["float", "base64"] = Field("float", description="base64: little-endian float32 bytes")
    dimensions: int | None = Field(None, description="must equal the model's dim if given (no shortening)")
    user: str | None = None


class ElmoRequest(BaseModel):
    """elmokit's ``/v1/elmo``: per-layer, per-token vectors, a layer selection or a scalar mix."""

    inputs: Inputs | None = Field(None, description="raw text, tokenised by the server (give this or tokens)")
    tokens: list[list[str]] | None = Field(None, description="already tokenised sentences (give this or inputs)")
    layers: list[int] | None = Field(None, description="the layers to return (default all; -1 is the top)")
    mix: list[float] | None = Field(None, description="scalar-mix weights w, one per layer: returns "
                                    "gamma * sum_j softmax(w)_j * h_j (Peters et al. 2018, eq. 1)")
    gamma: float = Field(1.0, description="the scale of the mix (a finite float32)")
    truncate: bool = False
    truncation_direction: TruncationDirection = "Right"
    initial_state: Literal["zero", "warm"] | None = Field(
        None, description="where every sentence's LSTM state starts: zero, or the model's warm state "
        "(elmokit.warm_state); default: the server's --initial-state. /v1/explorer lists those this server accepts")


class OpenAIModel(BaseModel):
    id: str
    object: Literal["model"] = "model"
    created: int
    owned_by: str


class OpenAIModelList(BaseModel):
    object: Literal["list"] = "list"
    data: list[OpenAIModel]


class TokenInfo(BaseModel):
    text: str
    start: int = Field(description="character offset of the token in the text")
    stop: int = Field(description="character offset just after the token")
    special: bool = False


class TokensAndEmbeddings(BaseModel):
    tokens: list[str]
    embeddings: list[list[float]]


class OpenAIEmbedding(BaseModel):
    object: Literal["embedding"] = "embedding"
    index: int
    embedding: list[float] | str


class OpenAIUsage(BaseModel):
    prompt_tokens: int
    total_tokens: int


class OpenAIEmbeddingResponse(BaseModel):
    object: Literal["list"] = "list"
    data: list[OpenAIEmbedding]
    model: str
    usage: OpenAIUsage


class ElmoItem(BaseModel):
    index: int
    tokens: list[str]
    layers: list[list[list[float]]] | None = Field(None, description="(selected layers, tokens, dim)")
    mixed: list[list[float]] | None = Field(None, description="(tokens, dim), with mix")


class ElmoResponse(BaseModel):
    model: str
    num_layers: int
    dim: int
    initial_state: str | None
    layers: list[int] | None = Field(description="the layers returned (absent with mix)")
    mix_weights: list[float] | None = Field(description="softmax(w) used (with mix)")
    gamma: float | None
    data: list[ElmoItem]


class TEIError(BaseModel):
    error: str
    error_type: str


class OpenAIErrorBody(BaseModel):
    message: str
    type: str
    param: str | None
    code: str | None


class OpenAIError(BaseModel):
    error: OpenAIErrorBody


# ---- the explorer page's routes (/v1/explorer/...) ---------------------------------------------------


class ExplorerNeighborsRequest(BaseModel):
    """Per layer, each word's nearest occurrences in the server's ``--index`` (Peters et al. 2018, Table 4)."""

    inputs: str | None = Field(None, description="the sentence as text, tokenised by the server (or give tokens)")
    tokens: list[str] | None = Field(None, description="the sentence already tokenised (or give inputs)")
    positions: list[int] | None = Field(None, description="the words to look up (0-based; default every word)")
    layers: list[int] | None = Field(None, description="the layers to search (default all; -1 is the top)")
    top: int = Field(5, ge=1, le=50, description="occurrences per word and layer")
    same_form: bool = Field(False, description="only occurrences of the same word form")
    window: int = Field(8, ge=0, le=50, description="tokens of context shown either side of each occurrence")


class ExplorerHit(BaseModel):
    score: float = Field(description="cosine of the query word's vector and the occurrence's")
    sentence: int = Field(description="the index's sentence number")
    token: int = Field(description="the occurrence's position in that sentence")
    left: str
    word: str
    right: str
    cut_left: bool
    cut_right: bool


class ExplorerWordHits(BaseModel):
    position: int
    word: str
    neighbors: list[ExplorerHit]


class ExplorerLayerHits(BaseModel):
    layer: int
    words: list[ExplorerWordHits]


class ExplorerNeighborsResponse(BaseModel):
    model: str
    tokens: list[str]
    top: int
    layers: list[ExplorerLayerHits]


class ExplorerSimilarityRequest(BaseModel):
    """Token-by-token cosine similarity of two sentences, per layer."""

    a: str | list[str] = Field(description="the first sentence: text, or a list of tokens")
    b: str | list[str] = Field(description="the second sentence: text, or a list of tokens")
    layers: list[int] | None = Field(None, description="the layers (default all; -1 is the top)")


class ExplorerSimilarityResponse(BaseModel):
    model: str
    tokens_a: list[str]
    tokens_b: list[str]
    layers: list[int]
    cosine: list[list[list[float]]] = Field(description="(layers, tokens of a, tokens of b)")


class ExplorerProjectionRequest(BaseModel):
    """A word's occurrences in the index, on their first two principal components, coloured by k-means."""

    word: str | None = Field(None, description="the word form to look up (default: the word at `position` of inputs)")
    layer: int = Field(-1, description="the layer (-1: top)")
    clusters: int = Field(2, ge=1, le=8, description="k of k-means (fewer when there are fewer distinct points)")
    seed: int = Field(0, ge=0, description="the k-means++ seed")
    max_points: int = Field(1000, ge=2, le=5000, description="at most this many occurrences (the first in corpus order)")
    window: int = Field(6, ge=0, le=50, description="tokens of context either side, for each point's label")
    inputs: str | None = Field(None, description="a sentence to place among the occurrences (optional)")
    tokens: list[str] | None = Field(None, description="the same, already tokenised")
    position: int | None = Field(None, description="the word's position in that sentence")


class ExplorerPoint(BaseModel):
    x: float
    y: float
    cluster: int
    sentence: int
    token: int
    left: str
    word: str
    right: str


class ExplorerQueryPoint(BaseModel):
    x: float
    y: float
    cluster: int
    tokens: list[str]
    position: int


class ExplorerProjectionResponse(BaseModel):
    model: str
    word: str
    layer: int
    n_occurrences: int = Field(description="occurrences of the word in the index")
    truncated: bool = Field(description="more occurrences than max_points: only the first are shown")
    clusters: int = Field(description="the k used")
    explained_variance: list[float] = Field(description="variance ratio of the two axes")
    points: list[ExplorerPoint]
    query: ExplorerQueryPoint | None


class ExplorerMix(BaseModel):
    name: str = Field(description="input (ELMo at the task model's input) or output")
    parameter: str
    layers: list[int] = Field(description="the representation's layers this mix weighs")
    w: list[float] = Field(description="the learned pre-softmax weights")
    softmax_w: list[float] = Field(description="softmax(w): eq. 1's s_j")
    gamma: float


class ExplorerTaskModel(BaseModel):
    name: str
    kind: Literal["tagger", "classifier"]
    representation: str
    elmo_layers: int
    elmo_mode: str
    mixes: list[ExplorerMix]


class ExplorerLayerWeightsResponse(BaseModel):
    num_layers: int = Field(description="the served model's layers")
    task_models: list[ExplorerTaskModel]


class ExplorerIndexInfo(BaseModel):
    representation: str
    n_sentences: int
    n_tokens: int
    num_layers: int
    dim: int
    dtype: str


class ExplorerInfo(BaseModel):
    model: str
    num_layers: int
    dim: int
    tokenizer: str
    index: ExplorerIndexInfo | None = Field(description="the --index (null: none was given)")
    task_models: list[str] = Field(description="the --task-model names")
    initial_states: list[str] = Field(description="the initial states /v1/elmo accepts per request")
    api_key_required: bool
