"""A trained tagger as users keep it: ``SequenceTagger`` (predict, evaluate, save, load).

A saved tagger is a folder: ``config.json`` (TaggerConfig), ``model.safetensors``, ``vocab.json``
(words and labels), ``metrics.json`` (training history), and ``bilm/`` when fine-tuned. Loading
rebuilds the representation from the config's spec (``elmokit.representation``) unless one is
given.

Shapes: B batch, T tokens, L representation layers, D representation dim, N labels.
"""

from __future__ import annotations

import json
import os
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import Any

import torch
from safetensors.torch import load_file, save_file

from elmokit.errors import UserError
from elmokit.features import pad_features
from elmokit.formats import load_bilm, save_native
from elmokit.formats.checks import refuse_non_finite, refuse_non_finite_read
from elmokit.io import output_directory
from elmokit.representation import RepresentationError, load_representation
from elmokit.tasks.data import TaggedCorpus, bio_to_bioes, bioes_to_bio
from elmokit.tasks.tagger.metrics import score
from elmokit.tasks.tagger.model import UNK, TaggerConfig, TaggerModel
from elmokit.text.chars import batch_to_ids

CONFIG_NAME, WEIGHTS_NAME, VOCAB_NAME, METRICS_NAME, BILM_DIR = (
    "config.json", "model.safetensors", "vocab.json", "metrics.json", "bilm")
SAVED_BY = "tag train"  # the command whose output a tagger folder is (either recipe): it may replace it


class TaggerFolderError(UserError):
    """A tagger folder that cannot be loaded; the message names the file and the problem."""



class SequenceTagger:
    """A trained tagger: the model, its vocabularies and (for ELMo taggers) the representation."""

    def __init__(self, config: TaggerConfig, words: Sequence[str], labels: Sequence[str],
                 representation=None, model: TaggerModel | None = None) -> None:
        self.config = config
        self.words = list(words)
        self.word_index = {w: i for i, w in enumerate(self.words)}
        self.labels = list(labels)  # in the training scheme (BIOES labels when trained in BIOES)
        self.label_index = {l: i for i, l in enumerate(self.labels)}
        self.representation = representation
        self.model = model if model is not None else TaggerModel(config, len(self.words), len(self.labels), self.labels)
        self.history: list[dict] = []
        self.best_epoch: int | None = None
        self.results: dict[str, Any] = {}  # final scores and the command, saved in metrics.json

    # -- inputs
    def word_ids(self, tokens: Sequence[str]) -> list[int]:
        unk = self.word_index[UNK]
        if self.config.lowercase:
            tokens = [t.lower() for t in tokens]
        return [self.word_index.get(t, unk) for t in tokens]

    def _encode_labels(self, labels: Sequence[str]) -> list[str]:
        return bio_to_bioes(labels) if self.config.scheme == "BIOES" else list(labels)

    def _decode_labels(self, labels: Sequence[str]) -> list[str]:
        return bioes_to_bio(labels) if self.config.scheme == "BIOES" else list(labels)

    def _inputs(self, sentences, indices, features=None, labels=None) -> dict[str, torch.Tensor]:
        chosen = [sentences[i] for i in indices]
        steps = max(len(s) for s in chosen)
        word_ids = torch.zeros(len(chosen), steps, dtype=torch.long)
        for b, tokens in enumerate(chosen):
            word_ids[b, : len(tokens)] = torch.tensor(self.word_ids(tokens))
        mask = word_ids.new_zeros(word_ids.shape, dtype=torch.bool)
        for b, tokens in enumerate(chosen):
            mask[b, : len(tokens)] = True
        batch = {"word_ids": word_ids, "mask": mask}
        if self.model.char_encoder is not None or self.model.bilm is not None:
            batch["char_ids"] = batch_to_ids(chosen)
        if self.config.elmo != "none":
            if self.model.bilm is None:
                if features is not None:
                    feats, feature_mask = features.batch(indices)
                else:
                    feats, feature_mask = pad_features(self.representation.embed(chosen))
                if feats.shape[1:2] != (self.config.elmo_layers,) or feats.shape[-1] != self.config.elmo_dim:
                    raise ValueError(f"features of shape {tuple(feats.shape)} for a tagger trained on "
                                     f"{self.config.elmo_layers} layers of dim {self.config.elmo_dim}")
                if not torch.equal(feature_mask, mask):
                    raise ValueError("the features do not match the sentences (token counts differ)")
                batch["features"] = torch.as_tensor(feats, dtype=torch.float32)
        if labels is not None:
            tags = torch.zeros_like(word_ids)
            for b, i in enumerate(indices):
                tags[b, : len(labels[i])] = torch.tensor([self.label_index[l] for l in self._encode_labels(labels[i])])
            batch["tags"] = tags
        return batch

    def _emissions(self, batch: dict[str, torch.Tensor]) -> torch.Tensor:
        return self.model.emissions(batch["word_ids"], batch["mask"], batch.get("features"), batch.get("char_ids"))

    # -- prediction
    @torch.no_grad()
    def predict(self, sentences: Sequence[Sequence[str]], *, batch_size: int = 64, features=None) -> list[list[str]]:
        """Labels (BIO for NER) for each sentence. ``features``: a precomputed feature source."""
        if self.config.elmo != "none" and self.model.bilm is None and features is None and self.representation is None:
            raise ValueError("this tagger needs its representation: load it with SequenceTagger.load(..., representation=...)")
        self.model.eval()
        order = sorted(range(len(sentences)), key=lambda i: len(sentences[i]))  # similar lengths together
        results: list[list[str]] = [[] for _ in sentences]
        for start in range(0, len(order), batch_size):
            indices = [i for i in order[start : start + batch_size] if len(sentences[i]) > 0]
            if not indices:
                continue
            batch = self._inputs(sentences, indices, features)
            paths = self.model.decode(self._emissions(batch), batch["mask"])
            for i, path in zip(indices, paths):
                results[i] = self._decode_labels([self.labels[j] for j in path])
        return results

    def evaluate(self, corpus: TaggedCorpus, *, features=None, batch_size: int = 64) -> dict[str, Any]:
        predictions = self.predict(corpus.sentences, batch_size=batch_size, features=features)
        return score(corpus.labels, predictions, self.config.task)

    def mixing_weights(self) -> dict[str, Any]:
        """softmax(w) and gamma of each learned mix (what the layers contributed)."""
        out: dict[str, Any] = {}
        for name, mix in (("input", self.model.input_mix), ("output", self.model.output_mix)):
            if mix is not None:
                out[name] = {"softmax_w": [round(float(v), 6) for v in mix.weights().detach()],
                             "gamma": round(float(mix.gamma.detach()), 6)}
        return out

    # -- saving and loading
    def save(self, directory: str | os.PathLike, *, inputs: Iterable[str | os.PathLike | None] = ()) -> Path:
        """Write the tagger folder atomically under the output policy (``elmokit.io.output_directory``):
        a new or empty folder, or an earlier tagger folder, which the complete new one replaces; never
        a file, one of ``inputs``, or a folder holding anything else."""
        directory = Path(directory)
        state = {k: v.detach().contiguous() for k, v in self.model.state_dict().items() if not k.startswith("bilm.")}
        refuse_non_finite(state, directory / WEIGHTS_NAME)
        with output_directory(directory, command=SAVED_BY, inputs=inputs, artifact="tagger") as tmp:
            (tmp / CONFIG_NAME).write_text(json.dumps(self.config.to_dict(), indent=2) + "\n", encoding="utf-8")
            save_file(state, str(tmp / WEIGHTS_NAME), metadata={"format": "elmokit-tagger"})
            vocab = {"words": self.words, "labels": self.labels}
            (tmp / VOCAB_NAME).write_text(json.dumps(vocab, ensure_ascii=False) + "\n", encoding="utf-8")
            metrics = {**self.results, "best_epoch": self.best_epoch, "mixing_weights": self.mixing_weights(),
                       "history": self.history}
            (tmp / METRICS_NAME).write_text(json.dumps(metrics, indent=2) + "\n", encoding="utf-8")
            if self.model.bilm is not None:
                save_native(self.model.bilm, tmp / BILM_DIR)
        return directory

    @classmethod
    def load(cls, directory: str | os.PathLike, *, representation=None) -> SequenceTagger:
        """Read a tagger folder. The representation is rebuilt from the config unless given."""
        directory = Path(directory)
        for name in (CONFIG_NAME, WEIGHTS_NAME, VOCAB_NAME):
            if not (directory / name).is_file():
                raise TaggerFolderError(f"{directory}: not a tagger folder (no {name}); train one with `elmokit tag train`")
        try:
            config = TaggerConfig.from_dict(json.loads((directory / CONFIG_NAME).read_text(encoding="utf-8")))
            vocab = json.loads((directory / VOCAB_NAME).read_text(encoding="utf-8"))
        except (ValueError, TypeError) as error:
            raise TaggerFolderError(f"{directory}: {error}") from None
        tagger = cls(config, vocab["words"], vocab["labels"])
        if config.fine_tune:
            tagger.model.bilm = load_bilm(directory / BILM_DIR)
            tagger.model.bilm.disable_token_cache()
        elif config.elmo != "none":
            if representation is None:
                try:
                    representation = load_representation(config.representation, base=directory,
                                                          source=str(directory / CONFIG_NAME))
                except RepresentationError as error:
                    raise TaggerFolderError(str(error)) from None
                if representation is None:
                    raise TaggerFolderError(f"{directory / CONFIG_NAME}: an ELMo tagger without a representation "
                                            "spec; pass the representation: SequenceTagger.load(..., representation=...)")
            if (representation.num_layers, representation.dim) != (config.elmo_layers, config.elmo_dim):
                raise TaggerFolderError(
                    f"{directory}: trained on {config.elmo_layers} layers of dim {config.elmo_dim}, but the "
                    f"representation {representation.name} has {representation.num_layers} of dim {representation.dim}")
            tagger.representation = representation
        missing, unexpected = tagger.model.load_state_dict(
            refuse_non_finite_read(load_file(str(directory / WEIGHTS_NAME)), directory / WEIGHTS_NAME), strict=False)
        missing = [k for k in missing if not k.startswith("bilm.")]
        if missing or unexpected:
            raise TaggerFolderError(f"{directory / WEIGHTS_NAME}: missing {missing}, unexpected {unexpected}")
        metrics_path = directory / METRICS_NAME
        if metrics_path.is_file():
            metrics = json.loads(metrics_path.read_text(encoding="utf-8"))
            tagger.history, tagger.best_epoch = metrics.get("history", []), metrics.get("best_epoch")
        tagger.model.eval()
        return tagger
