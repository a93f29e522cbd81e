"""Request and response bodies (pydantic): what /openapi.json publishes and what requests are checked against.

Unknown fields are ignored, as text-embeddings-inference and OpenAI clients send fields this server
does not use (``prompt_name``, ``user``, ...).
"""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, Field

Inputs = str | list[str]


class EmbedRequest(BaseModel):
    """TEI ``/embed``: one pooled vector per input."""

    inputs: Inputs = Field(description="a text or a list of texts; each is tokenised by the server's tokenizer")
    normalize: bool = Field(True, description="scale each vector to unit length (L2)")
    truncate: bool = Field(False, description="cut texts longer than max_input_tokens instead of refusing them (422)")
    layer: int = Field(-1, description="the layer to pool: 0 is the token layer, -1 (default) the top layer")
    pooling: Literal["mean"] = Field("mean", description="mean over the text's tokens (the only pooling)")


class EmbedAllRequest(BaseModel):
    """TEI ``/embed_all``: the vectors of every token of one layer."""

    inputs: Inputs
    truncate: bool = False
    layer: int = Field(-1, description="the layer: 0 is the token layer, -1 (default) the top layer")
    return_tokens: bool = Field(True, description="true: [{tokens, embeddings}] per input; false: TEI's bare "
                                "[[[float]]] (token vectors only)")


class TokenizeRequest(BaseModel):
    """TEI ``/tokenize``."""

    inputs: Inputs
    add_special_tokens: bool = Field(True, description="accepted for TEI clients; ELMo adds no special tokens")


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
    gamma: float = Field(1.0, description="the scale of the mix")
    truncate: bool = False


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
