"""What users hold: ``Elmo`` (an nn.Module for task models) and ``Embedder`` (the light query
object that turns sentences into numpy arrays and files into HDF5).

``Elmo`` keeps the interface AllenNLP users know (``allennlp.modules.elmo.Elmo``): one biLM run, K independent scalar
mixes (Peters et al. 2018, eq. 1), boundaries removed, dropout; the difference is that sentences
never influence each other unless ``stateful=True`` asks for the reference's behaviour.
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
from collections.abc import Sequence
from pathlib import Path

import numpy as np
import torch
from torch import nn

from elmokit.bilm import BiLM, remove_boundaries
from elmokit.formats import embedding_hdf5, load_bilm, load_original, recorded_tokenizer
from elmokit.nn.scalar_mix import ScalarMix
from elmokit.representation import RepresentationError, exported_model, folder_spec, identify_folder, load_representation
from elmokit.text.chars import batch_to_ids
from elmokit.text.corpus import raw_text_tokenizer

logger = logging.getLogger(__name__)


class Elmo(nn.Module):
    """ELMo representations for a task model.

    Args:
        options_file, weight_file: the original files (or pass ``module``, or use
            ``Elmo.from_pretrained``).
        num_output_representations: K, the number of independent scalar mixes (e.g. one for the
            tagger input, one for its output).
        requires_grad: fine-tune the biLM; otherwise it is frozen and run without autograd
            (only the mixes train).
        do_layer_norm: normalise each layer before mixing (allennlp semantics).
        dropout: applied to each representation (active in train mode).
        keep_sentence_boundaries: return the <S> and </S> positions too (T + 2).
        scalar_mix_parameters: fixed pre-softmax layer weights; the mixes are then not trained.
        stateful: the reference's state carrying between calls (see ``BiLM``).
        module: a ``BiLM`` to use instead of files. Elmo works on its own copy (``BiLM.copy``):
            it sets the copy's ``requires_grad`` and ``stateful``, and fine-tuning trains the
            copy (``elmo.bilm``), so the caller's module is never changed.

    ``forward(char_ids (..., T, 50))`` returns ``{"elmo_representations": K x (..., T, 2P),
    "mask": (..., T) bool}``.
    """

    def __init__(
        self,
        options_file: str | os.PathLike | None = None,
        weight_file: str | os.PathLike | None = None,
        num_output_representations: int = 1,
        requires_grad: bool = False,
        do_layer_norm: bool = False,
        dropout: float = 0.5,
        keep_sentence_boundaries: bool = False,
        scalar_mix_parameters: Sequence[float] | None = None,
        stateful: bool = False,
        module: BiLM | None = None,
        *,
        _owned: bool = False,
    ) -> None:
        super().__init__()
        if module is None:
            if options_file is None or weight_file is None:
                raise ValueError("Elmo needs options_file and weight_file, or module=BiLM(...)")
            module = load_original(options_file, weight_file, stateful=stateful)
        elif not _owned:  # the caller's model: never changed, so work on a copy
            module = module.copy()
        if stateful:
            module.stateful = True
        self.bilm = module
        for parameter in self.bilm.parameters():
            parameter.requires_grad_(requires_grad)
        self.requires_grad = requires_grad
        self.keep_sentence_boundaries = keep_sentence_boundaries
        self.dropout = nn.Dropout(p=dropout)
        self.scalar_mixes = nn.ModuleList(
            ScalarMix(
                self.bilm.num_layers,
                do_layer_norm=do_layer_norm,
                initial_scalar_parameters=scalar_mix_parameters,
                trainable=scalar_mix_parameters is None,
            )
            for _ in range(num_output_representations)
        )

    @classmethod
    def from_pretrained(
        cls,
        path: str | os.PathLike = "default",
        num_output_representations: int = 1,
        *,
        stateful: bool = False,
        initial_state: str = "zero",
        **kwargs,
    ) -> Elmo:
        """``initial_state="warm"``: every sentence starts from the model's warm state (see ``BiLM``)."""
        bilm = load_bilm(path, stateful=stateful, initial_state=initial_state)
        return cls(module=bilm, num_output_representations=num_output_representations, _owned=True, **kwargs)

    def get_output_dim(self) -> int:
        return self.bilm.output_dim

    def reset_states(self) -> None:
        self.bilm.reset_states()

    def forward(self, char_ids: torch.Tensor) -> dict[str, object]:
        leading, (num_tokens, num_chars) = char_ids.shape[:-2], char_ids.shape[-2:]
        flat = char_ids.reshape(-1, num_tokens, num_chars)  # (B, T, C)
        with torch.set_grad_enabled(torch.is_grad_enabled() and self.requires_grad):
            output = self.bilm(flat)  # layers (L+1, B, T2, 2P) with boundaries
        representations = []
        for mix in self.scalar_mixes:
            # The mix sees the boundary tokens (its layer-norm statistics include them), as in allennlp.
            mixed = mix(output.layers, output.mask)  # (B, T2, 2P)
            if self.keep_sentence_boundaries:
                mixed, mask = mixed * output.mask.unsqueeze(-1), output.mask
            else:
                mixed, mask = remove_boundaries(mixed, output.mask)
            representations.append(self.dropout(mixed))
        out_tokens = mask.shape[-1]
        return {
            "elmo_representations": [r.reshape(*leading, out_tokens, -1) for r in representations],
            "mask": mask.reshape(*leading, out_tokens),
        }


class Embedder:
    """The light query object: a biLM for inference and nothing else (no mixes, no optimizer).

    ``embed(sentences)`` gives one float32 array (L+1, n_tokens, 2P) per sentence. By default
    each sentence starts from a zero LSTM state, so its vectors are the same in any batch and any
    order; ``initial_state="warm"`` starts every sentence from the model's warm state instead
    (the same for all, so just as order-free; see ``elmokit.warm_state``); ``stateful=True``
    carries states between batches exactly like the reference.
    ``precision="bf16"`` is the fast path on the CPU (documented error in docs/benchmarks.md;
    ``ValueError`` on other devices, never a silent fp32); the token vectors of up to
    ``token_cache_size`` spellings are cached (exact; 0 turns it off).
    Implements the ``Representation`` protocol.

    ``tokenizer`` (an ``elmokit.text.corpus.Tokenizer`` or None) is how ``tokenize`` and
    ``embed_file`` cut raw lines: ``Embedder.load`` sets it to the segmenter a model was trained
    with (jieba, chars, ...; recorded in ``lm.json``), so raw Chinese lines are cut as the training
    text was; None (every other model) splits at whitespace.

    ``Embedder(bilm)`` works on its own copy of ``bilm`` (``BiLM.copy``: eval mode, the precision
    and the cache are set on the copy), so the caller's model keeps its mode, precision, cache,
    parameters and gradients; later changes to the caller's weights are not seen (make a new
    Embedder). ``Embedder.load`` and ``Embedder.from_original`` load a model for it alone.
    """

    def __init__(
        self,
        bilm: BiLM,
        *,
        name: str = "elmo",
        batch_size: int = 64,
        precision: str = "fp32",
        token_cache_size: int = 20_000,
        tokenizer=None,
        _owned: bool = False,
    ) -> None:
        if not _owned:  # the caller's model: never changed, so work on a copy
            bilm = bilm.copy()
        self.bilm = bilm.eval().set_precision(precision)
        for parameter in self.bilm.parameters():  # inference only: no autograd, so bf16 always applies
            parameter.requires_grad_(False)
        self.bilm.check_precision()
        if token_cache_size > 0:
            self.bilm.enable_token_cache(token_cache_size)  # bit-identical, so on by default
        self.name = name
        self.batch_size = batch_size
        self.tokenizer = tokenizer
        self._fingerprint: str | None = None

    @classmethod
    def load(
        cls, path: str | os.PathLike = "default", *, stateful: bool = False, initial_state: str = "zero", **options
    ) -> Embedder:
        """``"default"`` (the shipped model), a native folder, or a folder with options.json + weights.hdf5.

        Any other folder elmokit writes gives its representation through the one registry
        (``elmokit.representation.identify_folder`` / ``folder_spec``), with the same ``embed`` and
        ``(layers, words, dim)`` contract: a transformers folder (``elmokit pretrain``'s run or ``model/``, any
        local HF folder with a fast tokenizer, a fine-tuned transformer) with ``pooling`` ("first", "mean",
        "last") of a word's subword pieces and ``batch_size``; a CoVe model with ``mode`` ("cove",
        "glove_cove"); a static table. A tagger or classifier folder is a ``RepresentationError`` saying what
        it is and what to do with it.

        ``initial_state``: ``"zero"`` (default) or ``"warm"`` (the folder's warm_state.safetensors,
        written by ``elmokit warm-state``). ``options``: ``batch_size``, ``precision`` ("fp32"
        exact, "bf16" fast), ``token_cache_size``, ``tokenizer`` (default: the segmenter the model
        records in ``lm.json``, see ``elmokit.text.corpus.raw_text_tokenizer``; else whitespace).
        """
        kind = identify_folder(path)
        if kind is not None and kind.name != "elmo":
            if stateful or initial_state != "zero" or options.get("precision", "fp32") != "fp32":
                raise RepresentationError(f"{path}: {kind.what} has no stateful, warm-state or bf16 mode")
            spec = folder_spec(path, kind)
            fields = {name: options.pop(name) for name in ("pooling", "mode") if name in options}
            if spec["kind"] == "transformer" and "batch_size" in options:  # changes its outputs: a spec field
                fields["batch_size"] = options.pop("batch_size")
            return load_representation({**spec, **fields}, **options)
        folder = exported_model(path) if kind is not None else path  # `elmokit train`'s run folder: its model/
        bilm = load_bilm(folder, stateful=stateful, initial_state=initial_state)
        if options.get("tokenizer") is None:
            options["tokenizer"] = raw_text_tokenizer(recorded_tokenizer(folder))
        suffix = "+warm" if initial_state == "warm" else ""
        return cls(bilm, name=f"elmo:{Path(str(path)).name}{suffix}", _owned=True, **options)

    @classmethod
    def from_original(
        cls,
        options_file: str | os.PathLike,
        weight_file: str | os.PathLike,
        *,
        stateful: bool = False,
        initial_state: str = "zero",
        **options,
    ) -> Embedder:
        bilm = load_original(options_file, weight_file, stateful=stateful, initial_state=initial_state)
        suffix = "+warm" if initial_state == "warm" else ""
        return cls(bilm, name=f"elmo:{Path(weight_file).stem}{suffix}", _owned=True, **options)

    @property
    def initial_state(self) -> str:
        return self.bilm.initial_state

    @property
    def num_layers(self) -> int:
        return self.bilm.num_layers

    @property
    def dim(self) -> int:
        return self.bilm.output_dim

    @property
    def stateful(self) -> bool:
        return self.bilm.stateful

    @property
    def fingerprint(self) -> str:
        """Changes whenever the outputs could: weights, configuration, precision, statefulness."""
        if self._fingerprint is None:
            digest = hashlib.sha256(json.dumps(self.bilm.config.to_dict(), sort_keys=True).encode())
            for name, tensor in sorted(self.bilm.state_dict().items()):
                digest.update(name.encode())
                digest.update(tensor.detach().contiguous().cpu().numpy().tobytes())
            digest.update(f"precision={self.bilm.precision};stateful={self.stateful}".encode())
            if self.bilm.warm_h is not None:  # the initial state changes every output
                digest.update(self.bilm.warm_h.cpu().numpy().tobytes() + self.bilm.warm_c.cpu().numpy().tobytes())
            self._fingerprint = f"{self.name}:{digest.hexdigest()[:16]}"
        return self._fingerprint

    def reset_states(self) -> None:
        self.bilm.reset_states()

    def tokenize(self, text: str) -> list[str]:
        """One raw line as tokens: the model's segmenter (``tokenizer``), else whitespace split."""
        return self.tokenizer(text) if self.tokenizer is not None else text.split()

    @torch.inference_mode()
    def embed_batch(self, sentences: Sequence[Sequence[str]]) -> list[np.ndarray]:
        """One biLM call on exactly these sentences (one batch; states carried if stateful)."""
        if not sentences:
            return []
        output = self.bilm(batch_to_ids(sentences), keep_boundaries=False)
        layers = output.layers.permute(1, 0, 2, 3).numpy()  # (B, L+1, T, 2P)
        return [np.ascontiguousarray(layers[b, :, : len(s)]) for b, s in enumerate(sentences)]

    def embed(self, sentences: Sequence[Sequence[str]]) -> list[np.ndarray]:
        """One array (L+1, n_tokens, 2P) per sentence, in the order given.

        Stateless: sentences are batched by length (less padding), results are order-free.
        Stateful: batches of ``batch_size`` in the order given, as the reference does.
        """
        if isinstance(sentences, str) or any(isinstance(s, str) for s in sentences):
            raise TypeError("embed expects tokenised sentences (lists of str); use sentence.split()")
        if self.stateful:
            order = list(range(len(sentences)))
        else:
            order = sorted(range(len(sentences)), key=lambda i: len(sentences[i]), reverse=True)
        results: list[np.ndarray | None] = [None] * len(sentences)
        for start in range(0, len(order), self.batch_size):
            chunk = order[start : start + self.batch_size]
            for index, array in zip(chunk, self.embed_batch([sentences[i] for i in chunk])):
                results[index] = array
        return results  # type: ignore[return-value]

    def embed_sentence(self, tokens: Sequence[str]) -> np.ndarray:
        return self.embed([tokens])[0]

    def embed_file(self, input_file: str | os.PathLike, output_file: str | os.PathLike, **options):
        """Embed a file of sentences (one per line, cut by ``tokenize``: whitespace-tokenised, or raw
        text for a model with a segmenter) into HDF5 in the layout of the old ``allennlp elmo`` command.
        ``options`` (``output_format``, ``use_sentence_keys``, ``forget_sentences``, ``allow_empty_lines``,
        ``progress``): see ``elmokit.formats.embedding_hdf5.embed_file``."""
        return embedding_hdf5.embed_file(self, input_file, output_file, **options)
