"""ELMo character ids, as bilm-tf and allennlp compute them: every token spelled as 50 byte-level ids.

Raw ids: bytes 0-255 are the token's UTF-8 bytes; 256 = beginning-of-sentence char,
257 = end-of-sentence char, 258 = beginning-of-word, 259 = end-of-word, 260 = padding char.
A token becomes ``[258, b_1, ..., b_n, 259, 260, ...]`` with at most 48 bytes (truncation is
bytewise, so it may cut a multi-byte character, as the reference does). Every id is finally
shifted by +1 so that 0 can mean "no token here" (padding rows of a batch).
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import torch

MAX_CHARS_PER_TOKEN = 50
MAX_WORD_BYTES = MAX_CHARS_PER_TOKEN - 2  # room for begin- and end-of-word

BOS_CHAR = 256
EOS_CHAR = 257
BOW_CHAR = 258
EOW_CHAR = 259
PAD_CHAR = 260

BOS_TOKEN = "<S>"
EOS_TOKEN = "</S>"


def _special_token_ids(char: int) -> np.ndarray:
    ids = np.full(MAX_CHARS_PER_TOKEN, PAD_CHAR, dtype=np.int64)
    ids[0:3] = (BOW_CHAR, char, EOW_CHAR)
    return ids + 1


BOS_CHAR_IDS = _special_token_ids(BOS_CHAR)
EOS_CHAR_IDS = _special_token_ids(EOS_CHAR)


def token_to_char_ids(token: str) -> np.ndarray:
    """The 50 shifted character ids of one token, int64 array of shape (50,).

    ``"<S>"`` and ``"</S>"`` spell as the sentence-boundary tokens wherever they appear, so a
    literal boundary token embeds exactly like the one the model adds (as in the reference).
    """
    if token == BOS_TOKEN:
        return BOS_CHAR_IDS.copy()
    if token == EOS_TOKEN:
        return EOS_CHAR_IDS.copy()
    # "ignore" drops only code points UTF-8 cannot encode (lone surrogates), like the reference.
    word_bytes = token.encode("utf-8", "ignore")[:MAX_WORD_BYTES]
    ids = np.full(MAX_CHARS_PER_TOKEN, PAD_CHAR, dtype=np.int64)
    ids[0] = BOW_CHAR
    ids[1 : len(word_bytes) + 1] = np.frombuffer(word_bytes, dtype=np.uint8)
    ids[len(word_bytes) + 1] = EOW_CHAR
    return ids + 1


def batch_to_ids(sentences: Sequence[Sequence[str]]) -> torch.Tensor:
    """Character ids of a batch of tokenised sentences: LongTensor (B, T_max, 50).

    Rows are right-padded with all-zero tokens, which the model reads as padding (mask 0).
    No boundary tokens are added here; the biLM adds ``<S>``/``</S>`` itself.
    """
    if isinstance(sentences, str) or any(isinstance(s, str) for s in sentences):
        raise TypeError(
            "batch_to_ids expects a list of tokenised sentences (lists of str), got a str; "
            "split the text first, e.g. [line.split() for line in lines]"
        )
    max_len = max((len(s) for s in sentences), default=0)
    ids = np.zeros((len(sentences), max_len, MAX_CHARS_PER_TOKEN), dtype=np.int64)
    cache: dict[str, np.ndarray] = {}
    for b, sentence in enumerate(sentences):
        for t, token in enumerate(sentence):
            token_ids = cache.get(token)
            if token_ids is None:
                token_ids = cache[token] = token_to_char_ids(token)
            ids[b, t] = token_ids
    return torch.from_numpy(ids)
