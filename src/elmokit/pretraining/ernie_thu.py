"""ERNIE (Tsinghua) (Zhang et al. 2019, "ERNIE: Enhanced Language Representation with Informative Entities"):
a BERT whose upper layers fuse the tokens with the knowledge-graph entities mentioned in the text, pretrained
with masked LM plus the denoising entity auto-encoder (dEA). The knowledge graph is WordNet 3.0
(``knowledge_graph``): synsets are the entities, their TransE vectors the entity embeddings.

Shape legend: B batch, T tokens, H hidden, I intermediate, D entity dimension (TransE's), K candidates.

- Entity mentions (``FirstSenseLinker``, ``GoldMentions``): SemCor's gold senses where a sentence of the
  segment is a SemCor sentence; elsewhere a *first-sense linker*: the longest WordNet lemma (up to
  ``max_words`` words, lower case, joined by ``_``) starting at each word, taken greedily left to right;
  the last word of a candidate may be inflected (WordNet's ``*.exc`` exceptions, morphy's suffix rules), and
  of its base forms the one whose first sense has the most SemCor tags wins; English function words and
  tokens without a letter are never single-word mentions; a lemma links to its sense number 1 in the POS
  whose first sense is most frequent in SemCor's tag counts (``index.sense``). This is
  no disambiguation: every occurrence of a lemma gets the same synset. As in the paper, the entity is
  aligned to the first token (here: word piece) of its mention.
- The knowledgeable encoder (``KnowledgeableEncoder``): the model's lower ``L - M`` BERT layers are the
  T-Encoder; each of the top ``M`` is a K-Encoder layer (``FusionLayer``): eq. 4, multi-head attention on
  each stream, ``w~ = MH-ATT(w)`` (the BERT layer's own attention sub-layer) and ``e~ = MH-ATT(e)`` (over the
  positions that carry an entity), then the information fusion of eq. 5
  ``h_j = GELU(W~_t w~_j + W~_e e~_k + b~)``, ``w_j = GELU(W_t h_j + b_t)``, ``e_k = GELU(W_e h_j + b_e)``,
  and eq. 6 for a token without an entity: ``h_j = GELU(W~_t w~_j + b~)``, ``w_j = GELU(W_t h_j + b_t)``.
  ``W~_t, b~`` are the BERT layer's intermediate dense, ``W_t, b_t`` its output dense. ``fusion="residual"``
  is the authors' released code instead: ``w_j = LayerNorm(W_t h_j + b_t + w~_j)`` (BERT's output sub-layer,
  so a K-Encoder layer is exactly a BERT layer on a token without an entity) and likewise
  ``e_k = LayerNorm(W_e h_j + b_e + e~_k)``.
- dEA (``corrupt_alignments``, ``dea_loss``): of the token-entity alignments, 5% get a random entity, 15%
  are masked (the token enters the K-Encoder without its entity: eq. 6), 80% are kept; every aligned token
  predicts its original entity among the entities aligned in its sequence:
  ``p(e_j | w_i) = softmax_j(linear(w_i^o) . e_j)`` (eq. 7), ``e_j`` the (frozen) TransE vectors.
  The loss is MLM (BERT's 15%, 80/10/10) + dEA, as the paper's (without its NSP).
"""

from __future__ import annotations

import hashlib
import json
import math
import os
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import torch
import torch.nn.functional as F
from torch import nn

from elmokit.pretraining.batching import ObjectiveLoss, chunks, collate, example_field
from elmokit.pretraining.heads import masked_lm_loss
from elmokit.pretraining.knowledge import FUNCTION_WORDS, words_from_pieces
from elmokit.pretraining.knowledge_graph import KnowledgeGraphError, TransEVectors, WordNet, read_wordnet
from elmokit.pretraining.masking import BERT_RATES, MaskingVocab, mask_tokens
from elmokit.text.corpus import Tokenizer

Mention = tuple[int, int, int]  # first word, end word (exclusive), entity index

# WordNet's morphy detachment rules (morph.c): suffix -> replacement, per POS
_RULES = {"n": (("s", ""), ("ses", "s"), ("xes", "x"), ("zes", "z"), ("ches", "ch"), ("shes", "sh"), ("men", "man"),
                ("ies", "y")),
          "v": (("s", ""), ("ies", "y"), ("es", "e"), ("es", ""), ("ed", "e"), ("ed", ""), ("ing", "e"), ("ing", "")),
          "a": (("er", ""), ("est", ""), ("er", "e"), ("est", "e")),
          "r": ()}


# --------------------------------------------------------------------------- entity mentions


class FirstSenseLinker:
    """Plain-text entity linking by WordNet's first sense, longest match first (module docstring)."""

    def __init__(self, wordnet: WordNet, *, max_words: int = 5) -> None:
        self.wordnet, self.max_words = wordnet, max_words
        self.first: dict[str, int] = {}  # lemma -> its first-sense synset
        self.count: dict[str, int] = {}  # lemma -> that sense's tag count
        for lemma, senses in wordnet.senses.items():
            synset = wordnet.first_sense(lemma)
            if synset is not None:
                self.first[lemma] = synset
                self.count[lemma] = max(s[3] for s in senses if s[0] == synset and s[2] == 1)

    def lemma_of(self, words: Sequence[str]) -> str | None:
        """The lemma ``words`` (lower case) link through, or None: of the WordNet base forms of the last word
        (itself, its ``*.exc`` exceptions' bases, morphy's suffix rules of every POS; the other words as they
        are), the one whose first sense has the most SemCor tags; ties to the earlier form (the word itself)."""
        prefix = "_".join(words[:-1])
        forms = [f"{prefix}_{b}" if prefix else b for b in self._bases(words[-1])]
        forms = list(dict.fromkeys(f for f in forms if f in self.first))
        if not forms:
            return None
        return max(forms, key=lambda f: (self.count[f], -forms.index(f)))

    def _bases(self, word: str) -> list[str]:
        forms = [word, *self.wordnet.exceptions.get(word, ())]
        for rules in _RULES.values():
            forms += [word[: len(word) - len(suffix)] + replacement for suffix, replacement in rules
                      if word.endswith(suffix) and len(word) > len(suffix)]
        return list(dict.fromkeys(forms))

    def __call__(self, words: Sequence[str]) -> list[Mention]:
        lower = [w.lower() for w in words]
        out: list[Mention] = []
        i = 0
        while i < len(lower):
            found = None
            for length in range(min(self.max_words, len(lower) - i), 0, -1):
                if length == 1 and (lower[i] in FUNCTION_WORDS or not any(c.isalpha() for c in lower[i])):
                    break
                lemma = self.lemma_of(lower[i:i + length])
                if lemma is not None:
                    found = (i, i + length, self.first[lemma])
                    break
            if found is None:
                i += 1
                continue
            out.append(found)
            i = found[1]
        return out


class GoldMentions:
    """SemCor's gold mentions (``knowledge_graph.write_semcor_corpus``'s JSON lines) found in a word stream.

    The sentences' words are split as the corpus reader splits them, so a SemCor sentence is found wherever
    its words stand contiguously (lower case) in a segment."""

    KEY = 3  # words of the look-up key

    def __init__(self, sentences: Sequence[tuple[Sequence[str], Sequence[tuple[int, int, int]]]]) -> None:
        self.index: dict[tuple[str, ...], list[tuple[tuple[str, ...], list[Mention]]]] = {}
        for words, mentions in sentences:
            if len(words) >= 1:
                entry = (tuple(w.lower() for w in words), [tuple(m) for m in mentions])
                self.index.setdefault(entry[0][: self.KEY], []).append(entry)

    @classmethod
    def from_file(cls, path: str | os.PathLike, wordnet: WordNet) -> GoldMentions:
        split = Tokenizer(kind="regex")
        sentences = []
        path = Path(path)
        if not path.exists():
            raise KnowledgeGraphError(f"{path}: no such file; fix: write it with knowledge_graph.write_semcor_corpus")
        with open(path, encoding="utf-8") as handle:
            for number, line in enumerate(handle, 1):
                try:
                    row = json.loads(line)
                    words, starts = [], []
                    for word in row["words"]:
                        starts.append(len(words))
                        words.extend(split(word) or [word])
                    starts.append(len(words))
                    mentions = [(starts[s], starts[e], wordnet.index[name]) for s, e, name in row["mentions"]]
                except (ValueError, KeyError, IndexError, TypeError):
                    raise KnowledgeGraphError(f"{path}:{number}: not a mention line of write_semcor_corpus (or a "
                                              "synset this WordNet lacks); fix: write it again") from None
                sentences.append((words, mentions))
        return cls(sentences)

    def __call__(self, words: Sequence[str]) -> tuple[list[Mention], np.ndarray]:
        """Gold mentions in ``words`` and which words lie in a found SemCor sentence (bool (n,))."""
        lower = tuple(w.lower() for w in words)
        covered = np.zeros(len(lower), dtype=bool)
        out: list[Mention] = []
        i = 0
        while i < len(lower):
            match = next((e for e in self.index.get(lower[i:i + self.KEY], ()) if lower[i:i + len(e[0])] == e[0]), None)
            if match is None:
                i += 1
                continue
            out += [(i + s, i + e, k) for s, e, k in match[1]]
            covered[i:i + len(match[0])] = True
            i += len(match[0])
        return out, covered


def link(words: Sequence[str], linker: FirstSenseLinker | None, gold: GoldMentions | None) -> list[Mention]:
    """Gold mentions inside SemCor sentences, the first-sense linker's on the other words."""
    mentions: list[Mention] = []
    covered = np.zeros(len(words), dtype=bool)
    if gold is not None:
        mentions, covered = gold(words)
    if linker is not None:
        start = 0
        while start < len(words):  # the linker on each run of uncovered words
            if covered[start]:
                start += 1
                continue
            end = start
            while end < len(words) and not covered[end]:
                end += 1
            mentions += [(start + s, start + e, k) for s, e, k in linker(words[start:end])]
            start = end
    return sorted(mentions)


def align(word_ids: Sequence, mentions: Sequence[Mention]) -> np.ndarray:
    """(T,) entity index at the first piece of each mention's first word, -1 elsewhere (the paper aligns an
    entity to the first token of its mention)."""
    first_piece: dict[int, int] = {}
    for position, word in enumerate(word_ids):
        if word is not None and word >= 0 and word not in first_piece:
            first_piece[int(word)] = position
    out = np.full(len(word_ids), -1, dtype=np.int64)
    for start, _end, entity in mentions:
        if start in first_piece:
            out[first_piece[start]] = entity
    return out


# --------------------------------------------------------------------------- dEA corruption


@dataclass(frozen=True)
class DeaRates:
    """dEA's corruption of token-entity alignments (paper §4.2): replace 5%, mask 15%, keep the rest."""

    replace: float = 0.05
    mask: float = 0.15

    def __post_init__(self) -> None:
        if not (0 <= self.replace and 0 <= self.mask and self.replace + self.mask <= 1):
            raise ValueError(f"bad dEA rates {self}: need replace, mask >= 0 and replace + mask <= 1")


KEEP, REPLACE, MASK = 0, 1, 2


def corrupt_alignments(entities: np.ndarray, num_entities: int, rng: np.random.Generator,
                       rates: DeaRates = DeaRates()) -> tuple[np.ndarray, np.ndarray]:
    """(input entities, decisions): each alignment (entity >= 0) independently kept, replaced by a uniform
    random entity, or masked (-1 in the input); the targets are ``entities`` themselves."""
    entities = np.asarray(entities, dtype=np.int64)
    aligned = entities >= 0
    u = rng.random(len(entities))
    random_entities = rng.integers(0, num_entities, size=len(entities))
    decisions = np.where(u < rates.replace, REPLACE, np.where(u < rates.replace + rates.mask, MASK, KEEP))
    decisions = np.where(aligned, decisions, -1)
    out = np.where(decisions == REPLACE, random_entities, entities)
    out = np.where(decisions == MASK, -1, out)
    return out, decisions


# --------------------------------------------------------------------------- the knowledgeable encoder


class EntityAttention(nn.Module):
    """Multi-head self-attention over the positions that carry an entity, with the residual and LayerNorm of
    a transformer sub-layer (the token stream's is BERT's own ``BertAttention``)."""

    def __init__(self, dim: int, heads: int, *, dropout: float = 0.1, eps: float = 1e-12) -> None:
        super().__init__()
        if dim % heads:
            raise ValueError(f"entity dimension {dim} is not a multiple of the {heads} entity heads")
        self.heads = heads
        self.qkv = nn.Linear(dim, 3 * dim)
        self.out = nn.Linear(dim, dim)
        self.norm = nn.LayerNorm(dim, eps=eps)
        self.dropout = nn.Dropout(dropout)

    def forward(self, e: torch.Tensor, has_entity: torch.Tensor) -> torch.Tensor:
        """e: (B, T, D); has_entity: (B, T) bool. Positions without an entity neither attend nor are attended."""
        B, T, D = e.shape
        q, k, v = self.qkv(e).view(B, T, 3, self.heads, D // self.heads).permute(2, 0, 3, 1, 4)  # (B, h, T, D/h)
        scores = q @ k.transpose(-1, -2) / math.sqrt(D // self.heads)  # (B, h, T, T)
        keys = has_entity[:, None, None, :]
        # a row without entities would attend to nothing: let it see every key (its output is zeroed below)
        keys = keys | ~has_entity.any(1)[:, None, None, None]
        weights = self.dropout(torch.softmax(scores.masked_fill(~keys, float("-inf")), dim=-1))
        context = (weights @ v).transpose(1, 2).reshape(B, T, D)
        out = self.norm(self.dropout(self.out(context)) + e)
        return out * has_entity[..., None]


class FusionLayer(nn.Module):
    """The entity side of one K-Encoder layer; the token side is a BERT layer passed to ``forward`` (its
    weights stay in the HF model). Eq. 4-6 (module docstring)."""

    FUSIONS = ("paper", "residual")

    def __init__(self, entity_dim: int, intermediate: int, *, heads: int = 1, fusion: str = "paper",
                 dropout: float = 0.1, eps: float = 1e-12) -> None:
        super().__init__()
        if fusion not in self.FUSIONS:
            raise ValueError(f"fusion {fusion!r}: use one of {', '.join(self.FUSIONS)}")
        self.fusion = fusion
        self.attention = EntityAttention(entity_dim, heads, dropout=dropout, eps=eps)
        self.entity_in = nn.Linear(entity_dim, intermediate, bias=False)  # W~_e (b~ is the token side's)
        self.entity_out = nn.Linear(intermediate, entity_dim)  # W_e, b_e
        self.norm = nn.LayerNorm(entity_dim, eps=eps)  # fusion="residual" only
        self.dropout = nn.Dropout(dropout)

    def forward(self, token_layer, w: torch.Tensor, e: torch.Tensor, has_entity: torch.Tensor,
                attention_mask: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """w: (B, T, H), e: (B, T, D), has_entity: (B, T) bool, attention_mask: (B, 1, 1, T) additive.
        Returns (w', e'), e' zero where no entity."""
        w_t = token_layer.attention(w, attention_mask=attention_mask)[0]  # eq. 4: w~ (B, T, H)
        e_t = self.attention(e, has_entity)  # eq. 4: e~ (B, T, D)
        # eq. 5: h = GELU(W~_t w~ + W~_e e~ + b~); eq. 6 (no entity): h = GELU(W~_t w~ + b~). e~ is 0 there.
        h = F.gelu(token_layer.intermediate.dense(w_t) + self.entity_in(e_t))  # (B, T, I)
        if self.fusion == "paper":
            w_out = F.gelu(token_layer.output.dense(h))  # w = GELU(W_t h + b_t)
            e_out = F.gelu(self.entity_out(h))  # e = GELU(W_e h + b_e)
        else:
            w_out = token_layer.output(h, w_t)  # LayerNorm(dropout(W_t h + b_t) + w~): BERT's output sub-layer
            e_out = self.norm(self.dropout(self.entity_out(h)) + e_t)
        return w_out, e_out * has_entity[..., None]


class KnowledgeableEncoder(nn.Module):
    """T-Encoder (the BERT model's lower layers) then K-Encoder (its top ``k_layers`` with ``FusionLayer``s).
    Holds the entity-side modules and the frozen TransE table (a non-persistent buffer: it is rebuilt from its
    folder, not checkpointed); the BERT weights stay in the HF model."""

    def __init__(self, entity_vectors: np.ndarray, *, hidden: int, intermediate: int, k_layers: int, heads: int = 1,
                 fusion: str = "paper", dropout: float = 0.1) -> None:
        super().__init__()
        D = int(entity_vectors.shape[1])
        self.k_layers = k_layers
        self.register_buffer("entity_table", torch.as_tensor(np.asarray(entity_vectors, dtype=np.float32)),
                             persistent=False)  # (E, D)
        self.fusions = nn.ModuleList(FusionLayer(D, intermediate, heads=heads, fusion=fusion, dropout=dropout)
                                     for _ in range(k_layers))
        self.dea = nn.Linear(hidden, D)  # eq. 7's linear(w^o)

    def forward(self, model, input_ids: torch.Tensor, attention_mask: torch.Tensor,
                entity_ids: torch.Tensor, token_type_ids: torch.Tensor | None = None,
                all_layers: bool = False) -> torch.Tensor | list[torch.Tensor]:
        """(B, T, H) the last token layer; with ``all_layers`` the list of the embedding output and every
        layer's token output (as HF's ``hidden_states``), for reading the trained encoder with its entities.
        entity_ids: (B, T) entity index or -1."""
        bert = model.base_model
        layers = bert.encoder.layer
        if not 0 <= self.k_layers <= len(layers):
            raise ValueError(f"{self.k_layers} K-Encoder layers in a {len(layers)}-layer model")
        w = bert.embeddings(input_ids=input_ids, token_type_ids=token_type_ids)  # (B, T, H)
        hidden = [w]
        mask = (1.0 - attention_mask[:, None, None, :].to(w.dtype)) * torch.finfo(w.dtype).min  # (B, 1, 1, T)
        n_t = len(layers) - self.k_layers
        for layer in layers[:n_t]:  # T-Encoder
            w = layer(w, attention_mask=mask)
            w = w[0] if isinstance(w, tuple) else w
            hidden.append(w)
        has_entity = entity_ids >= 0
        e = self.entity_table[entity_ids.clamp(min=0)] * has_entity[..., None]  # (B, T, D)
        for layer, fusion in zip(layers[n_t:], self.fusions):  # K-Encoder
            w, e = fusion(layer, w, e, has_entity, mask)
            hidden.append(w)
        return hidden if all_layers else w


def dea_loss(encoder: KnowledgeableEncoder, hidden: torch.Tensor, entity_labels: torch.Tensor,
             candidates: torch.Tensor) -> tuple[torch.Tensor, int]:
    """Eq. 7 summed over the aligned tokens: cross-entropy of ``softmax_j(linear(w_i) . e_j)`` over the
    sequence's candidates. hidden (B, T, H); entity_labels (B, T) target entity or -1; candidates (B, K)
    the sequence's aligned entities, -1 padded. Returns (sum, count)."""
    rows, cols = (entity_labels >= 0).nonzero(as_tuple=True)  # (N,)
    if rows.numel() == 0:
        return hidden.sum() * 0.0, 0
    query = encoder.dea(hidden[rows, cols])  # (N, D)
    cand = candidates[rows]  # (N, K)
    vectors = encoder.entity_table[cand.clamp(min=0)]  # (N, K, D)
    logits = torch.einsum("nd,nkd->nk", query, vectors).masked_fill(cand < 0, float("-inf"))
    target = (cand == entity_labels[rows, cols][:, None]).float().argmax(1)  # (N,)
    return F.cross_entropy(logits.float(), target, reduction="sum"), int(rows.numel())


# --------------------------------------------------------------------------- the objective


class ErnieThuObjective:
    """MLM + dEA on the knowledgeable encoder. Examples: ``input_ids`` + ``word_ids`` of one segment, and
    optionally ``mentions`` (word ranges with entity indices); without them the words are spelled back from
    the pieces and linked (``link``). Model: family 'bert-mlm'."""

    name = "ernie-thu"

    def __init__(self, vocab: MaskingVocab, encoder: KnowledgeableEncoder, *, pad_id: int, tokenizer=None,
                 linker: FirstSenseLinker | None = None, gold: GoldMentions | None = None,
                 rates: DeaRates = DeaRates(), sources: Mapping[str, str] | None = None) -> None:
        self.vocab, self.encoder, self.pad_id, self.tokenizer = vocab, encoder, pad_id, tokenizer
        self.linker, self.gold, self.rates = linker, gold, rates
        self.sources = dict(sources or {})  # what the knowledge came from: {name: sha256}, checked on resume
        self.num_entities = int(encoder.entity_table.shape[0])

    def modules(self) -> dict[str, nn.Module]:
        return {"ernie_thu": self.encoder}

    def state_dict(self) -> dict:
        return {"sources": self.sources}

    def load_state_dict(self, state: Mapping) -> None:
        """Refuse to resume over another WordNet, TransE table or mention file: the frozen table and the
        mentions are read again, not checkpointed, so they must be the ones the run started with."""
        saved = dict(state.get("sources", {}))
        changed = sorted(k for k in set(saved) | set(self.sources) if saved.get(k) != self.sources.get(k))
        if changed:
            raise KnowledgeGraphError(f"--resume: {', '.join(changed)} changed since the run started (sha256 differs); "
                                      "fix: give the files the run started with, or start a new run")

    def mentions(self, example) -> list[Mention]:
        given = example_field(example, "mentions")
        if given is not None:
            return [tuple(m) for m in given]
        if self.tokenizer is None:
            raise ValueError("example has no 'mentions' and the objective has no tokenizer to read its words")
        words = words_from_pieces(self.tokenizer, example_field(example, "input_ids"), example_field(example, "word_ids"))
        return link(words, self.linker, self.gold)

    def row(self, example, rng: np.random.Generator) -> dict[str, np.ndarray]:
        ids, word_ids = example_field(example, "input_ids"), example_field(example, "word_ids")
        masked = mask_tokens(ids, self.vocab, rng, word_ids=word_ids, rates=BERT_RATES)
        targets = align(word_ids, self.mentions(example))
        entity_ids, _ = corrupt_alignments(targets, self.num_entities, rng, self.rates)
        return {"input_ids": masked.input_ids, "labels": masked.labels, "entity_ids": entity_ids,
                "entity_labels": targets}

    def batches(self, examples, *, batch_size: int, rng: np.random.Generator) -> Iterator[dict[str, torch.Tensor]]:
        """input_ids, labels, attention_mask, entity_ids, entity_labels (B, T); candidates (B, K)."""
        for chunk in chunks(examples, batch_size):
            rows = [self.row(e, rng) for e in chunk]
            batch = collate(rows, pad_id=self.pad_id)
            for name in ("entity_ids", "entity_labels"):  # collate pads with 0, an entity: pad with -1
                for b, r in enumerate(rows):
                    batch[name][b, len(r[name]):] = -1
            unique = [np.unique(r["entity_labels"][r["entity_labels"] >= 0]) for r in rows]
            K = max(1, max(len(u) for u in unique))
            candidates = np.full((len(rows), K), -1, dtype=np.int64)
            for b, u in enumerate(unique):
                candidates[b, : len(u)] = u
            batch["candidates"] = torch.from_numpy(candidates)
            yield batch

    def loss(self, model, batch: Mapping[str, torch.Tensor]) -> ObjectiveLoss:
        hidden = self.encoder(model, batch["input_ids"], batch["attention_mask"], batch["entity_ids"],
                              batch.get("token_type_ids"))
        mlm = masked_lm_loss(model, hidden, batch["labels"])
        dea_sum, dea_count = dea_loss(self.encoder, hidden, batch["entity_labels"], batch["candidates"])
        dea = dea_sum / max(dea_count, 1)
        return ObjectiveLoss(mlm.mean + dea, {"mlm": float(mlm.mean.detach()), "dea": float(dea.detach()),
                                              "alignments": float(dea_count)},
                             mlm.count, int(batch["attention_mask"].sum()))


def ernie_thu_from_options(tokenizer, model, options: Mapping) -> ErnieThuObjective:
    """The ``elmokit pretrain --objective ernie-thu`` set-up. options: ``ernie_thu_wordnet`` (WordNet 3.0's
    folder or archive, needed), ``ernie_thu_transe`` (a ``TransEVectors`` folder over that WordNet, needed),
    ``ernie_thu_mentions`` (SemCor's gold mentions, optional), ``ernie_thu_linker`` (bool, default True),
    ``ernie_thu_k_layers`` (default: half the layers, at least 1), ``ernie_thu_fusion`` ("paper"/"residual")."""
    wordnet_path, transe_path = options.get("ernie_thu_wordnet"), options.get("ernie_thu_transe")
    if not wordnet_path or not transe_path:
        raise KnowledgeGraphError("--objective ernie-thu needs --ernie-thu-wordnet (WordNet 3.0's folder or archive) "
                                  "and --ernie-thu-transe (a folder of knowledge_graph.train_wordnet_transe)")
    wordnet = read_wordnet(wordnet_path)
    vectors = TransEVectors.load(transe_path)
    if vectors.names != wordnet.synsets:
        raise KnowledgeGraphError(f"{transe_path}: its entities are not the synsets of {wordnet_path}; fix: train "
                                  "TransE on this WordNet (knowledge_graph.train_wordnet_transe)")
    layers = int(model.config.num_hidden_layers)
    k_layers = int(options.get("ernie_thu_k_layers") or max(1, layers // 2))
    if not 1 <= k_layers <= layers:
        raise ValueError(f"ernie_thu_k_layers {k_layers}: give 1 to {layers} (the model's layers)")
    dim = int(vectors.entities.shape[1])
    encoder = KnowledgeableEncoder(vectors.entities, hidden=int(model.config.hidden_size),
                                   intermediate=int(model.config.intermediate_size), k_layers=k_layers,
                                   heads=4 if dim % 4 == 0 else 1,  # the authors' code: 4 entity heads at width 100
                                   fusion=options.get("ernie_thu_fusion") or "paper",
                                   dropout=float(model.config.hidden_dropout_prob))
    linker = FirstSenseLinker(wordnet) if options.get("ernie_thu_linker", True) else None
    gold = GoldMentions.from_file(options["ernie_thu_mentions"], wordnet) if options.get("ernie_thu_mentions") else None
    sources = {"wordnet": _sha256(wordnet_path), "transe": _sha256(transe_path)}
    if options.get("ernie_thu_mentions"):
        sources["mentions"] = _sha256(options["ernie_thu_mentions"])
    return ErnieThuObjective(MaskingVocab.from_tokenizer(tokenizer), encoder, pad_id=tokenizer.pad_token_id,
                             tokenizer=tokenizer, linker=linker, gold=gold, sources=sources)


def _sha256(path: str | os.PathLike) -> str:
    """sha256 of a file, or of a folder's files (names and contents, sorted)."""
    path = Path(path)
    digest = hashlib.sha256()
    for file in sorted(p for p in path.rglob("*") if p.is_file()) if path.is_dir() else [path]:
        digest.update(str(file.relative_to(path)).encode() + b"\0" if path.is_dir() else b"")
        with open(file, "rb") as handle:
            for block in iter(lambda: handle.read(1 << 20), b""):
                digest.update(block)
    return digest.hexdigest()
