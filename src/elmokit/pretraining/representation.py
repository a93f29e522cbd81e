"""Any transformers model folder as an elmokit ``Representation``: one vector per word per layer.

Spec: ``{"kind": "transformer", "path": DIR}`` (optionally ``"pooling": "first" | "mean" | "last"``). DIR
holds a model saved by transformers' ``save_pretrained`` (ours, or any local checkpoint such as a
``bert-base-cased`` on disk) and its fast tokenizer. The model is loaded with ``AutoModel`` (the bare
encoder or decoder: pretraining heads are not needed and are dropped), in eval mode, float32.

Layers. ``num_layers`` = 1 + the number of blocks: the embedding output and every block's output, as
the library returns them with ``output_hidden_states=True`` (for GPT-2 the last one has the final
LayerNorm applied, as transformers does). An encoder-decoder (BART, our MASS) is read through its
encoder alone: the encoder's embedding output and blocks (MASS's decoder sees only the masked fragment).

Words. A sentence is a list of words; each is split into subword pieces by the folder's tokenizer
(``encode_words``, with the template's specials, as the model was trained), the model runs, and the
vectors of a word's pieces are pooled into the word's vector. The default is the *mean* of the pieces:
every piece contributes, it does not favour one end of the word (for a left-to-right GPT the first
piece has not seen the rest of the word, the last piece of a BERT word is often a bare suffix), and it
is what probing studies commonly use (e.g. Hewitt & Manning 2019). ``first`` is BERT's choice for
tagging (Devlin et al. 2019, §5.3); ``last`` suits left-to-right models. The specials' vectors are
dropped.

Batch invariance (a batch embeds exactly like its sentences one by one, as elmokit's biLM does). Padding a
sentence to a batch's length, even with the attention mask, changes its vectors in the last bits
(other matrix shapes take other kernel paths); on CPU even unpadded sentences of equal length batched
together differ from one at a time in the last bits at small widths. So by default
(``batch_size=1``) every sentence runs alone: bit-identical whatever else is embedded with it.
``batch_size > 1`` groups sentences of the same subword length (no padding) for speed, equal to the
default within float rounding (~1e-6), not bit for bit.

Length. A sentence with more pieces than the model has positions is embedded in overlapping windows
of whole words, each run alone with the template's specials: a window holds as many words as fit,
the next one starts half-way through it, and each word takes its vectors from the window in which it
has the most context on its poorer side, ``min(words before, words after)`` (the "maximum context"
rule of BERT's SQuAD code; ties go to the earlier window). So every word but the sentence's first and
last few sees at least a quarter of a window on each side, and the result does not depend on what
else is in the batch. A single word with more pieces than a window holds raises ValueError naming it.
"""

from __future__ import annotations

import hashlib
import json
import os
from collections.abc import Sequence
from pathlib import Path

import numpy as np
import torch

from elmokit.errors import InputNotFound
from elmokit.formats.checks import refuse_non_finite_read
from elmokit.formats.embedding_hdf5 import embed_file
from elmokit.text.subword_tokenizers import WordEncoding, encode_words

POOLINGS = ("first", "mean", "last")


def _max_pieces(config) -> int | None:
    positions = getattr(config, "max_position_embeddings", None)
    if positions is None or positions < 1:  # XLNet: relative positions, no limit (its config says -1)
        return None
    if getattr(config, "model_type", "") in ("roberta", "xlm-roberta", "camembert"):  # positions start at pad + 1
        positions -= (config.pad_token_id or 0) + 1
    return int(positions)


class TransformerRepresentation:
    """Word vectors (num_layers, n_words, dim) from a transformers model (see the module docstring)."""

    kind = "transformer"

    def __init__(self, model, tokenizer, *, name: str = "transformer", pooling: str = "mean", batch_size: int = 1,
                 files_digest: str = "") -> None:
        if pooling not in POOLINGS:
            raise ValueError(f"pooling {pooling!r}: use one of {', '.join(POOLINGS)}")
        if batch_size < 1:
            raise ValueError(f"batch_size must be >= 1, got {batch_size}")
        self.model = model.eval().float()
        for parameter in self.model.parameters():
            parameter.requires_grad_(False)
        self.tokenizer = tokenizer
        self.name = name
        self.pooling = pooling
        self.batch_size = batch_size
        self.num_layers = int(model.config.num_hidden_layers) + 1
        self.dim = int(model.config.hidden_size)
        self.max_pieces = _max_pieces(model.config)
        # an encoder-decoder's vectors are its encoder's (module docstring)
        self._encoder = model.get_encoder() if getattr(model.config, "is_encoder_decoder", False) else model
        self._files_digest = files_digest
        self._fingerprint: str | None = None

    @classmethod
    def load(cls, path: str | os.PathLike, *, pooling: str = "mean", batch_size: int = 1) -> TransformerRepresentation:
        from transformers import AutoModel, AutoTokenizer
        from transformers.utils import logging as hf_logging

        folder = Path(path)
        if not (folder / "config.json").is_file():
            raise InputNotFound(f"{folder}: not a transformers model folder (no config.json); save one with "
                                "model.save_pretrained(DIR) and tokenizer.save_pretrained(DIR)")
        verbosity = hf_logging.get_verbosity()
        hf_logging.set_verbosity_error()  # the dropped pretraining heads are expected, not news
        try:
            model = AutoModel.from_pretrained(str(folder), dtype=torch.float32)
            tokenizer = AutoTokenizer.from_pretrained(str(folder))
        finally:
            hf_logging.set_verbosity(verbosity)
        refuse_non_finite_read(model.state_dict(), folder / "model.safetensors")
        if not getattr(tokenizer, "is_fast", False):
            raise ValueError(f"{folder}: the tokenizer is not a fast (tokenizers) one; word alignment needs it")
        digest = hashlib.sha256()
        for name in ("tokenizer.json", "tokenizer_config.json", "special_tokens_map.json"):
            if (folder / name).is_file():
                digest.update(name.encode() + (folder / name).read_bytes())
        return cls(model, tokenizer, name=f"transformer:{folder.name}", pooling=pooling, batch_size=batch_size,
                   files_digest=digest.hexdigest())

    @property
    def fingerprint(self) -> str:
        """Changes whenever the outputs could: config, weights, tokenizer, pooling."""
        if self._fingerprint is None:
            digest = hashlib.sha256(json.dumps(self.model.config.to_dict(), sort_keys=True, default=str).encode())
            for name, tensor in sorted(self.model.state_dict().items()):
                digest.update(name.encode())
                digest.update(tensor.detach().contiguous().cpu().numpy().tobytes())
            digest.update(self._files_digest.encode())
            digest.update(self.tokenizer.backend_tokenizer.to_str().encode())
            digest.update(f"pooling={self.pooling}".encode())
            self._fingerprint = f"{self.name}:{digest.hexdigest()[:16]}"
        return self._fingerprint

    def encode(self, words: Sequence[str]) -> WordEncoding:
        return encode_words(self.tokenizer, words)

    @torch.inference_mode()
    def _hidden(self, input_ids: list[list[int]]) -> np.ndarray:
        """(B, L+1, T, H) for sequences of one length T."""
        ids = torch.tensor(input_ids, dtype=torch.long)
        out = self._encoder(input_ids=ids, attention_mask=torch.ones_like(ids), output_hidden_states=True)
        return torch.stack(out.hidden_states, dim=1).numpy()

    def _pool(self, hidden: np.ndarray, encoding: WordEncoding) -> np.ndarray:
        """hidden (L+1, T, H) -> (L+1, n_words, H)."""
        if self.pooling == "first":
            return np.ascontiguousarray(hidden[:, [p[0] for p in encoding.pieces]])
        if self.pooling == "last":
            return np.ascontiguousarray(hidden[:, [p[-1] for p in encoding.pieces]])
        return np.stack([hidden[:, p[0]: p[-1] + 1].mean(axis=1) for p in encoding.pieces], axis=1)

    def embed(self, sentences: Sequence[Sequence[str]]) -> list[np.ndarray]:
        """One float32 array (num_layers, n_words, dim) per sentence, in the order given."""
        if isinstance(sentences, str) or any(isinstance(s, str) for s in sentences):
            raise TypeError("embed expects tokenised sentences (lists of str); use sentence.split()")
        results: list[np.ndarray | None] = [None] * len(sentences)
        encodings: dict[int, WordEncoding] = {}
        for i, words in enumerate(sentences):
            if len(words) == 0:
                results[i] = np.zeros((self.num_layers, 0, self.dim), dtype=np.float32)
                continue
            encoding = self.encode(words)
            if self.max_pieces is not None and len(encoding.input_ids) > self.max_pieces:
                results[i] = self._embed_in_windows(i, words, encoding)
                continue
            encodings[i] = encoding
        if self.batch_size == 1:
            groups = [[i] for i in encodings]
        else:
            by_length: dict[int, list[int]] = {}
            for i, encoding in encodings.items():
                by_length.setdefault(len(encoding.input_ids), []).append(i)
            groups = [g[s: s + self.batch_size] for g in by_length.values() for s in range(0, len(g), self.batch_size)]
        for group in groups:
            hidden = self._hidden([encodings[i].input_ids for i in group])
            for b, i in enumerate(group):
                results[i] = self._pool(hidden[b], encodings[i]).astype(np.float32, copy=False)
        return results  # type: ignore[return-value]

    def windows(self, index: int, encoding: WordEncoding) -> list[tuple[int, int]]:
        """The overlapping word windows ``[(start, end), ...]`` of a sentence too long for the model."""
        specials = sum(encoding.special_mask)
        capacity = int(self.max_pieces) - specials
        sizes = [len(p) for p in encoding.pieces]
        for word, size in enumerate(sizes):
            if size > capacity:
                raise ValueError(f"sentence {index}, word {word}: {size} subword pieces, more than the {capacity} a "
                                 f"window of {self.name} holds ({self.max_pieces} positions, {specials} specials)")
        windows, start = [], 0
        while True:
            end, used = start, 0
            while end < len(sizes) and used + sizes[end] <= capacity:
                used += sizes[end]
                end += 1
            windows.append((start, end))
            if end == len(sizes):
                return windows
            start = max(start + 1, start + (end - start) // 2)

    def _embed_in_windows(self, index: int, words: Sequence[str], encoding: WordEncoding) -> np.ndarray:
        """(num_layers, n_words, dim) of a sentence longer than the model's positions (module docstring)."""
        windows = self.windows(index, encoding)
        best: list[int] = []  # for each word, the window it takes its vectors from
        for word in range(len(words)):
            contexts = [min(word - s, e - 1 - word) if s <= word < e else -1 for s, e in windows]
            best.append(contexts.index(max(contexts)))
        out = np.empty((self.num_layers, len(words), self.dim), dtype=np.float32)
        for w, (start, end) in enumerate(windows):
            taken = [word for word in range(start, end) if best[word] == w]
            if not taken:
                continue
            window_encoding = self.encode(list(words[start:end]))
            pooled = self._pool(self._hidden([window_encoding.input_ids])[0], window_encoding)
            out[:, taken] = pooled[:, [word - start for word in taken]]
        return out

    def embed_sentence(self, words: Sequence[str]) -> np.ndarray:
        return self.embed([words])[0]

    # What `elmokit embed` and `Embedder.load(DIR)` users call on an ELMo Embedder, for a transformer folder too.
    stateful = False  # every sentence alone: no state carried between batches
    word_tokenizer = None  # how raw lines are cut into words (``elmokit.text.corpus.Tokenizer``); None: whitespace

    def embed_batch(self, sentences: Sequence[Sequence[str]]) -> list[np.ndarray]:
        return self.embed(sentences)

    def tokenize(self, text: str) -> list[str]:
        """A raw line as words (``word_tokenizer``, else whitespace); the subword tokenizer then cuts each word."""
        return self.word_tokenizer(text) if self.word_tokenizer is not None else text.split()

    def embed_file(self, input_file, output_file, **options):
        """The HDF5 layout of ``Embedder.embed_file`` (``elmokit.formats.embedding_hdf5.embed_file``)."""
        return embed_file(self, input_file, output_file, **options)
