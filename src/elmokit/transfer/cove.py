"""CoVe: context vectors from a machine-translation encoder (McCann et al. 2017, "Learned in Translation").

The MT model, in data-flow order (legend: B batch, S source tokens, T target tokens, E word-vector
dim, H encoder hidden size per direction, D decoder hidden size, V target vocabulary):

    GloVe(w^x)       frozen static word vectors (zeros for words the table lacks)      (B, S, E)
    H = MT-LSTM(.)   2-layer bidirectional LSTM encoder; the top layer is CoVe          (B, S, 2H)
    h_t^dec = LSTM([z_{t-1}; h~_{t-1}], h_{t-1}^dec)   2-layer unidirectional decoder,  (B, D)
                     fed the previous target embedding z and attentional state h~ ("input feeding")
    alpha_t = softmax(H (W_1 h_t^dec + b_1))            attention over source positions (B, S)
    h~_t = tanh(W_2 [H^T alpha_t; h_t^dec] + b_2)                                       (B, D)
    p(y_t | X, y_<t) = softmax(W_out h~_t + b_out)                                      (B, V)

the equations of McCann et al. (2017), section 3 (Luong et al. 2015's global attention with input
feeding). Training is teacher-forced cross-entropy (``transfer/cove_train.py``). CoVe(w) is the
encoder's top layer; the paper's task input is ``[GloVe(w); CoVe(w)]`` (300 + 600 there).

Deliberate deviations, stated: the vectors are elmokit's own GloVe (or any word2vec-format table a
user gives) instead of GloVe 840B; sizes are presets (the paper's are ``CoveConfig()``'s defaults:
H = 300, D = 300); words the table lacks get a zero vector.

Batch invariance. ``CoveEncoder.forward`` runs torch's packed ``nn.LSTM`` (training: fast). The
representation path, ``CoveEncoder.encode``, runs the same weights through a masked step loop of
batch-invariant products (:mod:`elmokit.nn.functional`), so a sentence's CoVe vectors are
bit-identical whatever batch, order or padding it is embedded in (the two paths agree to rounding).

A saved model is a folder: ``config.json`` (``CoveConfig``), ``model.safetensors`` (encoder and
decoder), ``vectors.safetensors`` + ``source_words.txt`` (the frozen table, row i is word i),
``target_vocab.txt``, ``README.md`` (the model card).
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import os
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import ClassVar

import numpy as np
import torch
from safetensors.torch import load_file, save_file
from torch import nn

from elmokit.configs import SavedConfig
from elmokit.errors import UserError
from elmokit.formats.checks import refuse_non_finite_read
from elmokit.io import atomic_directory
from elmokit.nn.functional import invariant_linear, sigmoid
from elmokit.nn.lstm import reverse_padded
from elmokit.representation import EmbedsFiles
from elmokit.transfer.cove_presets import PRESETS  # noqa: F401 (public here, beside CoveConfig)

FORMAT_VERSION = 1
PAD, UNK, BOS, EOS = "<pad>", "<unk>", "<s>", "</s>"
TARGET_SPECIALS = (PAD, UNK, BOS, EOS)  # ids 0..3 of every target vocabulary
MODES = ("cove", "glove_cove")
CONFIG_NAME, WEIGHTS_NAME, VECTORS_NAME = "config.json", "model.safetensors", "vectors.safetensors"
SOURCE_WORDS_NAME, TARGET_VOCAB_NAME = "source_words.txt", "target_vocab.txt"


@dataclass(frozen=True, kw_only=True)
class CoveConfig(SavedConfig):
    """Sizes of the MT model. Defaults are the paper's (GloVe 300, MT-LSTM 300 per direction)."""

    input_dim: int = 300  # E, the frozen vectors' size
    hidden_dim: int = 300  # H per direction: CoVe vectors have 2H
    encoder_layers: int = 2
    decoder_dim: int = 300  # D
    decoder_layers: int = 2
    target_embedding_dim: int = 300  # z
    target_vocab_size: int = 0  # V (set from the data)
    dropout: float = 0.2  # between LSTM layers, on decoder inputs and on h~
    source_lowercase: bool = True  # the vectors were trained on lowercased text: lowercase words before lookup
    FORMAT_VERSION: ClassVar[int] = FORMAT_VERSION
    WHAT = "CoVe config"

    def to_dict(self) -> dict:
        return {**dataclasses.asdict(self), "format_version": FORMAT_VERSION}


class CoveError(UserError):
    """A CoVe model folder or input that cannot be used; the message names the file and the fix."""


# ---------------------------------------------------------------------------------------- encoder


class CoveEncoder(nn.Module):
    """The MT-LSTM: a bidirectional LSTM stack over frozen word vectors. Its top layer is CoVe."""

    def __init__(self, config: CoveConfig):
        super().__init__()
        self.config = config
        self.lstm = nn.LSTM(config.input_dim, config.hidden_dim, num_layers=config.encoder_layers, batch_first=True,
                            bidirectional=True, dropout=config.dropout if config.encoder_layers > 1 else 0.0)

    def forward(self, vectors: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
        """vectors (B, S, E), mask (B, S) bool (real tokens first) -> H (B, S, 2H), zeros at padding (training path)."""
        lengths = mask.sum(dim=1).clamp_min(1).cpu()
        packed = nn.utils.rnn.pack_padded_sequence(vectors, lengths, batch_first=True, enforce_sorted=False)
        encoded, _ = self.lstm(packed)
        encoded, _ = nn.utils.rnn.pad_packed_sequence(encoded, batch_first=True, total_length=mask.shape[1])
        return encoded * mask.unsqueeze(-1)

    @torch.no_grad()
    def encode(self, vectors: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
        """The same function as ``forward`` in eval mode, batch-invariant bit for bit:
        vectors (B, S, E), mask (B, S) -> (B, S, 2H), zeros at padding."""
        inputs = vectors
        for layer in range(self.config.encoder_layers):
            directions = [self._direction(inputs, mask, layer, suffix) for suffix in ("", "_reverse")]
            inputs = torch.cat(directions, dim=-1)  # (B, S, 2H): torch's layout [forward; backward]
        return inputs

    def _direction(self, inputs: torch.Tensor, mask: torch.Tensor, layer: int, suffix: str) -> torch.Tensor:
        lstm = self.lstm
        w_ih, w_hh = getattr(lstm, f"weight_ih_l{layer}{suffix}"), getattr(lstm, f"weight_hh_l{layer}{suffix}")
        b_ih, b_hh = getattr(lstm, f"bias_ih_l{layer}{suffix}"), getattr(lstm, f"bias_hh_l{layer}{suffix}")
        reverse = bool(suffix)
        lengths = mask.sum(dim=1)
        if reverse:
            inputs = reverse_padded(inputs, lengths)
        batch, steps, _ = inputs.shape
        hidden = self.config.hidden_dim
        input_gates = invariant_linear(inputs, w_ih, b_ih)  # (B, S, 4H), one product for all steps
        h = inputs.new_zeros(batch, hidden)
        c = inputs.new_zeros(batch, hidden)
        outputs = inputs.new_zeros(batch, steps, hidden)
        for t in range(steps):
            gates = input_gates[:, t] + invariant_linear(h, w_hh, b_hh)  # (B, 4H), torch's gate order i, f, g, o
            i, f, g, o = gates.chunk(4, dim=1)
            new_c = sigmoid(f) * c + sigmoid(i) * torch.tanh(g)
            new_h = sigmoid(o) * torch.tanh(new_c)
            live = mask[:, t].unsqueeze(1)  # (B, 1): a finished sentence keeps its state, outputs zeros
            c = torch.where(live, new_c, c)
            h = torch.where(live, new_h, h)
            outputs[:, t] = torch.where(live, new_h, torch.zeros_like(new_h))
        return reverse_padded(outputs, lengths) if reverse else outputs


# ---------------------------------------------------------------------------------------- decoder


@dataclass
class DecoderOutput:
    logits: torch.Tensor  # (B, T, V)
    attention: torch.Tensor  # (B, T, S), each row sums to 1 over the real source tokens


class AttentionDecoder(nn.Module):
    """The 2-layer unidirectional LSTM decoder with global attention and input feeding."""

    def __init__(self, config: CoveConfig):
        super().__init__()
        self.config = config
        source_dim = 2 * config.hidden_dim
        self.embedding = nn.Embedding(config.target_vocab_size, config.target_embedding_dim, padding_idx=0)
        sizes = [config.target_embedding_dim + config.decoder_dim] + [config.decoder_dim] * (config.decoder_layers - 1)
        self.cells = nn.ModuleList(nn.LSTMCell(size, config.decoder_dim) for size in sizes)
        self.attention_query = nn.Linear(config.decoder_dim, source_dim)  # W_1, b_1
        self.attentional = nn.Linear(source_dim + config.decoder_dim, config.decoder_dim)  # W_2, b_2
        self.output = nn.Linear(config.decoder_dim, config.target_vocab_size)  # W_out, b_out
        self.dropout = nn.Dropout(config.dropout)

    def initial_state(self, encoded: torch.Tensor) -> list:
        batch, zeros = encoded.shape[0], encoded.new_zeros(encoded.shape[0], self.config.decoder_dim)
        return [[zeros, zeros] for _ in self.cells] + [encoded.new_zeros(batch, self.config.decoder_dim)]

    def step(self, previous: torch.Tensor, state: list, encoded: torch.Tensor, source_mask: torch.Tensor):
        """One target step. previous (B,) ids of y_{t-1}; state: per layer [h, c] then h~_{t-1};
        encoded H (B, S, 2H); source_mask (B, S). Returns (h~_t (B, D), alpha_t (B, S), new state)."""
        *layers, attentional = state
        x = torch.cat([self.dropout(self.embedding(previous)), attentional], dim=-1)  # [z_{t-1}; h~_{t-1}]
        new_layers = []
        for index, (cell, (h, c)) in enumerate(zip(self.cells, layers)):
            h, c = cell(x if index == 0 else self.dropout(x), (h, c))
            new_layers.append([h, c])
            x = h
        query = self.attention_query(x)  # W_1 h_t^dec + b_1: (B, 2H)
        scores = torch.bmm(encoded, query.unsqueeze(2)).squeeze(2)  # H (W_1 h + b_1): (B, S)
        alpha = torch.softmax(scores.masked_fill(~source_mask, float("-inf")), dim=1)  # padding gets exactly 0
        context = torch.bmm(alpha.unsqueeze(1), encoded).squeeze(1)  # H^T alpha_t: (B, 2H)
        attentional = torch.tanh(self.attentional(torch.cat([context, x], dim=-1)))  # h~_t: (B, D)
        return attentional, alpha, [*new_layers, attentional]

    def forward(self, encoded: torch.Tensor, source_mask: torch.Tensor, target_inputs: torch.Tensor) -> DecoderOutput:
        """Teacher forcing: target_inputs (B, T) = [<s>, y_1, ..., y_{T-1}] -> logits (B, T, V), attention (B, T, S)."""
        state = self.initial_state(encoded)
        attentional_states, weights = [], []
        for t in range(target_inputs.shape[1]):
            attentional, alpha, state = self.step(target_inputs[:, t], state, encoded, source_mask)
            attentional_states.append(attentional)
            weights.append(alpha)
        hidden = self.dropout(torch.stack(attentional_states, dim=1))  # (B, T, D)
        return DecoderOutput(self.output(hidden), torch.stack(weights, dim=1))


# ---------------------------------------------------------------------------------------- the MT model


class CoveModel(nn.Module):
    """Encoder + decoder over a frozen table. ``source_vectors`` (N, E) is a non-persistent buffer:
    it is saved once beside the weights, never in checkpoints, and gets no gradient."""

    def __init__(self, config: CoveConfig, source_vectors: torch.Tensor):
        super().__init__()
        if source_vectors.dim() != 2 or source_vectors.shape[1] != config.input_dim:
            raise CoveError(f"the vector table has shape {tuple(source_vectors.shape)}; the config needs "
                            f"(n_words, {config.input_dim})")
        self.config = config
        self.register_buffer("source_vectors", source_vectors.float().contiguous(), persistent=False)
        self.encoder = CoveEncoder(config)
        self.decoder = AttentionDecoder(config)

    def lookup(self, source_ids: torch.Tensor) -> torch.Tensor:
        """(B, S) rows of the table (-1: a word the table lacks, or padding) -> (B, S, E); -1 gives zeros."""
        rows = self.source_vectors.index_select(0, source_ids.clamp_min(0).reshape(-1)).view(*source_ids.shape, -1)
        return rows * (source_ids >= 0).unsqueeze(-1)

    def forward(self, source_ids, source_mask, target_inputs) -> DecoderOutput:
        """source_ids (B, S) table rows, source_mask (B, S), target_inputs (B, T) -> DecoderOutput."""
        encoded = self.encoder(self.lookup(source_ids), source_mask)
        return self.decoder(encoded, source_mask, target_inputs)

    def loss(self, source_ids, source_mask, target_inputs, target_outputs) -> tuple[torch.Tensor, int]:
        """(summed cross-entropy over the real target tokens, their number); padding id 0 is ignored."""
        logits = self.forward(source_ids, source_mask, target_inputs).logits
        total = nn.functional.cross_entropy(logits.reshape(-1, logits.shape[-1]), target_outputs.reshape(-1),
                                            ignore_index=0, reduction="sum")
        return total, int((target_outputs != 0).sum())

    @torch.no_grad()
    def greedy_decode(self, source_ids, source_mask, *, max_length: int) -> list[list[int]]:
        """Greedy translation: per sentence the target ids up to (without) </s>, at most max_length."""
        encoded = self.encoder(self.lookup(source_ids), source_mask)
        batch = source_ids.shape[0]
        state = self.decoder.initial_state(encoded)
        previous = torch.full((batch,), TARGET_SPECIALS.index(BOS), dtype=torch.long)
        eos = TARGET_SPECIALS.index(EOS)
        outputs = [[] for _ in range(batch)]
        finished = torch.zeros(batch, dtype=torch.bool)
        for _ in range(max_length):
            attentional, _, state = self.decoder.step(previous, state, encoded, source_mask)
            logits = self.decoder.output(attentional)
            logits[:, 0] = float("-inf")  # never <pad>
            previous = logits.argmax(dim=1)
            for row in range(batch):
                if not finished[row] and int(previous[row]) != eos:
                    outputs[row].append(int(previous[row]))
            finished |= previous == eos
            if bool(finished.all()):
                break
        return outputs


# ---------------------------------------------------------------------------------------- files


def save_cove_model(directory: str | os.PathLike, model: CoveModel, source_words: Sequence[str],
                    target_words: Sequence[str], *, card: str = "") -> Path:
    """Write a model folder (see the module doc) under a temporary name, renamed at the end."""
    directory = Path(directory)
    with atomic_directory(directory) as staging:
        (staging / CONFIG_NAME).write_text(json.dumps(model.config.to_dict(), indent=2) + "\n", encoding="utf-8")
        save_file({k: v.detach().contiguous() for k, v in model.state_dict().items()}, str(staging / WEIGHTS_NAME))
        save_file({"vectors": model.source_vectors.contiguous()}, str(staging / VECTORS_NAME))
        (staging / SOURCE_WORDS_NAME).write_text("".join(w + "\n" for w in source_words), encoding="utf-8")
        (staging / TARGET_VOCAB_NAME).write_text("".join(w + "\n" for w in target_words), encoding="utf-8")
        if card:
            (staging / "README.md").write_text(card, encoding="utf-8")
    return directory


def read_word_list(path: Path) -> list[str]:
    try:
        return path.read_text(encoding="utf-8").split("\n")[:-1]
    except (OSError, UnicodeDecodeError) as error:
        raise CoveError(f"{path}: unreadable word list ({error})") from None


def model_folder(path: str | os.PathLike) -> Path:
    """``path`` itself, or its ``model/`` when ``path`` is a run folder of `elmokit cove train`."""
    folder = Path(path)
    return folder / "model" if (folder / "model" / WEIGHTS_NAME).is_file() else folder


def load_cove_model(path: str | os.PathLike) -> tuple[CoveModel, list[str], list[str]]:
    """(model in eval mode, source words, target words) of a model folder, or of a run folder's ``model/``."""
    folder = model_folder(path)
    for name in (CONFIG_NAME, WEIGHTS_NAME, VECTORS_NAME, SOURCE_WORDS_NAME, TARGET_VOCAB_NAME):
        if not (folder / name).is_file():
            raise CoveError(f"{folder}: not a CoVe model folder (no {name}); fix: point at the run folder of "
                            "`elmokit cove train` or its model/ folder")
    try:
        config = CoveConfig.from_dict(json.loads((folder / CONFIG_NAME).read_text(encoding="utf-8")))
        tables = {name: load_file(str(folder / name)) for name in (VECTORS_NAME, WEIGHTS_NAME)}
    except Exception as error:  # noqa: BLE001 - json, safetensors and dataclass errors alike name the folder
        raise CoveError(f"{folder}: unreadable CoVe model ({error})") from None
    for name, tensors in tables.items():
        refuse_non_finite_read(tensors, folder / name)
    vectors, weights = tables[VECTORS_NAME]["vectors"], tables[WEIGHTS_NAME]
    source_words, target_words = read_word_list(folder / SOURCE_WORDS_NAME), read_word_list(folder / TARGET_VOCAB_NAME)
    if len(source_words) != vectors.shape[0] or len(target_words) != config.target_vocab_size:
        raise CoveError(f"{folder}: {SOURCE_WORDS_NAME} has {len(source_words)} words for {vectors.shape[0]} vectors, "
                        f"{TARGET_VOCAB_NAME} {len(target_words)} for a vocabulary of {config.target_vocab_size}")
    model = CoveModel(config, vectors)
    try:
        model.load_state_dict(weights)
    except RuntimeError as error:
        raise CoveError(f"{folder / WEIGHTS_NAME}: does not fit {CONFIG_NAME} ({str(error).splitlines()[0]})") from None
    return model.eval(), source_words, target_words


# ---------------------------------------------------------------------------------------- representation


class CoveRepresentation(EmbedsFiles):
    """CoVe as a one-layer ``Representation``: the MT-LSTM's top layer, (1, n_tokens, 2H) per
    sentence; with ``mode="glove_cove"`` the paper's task input [GloVe(w); CoVe(w)], (1, n, E + 2H).

    Sentences are encoded ``batch_size`` at a time through the batch-invariant path, so a
    sentence's vectors do not depend on the other sentences of the call (bit for bit).
    """

    num_layers = 1

    def __init__(self, model: CoveModel, source_words: Sequence[str], *, mode: str = "cove", batch_size: int = 64,
                 fingerprint: str | None = None):
        if mode not in MODES:
            raise CoveError(f"CoVe mode {mode!r}: choose one of {', '.join(MODES)}")
        self.model = model.eval()
        self.index = {w: i for i, w in enumerate(source_words)}
        self.mode = mode
        self.batch_size = batch_size
        config = model.config
        self.name = "CoVe" if mode == "cove" else "GloVe+CoVe"
        self.dim = 2 * config.hidden_dim + (config.input_dim if mode == "glove_cove" else 0)
        self.fingerprint = f"{self.name}:{fingerprint}" if fingerprint else None

    @classmethod
    def load(cls, path: str | os.PathLike, *, mode: str = "cove", batch_size: int = 64) -> CoveRepresentation:
        model, source_words, _ = load_cove_model(path)
        folder = model_folder(path)
        digest = hashlib.sha256()
        for name in (CONFIG_NAME, WEIGHTS_NAME, VECTORS_NAME, SOURCE_WORDS_NAME):
            digest.update((folder / name).read_bytes())
        return cls(model, source_words, mode=mode, batch_size=batch_size, fingerprint=digest.hexdigest()[:16])

    def source_ids(self, sentences: Sequence[Sequence[str]]) -> tuple[torch.Tensor, torch.Tensor]:
        """(B, S) table rows (-1 for unknown words and padding), mask (B, S)."""
        lower = self.model.config.source_lowercase
        width = max((len(s) for s in sentences), default=0)
        ids = torch.full((len(sentences), width), -1, dtype=torch.long)
        for row, sentence in enumerate(sentences):
            ids[row, : len(sentence)] = torch.tensor([self.index.get(w.lower() if lower else w, -1) for w in sentence],
                                                     dtype=torch.long)
        lengths = torch.tensor([len(s) for s in sentences])
        return ids, torch.arange(width).unsqueeze(0) < lengths.unsqueeze(1)

    def embed(self, sentences: Sequence[Sequence[str]]) -> list[np.ndarray]:
        """One float32 array (1, n_tokens, dim) per sentence."""
        out: list[np.ndarray] = []
        for start in range(0, len(sentences), self.batch_size):
            chunk = [list(s) for s in sentences[start : start + self.batch_size]]
            ids, mask = self.source_ids(chunk)
            vectors = self.model.lookup(ids)  # (B, S, E)
            cove = self.model.encoder.encode(vectors, mask)  # (B, S, 2H)
            features = torch.cat([vectors, cove], dim=-1) if self.mode == "glove_cove" else cove
            out.extend(features[row, : len(s)].unsqueeze(0).numpy().astype(np.float32, copy=True)
                       for row, s in enumerate(chunk))
        return out
