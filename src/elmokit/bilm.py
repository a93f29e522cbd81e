"""The bidirectional language model of ELMo (Peters et al. 2018, "Deep contextualized word
representations", NAACL), read top to bottom in data-flow order.

It must reproduce the reference implementations (bilm-tf, allennlp) on their weight files;
the conformance tests (``tests/test_conformance.py``, against the reference's own fixtures) are the proof.

Legend (shape comments): B batch, T tokens (T2 = T + 2 with <S> and </S>), C = 50 characters
per token, P projection size, D LSTM cell size, L LSTM layers.

    char ids (B, T, C) --add <S>, </S>--> (B, T2, C)
      -> CharCNNEncoder                    token vectors x (B, T2, P)          layer 0 = [x; x]
      -> forward stack:  L ProjectedLSTM   reading left to right               layer l = [f_l; b_l]
         backward stack: L ProjectedLSTM   reading each row's tokens reversed
      -> layers (L+1, B, T2, 2P), mask (B, T2)

The two stacks never exchange information; from the second layer on, a layer's input is added
to its output (``use_skip_connections``; bilm-tf models trained without it set it false).

Deliberate deviations from the reference, both opt-outs of surprising behaviour:
* State. The reference carries every row's final LSTM state into the next call, so a sentence's
  vectors depend on what was embedded before it in the same batch row. Here every sentence
  starts from the same initial state unless ``stateful=True``, which reproduces the reference
  exactly (allennlp's ``_EncoderBase`` state carry-over), including its per-row bookkeeping.
  That initial state is zero, or with
  ``set_initial_state(warm)`` the model's warm state (``elmokit.warm_state``: the state after a
  fixed warm-up text), which starts sentences warm and keeps them independent.
* Padding. Token slots that are padding are never run through the char CNN (the reference
  computes and then masks them); the outputs are identical.
"""

from __future__ import annotations

import logging
from collections import OrderedDict
from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import nn

# The config lives apart so that file formats can read it without the model; re-exported here.
from elmokit.bilm_config import ORIGINAL_FILTERS, PRESETS, BiLMConfig  # noqa: F401
from elmokit.nn.char_encoder import CharCNNEncoder
from elmokit.nn.functional import PRECISIONS, can_prepare
from elmokit.nn.lstm import ProjectedLSTM, reverse_padded
from elmokit.text.chars import BOS_CHAR_IDS, EOS_CHAR_IDS, batch_to_ids

logger = logging.getLogger(__name__)


@dataclass
class BiLMOutput:
    """All biLM layers. ``layers`` (L+1, B, T', 2P), zero at padding; ``mask`` (B, T') bool.

    T' = T + 2 with the boundary tokens (position 0 is <S>, position n_b + 1 is </S>), or T
    without them (see ``BiLM.forward``).
    """

    layers: torch.Tensor
    mask: torch.Tensor


class BiLM(nn.Module):
    """ELMo's biLM: all L + 1 layers of every token. See the module docstring.

    ``stateful=True`` is the reference's compatibility mode: each batch row keeps its final
    LSTM states for the next call (call ``reset_states()`` to forget them).

    ``set_initial_state(warm_state)`` makes every sentence start from that state instead of zero
    (in stateful mode: every row not seen before, and every row after ``reset_states()``).
    """

    def __init__(self, config: BiLMConfig, *, stateful: bool = False) -> None:
        super().__init__()
        self.config = config
        self.stateful = stateful
        P, D = config.projection_dim, config.lstm_dim
        self.token_encoder = CharCNNEncoder(
            n_characters=config.n_characters,
            char_embedding_dim=config.char_embedding_dim,
            filters=config.filters,
            activation=config.activation,
            n_highway=config.n_highway,
            output_dim=P,
            use_projection=config.token_projection,
        )

        def make_stack() -> nn.ModuleList:
            return nn.ModuleList(
                ProjectedLSTM(P, D, P, cell_clip=config.cell_clip, proj_clip=config.proj_clip)
                for _ in range(config.n_layers)
            )

        self.forward_lstm = make_stack()
        self.backward_lstm = make_stack()
        # Stateful mode only: h (L, 2 directions, rows, P) and c (L, 2, rows, D).
        self._state: tuple[torch.Tensor, torch.Tensor] | None = None
        self.token_cache: TokenVectorCache | None = None
        # The initial state of every sentence when warm: h (L, 2, P), c (L, 2, D); None = zero.
        # Buffers so that .to(device) moves them; not persistent: they are not weights.
        self.register_buffer("warm_h", None, persistent=False)
        self.register_buffer("warm_c", None, persistent=False)
        self.warm_state_metadata: dict | None = None

    @property
    def num_layers(self) -> int:
        return self.config.n_layers + 1

    @property
    def output_dim(self) -> int:
        return self.config.output_dim

    def reset_states(self) -> None:
        self._state = None

    @property
    def initial_state(self) -> str:
        """``"zero"`` or ``"warm"``: where every sentence (every new stateful row) starts."""
        return "zero" if self.warm_h is None else "warm"

    def set_initial_state(self, state=None) -> BiLM:
        """Start every sentence from ``state`` (a ``WarmState``, or ``(h (L, 2, P), c (L, 2, D))``),
        or from zero with ``None``. Forgets any carried stateful state."""
        if state is None:
            self.warm_h = self.warm_c = None
            self.warm_state_metadata = None
        else:
            h, c = (state.h, state.c) if hasattr(state, "h") else state
            L, P, D = self.config.n_layers, self.config.projection_dim, self.config.lstm_dim
            if tuple(h.shape) != (L, 2, P) or tuple(c.shape) != (L, 2, D):
                raise ValueError(
                    f"initial state must be h {(L, 2, P)} and c {(L, 2, D)} for this model, "
                    f"got {tuple(h.shape)} and {tuple(c.shape)}"
                )
            device = next(self.parameters()).device
            self.warm_h = torch.as_tensor(h, dtype=torch.float32, device=device).detach().clone()
            self.warm_c = torch.as_tensor(c, dtype=torch.float32, device=device).detach().clone()
            self.warm_state_metadata = dict(getattr(state, "metadata", {}) or {})
        self.reset_states()
        return self

    # ---- construction from arrays, copies (files: ``elmokit.formats``, which imports this) ------

    @classmethod
    def from_state(cls, config: BiLMConfig, state: dict, *, stateful: bool = False) -> BiLM:
        """A model in eval mode from a config and a state dict of arrays (numpy or torch) under our
        names. To read model files use ``elmokit.formats.load_bilm`` (it names the files in errors)."""
        model = cls(config, stateful=stateful)
        expected = model.state_dict()
        missing = sorted(set(expected) - set(state))
        unexpected = sorted(set(state) - set(expected))
        if missing or unexpected:
            raise ValueError(f"weights do not fit the config: missing {missing}, unexpected {unexpected}")
        tensors = {}
        for name, value in state.items():
            tensor = torch.as_tensor(value, dtype=torch.float32)
            if tuple(tensor.shape) != tuple(expected[name].shape):
                raise ValueError(
                    f"weight {name!r} has shape {tuple(tensor.shape)}, expected {tuple(expected[name].shape)}"
                )
            tensors[name] = tensor
        model.load_state_dict(tensors)
        return model.eval()

    def numpy_state(self) -> dict:
        return {name: value.detach().cpu().numpy() for name, value in self.state_dict().items()}

    def copy(self) -> BiLM:
        """An independent copy: the same class, config, weights (copied, not shared; same device and
        dtype), statefulness and carried state, initial state, precision and train/eval mode;
        parameters require grad (as in a new model); no token cache. Changing either model never
        changes the other."""
        device = next(self.parameters()).device
        with torch.device("meta"):  # no random initialisation: every value is copied below
            clone = type(self)(self.config, stateful=self.stateful)
        clone = clone.to_empty(device=device)
        with torch.no_grad():  # each tensor copied as it is (device and dtype kept)
            for mine, theirs in zip(clone.parameters(), self.parameters(), strict=True):
                mine.data = theirs.detach().clone()
        if self.warm_h is not None:
            clone.set_initial_state((self.warm_h, self.warm_c))
            clone.warm_state_metadata = dict(self.warm_state_metadata or {})
        if self._state is not None:
            clone._state = (self._state[0].clone(), self._state[1].clone())
        clone.set_precision(self.precision)
        return clone.train(self.training)

    # ---- data flow -------------------------------------------------------------------------

    def token_vectors(self, char_ids: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
        """Context-independent vectors (..., P) of the masked token slots; zeros elsewhere.

        Each distinct spelling is encoded once; with ``enable_token_cache`` the vectors of
        spellings seen before come from the cache (bit-identical: the encoder is batch-invariant).
        """
        flat_ids = char_ids[mask]  # (N, C), real tokens only
        if self.token_cache is not None and not (torch.is_grad_enabled() and self.training):
            vectors = self.token_cache.lookup(flat_ids, self.token_encoder.encode_unique)
        else:
            vectors = self.token_encoder(flat_ids)  # (N, P)
        out = vectors.new_zeros(*mask.shape, vectors.shape[-1])
        out[mask] = vectors
        return out

    def set_precision(self, precision: str) -> BiLM:
        """Inference arithmetic: ``"fp32"`` (the default, exact) or ``"bf16"`` (fast: bf16 weights in
        every matrix product, fp32 elsewhere; see docs/benchmarks.md for the measured error).

        bf16 exists only on the CPU inference path (float32 weights on the CPU, with autograd off or
        every parameter frozen); ``forward`` raises ``ValueError`` rather than silently computing
        fp32 anywhere else (training, fine-tuning, a GPU). Training and autograd always use fp32."""
        if precision not in PRECISIONS:
            raise ValueError(f"precision must be one of {PRECISIONS}, got {precision!r}")
        for module in self.modules():
            if module is not self and hasattr(module, "precision"):
                module.precision = precision
        return self

    def check_precision(self) -> None:
        """Raise ``ValueError`` if the precision set cannot be applied to a call made now (bf16
        with autograd on a parameter that requires grad, or off the CPU, or not float32)."""
        if self.precision == "fp32":
            return
        probe = torch.empty(0)  # stands for the layer inputs: they need grad only through a parameter
        blocked = [name for name, p in self.named_parameters() if not can_prepare(probe.to(p.device), p)]
        if blocked:
            parameter = dict(self.named_parameters())[blocked[0]]
            raise ValueError(
                f"precision={self.precision!r} applies to CPU float32 inference only, but parameter "
                f"{blocked[0]!r} is {parameter.dtype} on {parameter.device.type} with requires_grad="
                f"{parameter.requires_grad} and autograd {'on' if torch.is_grad_enabled() else 'off'}; "
                "fix: run under torch.inference_mode() (or freeze the parameters) on the CPU, "
                "or set_precision('fp32') for training and other devices"
            )

    @property
    def precision(self) -> str:
        return self.token_encoder.precision

    def enable_token_cache(self, max_size: int = 20_000) -> None:
        """Keep the token vectors of up to ``max_size`` spellings (least recently used evicted).

        For inference: the cache is bypassed in training mode with autograd on, and emptied
        whenever the token encoder's weights change.
        """
        self.token_cache = TokenVectorCache(self.token_encoder, max_size)

    def disable_token_cache(self) -> None:
        self.token_cache = None

    def cache_vocabulary(self, words) -> None:
        """Pre-compute the token vectors of a word list (the cache grows to hold them all)."""
        words = list(words)
        if self.token_cache is None or self.token_cache.max_size < len(words):
            self.enable_token_cache(max(len(words), self.token_cache.max_size if self.token_cache else 0))
        with torch.inference_mode():
            for start in range(0, len(words), 4096):
                ids = batch_to_ids([words[start : start + 4096]])[0]
                self.token_cache.lookup(ids, self.token_encoder.encode_unique)

    def forward(self, char_ids: torch.Tensor, *, keep_boundaries: bool = True) -> BiLMOutput:
        """char ids (B, T, C) from ``batch_to_ids`` -> ``BiLMOutput``.

        With ``keep_boundaries`` (the default, like allennlp's ``_ElmoBiLm``) the layers include
        the <S> and </S> positions (T2 = T + 2); otherwise they are removed and rows stay
        left-aligned (T' = T).
        """
        if char_ids.dim() != 3 or char_ids.shape[-1] != self.config.max_characters_per_token:
            raise ValueError(f"expected char ids of shape (B, T, 50), got {tuple(char_ids.shape)}")
        self.check_precision()
        ids, mask = add_boundaries(char_ids)  # (B, T2, C), (B, T2)
        lengths = mask.sum(dim=1)  # (B,)
        tokens = self.token_vectors(ids, mask)  # (B, T2, P)
        layers = [torch.cat([tokens, tokens], dim=-1)]  # layer 0: the token vector, duplicated

        if self.stateful:
            initial = self._initial_state(ids.shape[0], tokens)
        elif self.warm_h is not None:  # every row starts from the same warm state
            initial = self._warm_rows(ids.shape[0])
        else:
            initial = None
        forward_outs, backward_outs, final_h, final_c = self.run_stacks(
            tokens, reverse_padded(tokens, lengths), lengths, initial)
        for forward_out, backward_out in zip(forward_outs, backward_outs):
            layers.append(torch.cat([forward_out, reverse_padded(backward_out, lengths)], dim=-1))
        if self.stateful:
            self._update_state(final_h, final_c)

        stacked = torch.stack(layers)  # (L+1, B, T2, 2P)
        if keep_boundaries:
            return BiLMOutput(stacked, mask)
        return BiLMOutput(*remove_boundaries(stacked, mask))

    def run_stacks(self, forward_in: torch.Tensor, backward_in: torch.Tensor, lengths: torch.Tensor, initial=None):
        """The two LSTM stacks on inputs already in their reading order (``backward_in``: each
        row reversed). ``initial``: (h (L, 2, B, P), c (L, 2, B, D)) or None for zero.
        -> forward outputs, backward outputs (each a list of L (B, T, P), in reading order), and
        the final states h (L, 2, B, P), c (L, 2, B, D)."""
        forward_outs, backward_outs, final_h, final_c = [], [], [], []
        for layer in range(self.config.n_layers):
            # -- training only: bilm-tf's DropoutWrapper(input_keep_prob) around each (residual)
            # cell, so the residual below adds the dropped input, as in TF. No-op in eval mode.
            if self.training and self.config.dropout > 0.0:
                forward_in = F.dropout(forward_in, self.config.dropout, training=True)
                backward_in = F.dropout(backward_in, self.config.dropout, training=True)
            # -- end of the training-only part
            state_f = (initial[0][layer, 0], initial[1][layer, 0]) if initial else None
            state_b = (initial[0][layer, 1], initial[1][layer, 1]) if initial else None
            forward_out, (h_f, c_f) = self.forward_lstm[layer](forward_in, lengths, state_f)
            backward_out, (h_b, c_b) = self.backward_lstm[layer](backward_in, lengths, state_b)
            if layer > 0 and self.config.use_skip_connections:
                forward_out = forward_out + forward_in  # residual (TF ResidualWrapper)
                backward_out = backward_out + backward_in
            forward_outs.append(forward_out)
            backward_outs.append(backward_out)
            forward_in, backward_in = forward_out, backward_out
            final_h.append(torch.stack([h_f, h_b]))
            final_c.append(torch.stack([c_f, c_b]))
        return forward_outs, backward_outs, torch.stack(final_h), torch.stack(final_c)

    # ---- the reference's stateful mode ----------------------------------------------------

    def _warm_rows(self, batch_size: int) -> tuple[torch.Tensor, torch.Tensor]:
        """The warm state repeated for B rows: h (L, 2, B, P), c (L, 2, B, D)."""
        h = self.warm_h.unsqueeze(2).expand(-1, -1, batch_size, -1).contiguous()
        c = self.warm_c.unsqueeze(2).expand(-1, -1, batch_size, -1).contiguous()
        return h, c

    def _initial_state(self, batch_size: int, like: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """Rows 0..B-1 of the carried state; rows never seen before start at zero (or warm)."""
        L, P, D = self.config.n_layers, self.config.projection_dim, self.config.lstm_dim
        if self._state is None:
            self._state = (like.new_zeros(L, 2, 0, P), like.new_zeros(L, 2, 0, D))
        h, c = self._state
        if h.shape[2] < batch_size:  # grow the buffer with zero (or warm) rows, like allennlp
            grow = batch_size - h.shape[2]
            if self.warm_h is not None:
                new_h, new_c = self._warm_rows(grow)
            else:
                new_h, new_c = h.new_zeros(L, 2, grow, P), c.new_zeros(L, 2, grow, D)
            h = torch.cat([h, new_h.to(h.dtype)], dim=2)
            c = torch.cat([c, new_c.to(c.dtype)], dim=2)
            self._state = (h, c)
        return h[:, :, :batch_size], c[:, :, :batch_size]

    def _update_state(self, new_h: torch.Tensor, new_c: torch.Tensor) -> None:
        """Rows 0..B-1 take the batch's final states; rows >= B keep theirs.

        allennlp quirk kept for exactness: a row whose new first-layer state (both directions)
        sums to exactly 0.0 keeps its old state; h and c are judged separately.
        """
        batch_size = new_h.shape[2]
        old_h, old_c = self._state
        updated = []
        for old, new in ((old_h, new_h.detach()), (old_c, new_c.detach())):
            row_sums = new[0].permute(1, 0, 2).reshape(batch_size, -1).sum(-1)  # (B,)
            use_new = (row_sums != 0.0).view(1, 1, batch_size, 1)
            merged = old.clone()
            merged[:, :, :batch_size] = torch.where(use_new, new, old[:, :, :batch_size])
            updated.append(merged)
        self._state = (updated[0], updated[1])


class TokenVectorCache:
    """LRU cache of context-independent token vectors, keyed by a token's 50 character ids."""

    def __init__(self, encoder: nn.Module, max_size: int) -> None:
        self.encoder = encoder
        self.max_size = max_size
        self._vectors: OrderedDict[bytes, torch.Tensor] = OrderedDict()
        self._weights_key: tuple | None = None
        self.hits = self.misses = 0

    def __len__(self) -> int:
        return len(self._vectors)

    def _check_weights(self) -> None:
        key = (self.encoder.precision, *((p._version, p.data_ptr()) for p in self.encoder.parameters()))
        if key != self._weights_key:
            self._vectors.clear()
            self._weights_key = key

    def lookup(self, char_ids: torch.Tensor, encode_unique) -> torch.Tensor:
        """char_ids (N, C) -> vectors (N, P), encoding only spellings not in the cache."""
        self._check_weights()
        unique, inverse = torch.unique(char_ids, dim=0, return_inverse=True)
        keys = [row.tobytes() for row in unique.cpu().numpy()]
        missing = [i for i, key in enumerate(keys) if key not in self._vectors]
        self.hits += len(keys) - len(missing)
        self.misses += len(missing)
        if missing:
            with torch.inference_mode(False), torch.no_grad():
                computed = encode_unique(unique[missing].clone())
            for i, vector in zip(missing, computed):
                self._vectors[keys[i]] = vector
        rows = []
        for key in keys:
            self._vectors.move_to_end(key)
            rows.append(self._vectors[key])
        while len(self._vectors) > self.max_size:
            self._vectors.popitem(last=False)
        return torch.stack(rows)[inverse]


def add_boundaries(char_ids: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """(B, T, C) -> char ids (B, T2, C) with <S> first and </S> after each row's last token,
    and the mask (B, T2). Rows are left-aligned; an empty row becomes <S> </S>."""
    batch_size, num_tokens, num_chars = char_ids.shape
    lengths = (char_ids > 0).any(dim=-1).sum(dim=1)  # (B,)
    with_boundaries = char_ids.new_zeros(batch_size, num_tokens + 2, num_chars)
    with_boundaries[:, 1 : num_tokens + 1] = char_ids
    with_boundaries[:, 0] = torch.from_numpy(BOS_CHAR_IDS).to(char_ids.device)
    rows = torch.arange(batch_size, device=char_ids.device)
    with_boundaries[rows, lengths + 1] = torch.from_numpy(EOS_CHAR_IDS).to(char_ids.device)
    positions = torch.arange(num_tokens + 2, device=char_ids.device)
    mask = positions.unsqueeze(0) < (lengths + 2).unsqueeze(1)  # (B, T2)
    return with_boundaries, mask


def remove_boundaries(layers: torch.Tensor, mask: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """Drop <S> and </S>: layers (..., B, T2, H), mask (B, T2) -> (..., B, T, H), (B, T).

    Row b's tokens sit at positions 1..n_b, so they stay left-aligned; the row's </S> lands at
    n_b and is zeroed by the new mask.
    """
    new_mask = mask[:, 2:]  # (B, T): position t valid iff t < n_b, i.e. t + 2 < n_b + 2
    trimmed = layers[..., 1:-1, :] * new_mask.unsqueeze(-1).to(layers.dtype)
    return trimmed, new_mask
