"""The strong baseline's token input: pretrained static word vectors and a character CNN.

The baselines of Peters et al. (2018, Table 1) fed their task models ``x_k = [w_k; c_k]``:

* ``w_k`` a word embedding initialised from pretrained vectors (GloVe or SENNA): fine-tuned with the
  task in Lample et al.'s (2016) tagger, fixed in the BCN for SST (McCann et al. 2017). Both are
  offered: ``freeze=False`` trains every row, ``freeze=True`` keeps the table fixed (the vocabulary
  is then the table's words alone, unknown words share a zero row).
* ``c_k`` a character CNN with max-pooling over positions (Ma and Hovy 2016; the paper's NER
  baseline, TagLM, also reads characters): characters embedded, one convolution of width ``w`` with
  ``n`` filters, max over the token's windows, then tanh (our choice of nonlinearity). It is ``elmokit.nn.char_encoder``'s
  encoder (the biLM's) with one filter width, no highway and no projection, reading the same
  50-character ids (``elmokit.text.chars.batch_to_ids``: begin/end-of-word marks, padding).

Case: a vocabulary word's row is the table's row for the word as written, else for its lowercased
form, else a random row (normal, the table's standard deviation; PAD stays zero). With
``lowercase`` the task model lowercases its words, and a cased table's most frequent form of each
lowercased word gives the row. When fine-tuned, the table's words join the training words in the
vocabulary, so a test word unseen in training still has its pretrained row.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import torch
from torch import nn

from elmokit.nn.char_encoder import CharCNNEncoder

N_CHARACTERS = 262  # ``batch_to_ids``'s 261 character ids after the +1 shift, and 0 for padding tokens


def char_cnn(filters: int, width: int, dim: int) -> CharCNNEncoder:
    """(N, 50) character ids -> (N, filters): tanh(max over windows of conv_width(char_embedding))."""
    return CharCNNEncoder(n_characters=N_CHARACTERS, char_embedding_dim=dim, filters=[(width, filters)],
                          activation="tanh", n_highway=0, output_dim=filters, use_projection=False)


def encode_chars(encoder: CharCNNEncoder, char_ids: torch.Tensor) -> torch.Tensor:
    """char_ids (B, T, 50) -> (B, T, filters)."""
    batch, steps, width = char_ids.shape
    return encoder(char_ids.reshape(batch * steps, width)).reshape(batch, steps, -1)


def table_rows(table, lowercase: bool) -> dict[str, int]:
    """key -> table row, the key lowercased when ``lowercase`` (the first, most frequent, form wins)."""
    rows: dict[str, int] = {}
    for i, word in enumerate(table.words):
        rows.setdefault(word.lower() if lowercase else word, i)
    return rows


def row_of(word: str, rows: dict[str, int]) -> int | None:
    """The table row for ``word``: as written, else lowercased, else None."""
    found = rows.get(word)
    return rows.get(word.lower()) if found is None else found


def extend_vocabulary(words: Sequence[str], table, *, lowercase: bool, freeze: bool) -> list[str]:
    """``words`` (PAD, UNK first) with the table's words: added after them when fine-tuned; when
    frozen, only PAD, UNK and the table's words (a frozen random row would be noise)."""
    keys = list(table_rows(table, lowercase))
    if freeze:
        return list(words[:2]) + keys
    seen = set(words)
    return list(words) + [k for k in keys if k not in seen]


def initialise_embedding(embedding: nn.Embedding, words: Sequence[str], table, *, lowercase: bool,
                         freeze: bool, seed: int = 0) -> int:
    """Copy each word's pretrained vector into its row (rows 0-1: PAD and UNK, zero when frozen);
    other rows ~ N(0, std of the table). Returns how many rows came from the table."""
    if embedding.embedding_dim != table.dim:
        raise ValueError(f"embedding of dim {embedding.embedding_dim} for a table of dim {table.dim}")
    rows = table_rows(table, lowercase)
    vectors = np.asarray(table.vectors, dtype=np.float32)
    generator = np.random.default_rng(seed)
    weight = generator.normal(0.0, float(vectors.std()) or 1.0, size=(len(words), table.dim)).astype(np.float32)
    weight[0] = 0.0
    if freeze:
        weight[1] = 0.0
    found = 0
    for i, word in enumerate(words):
        row = row_of(word, rows) if i > 1 else None
        if row is not None:
            weight[i] = vectors[row]
            found += 1
    with torch.no_grad():
        embedding.weight.copy_(torch.from_numpy(weight))
    embedding.weight.requires_grad_(not freeze)
    return found

