"""Training the CoVe MT model (``transfer/cove.py``): parallel data, the run folder, exact resume, BLEU.

Data. ``read_parallel(src, tgt)`` reads two line-aligned files (plain, .xz, .gz). Files in the
verse format of ``shared/data/bible_parallel`` (``BB.CCC.VVV<TAB>text``, the same ids in both) are
split by *whole books*: ``valid_books`` (default 45, Romans) and ``test_books`` (default 44, Acts)
are held out, the rest trains (the Gospels repeat each other, so random verses would leak).
Plain files train whole; ``--valid-src/--valid-tgt`` add a validation pair. Text is cut with the
regex ``\\w+|[^\\w\\s]``; the source side is lowercased when the vectors are (GloVe here is),
the target side when ``lowercase_target`` (default; BLEU is then lowercased BLEU).

Run folder: the engine's (``engine/run_folder.py``, the loop ``StepLoop``); beside its record and metrics
it holds ``config.json`` (CoveConfig), ``target_vocab.txt`` (<pad> <unk> <s> </s> first), and at the end
``model/`` (``cove.py``'s folder, with the frozen vectors) and ``bleu.json`` (sacrebleu on the held-out
splits, hypotheses in ``<split>.hyp.txt``). ``training.json`` fingerprints the parallel files and the vectors.

Exactness. The initial weights come from the seed; batch order from (seed, epoch); the data
position, Adam's moments and the torch RNG (dropout) are in each checkpoint. So N steps equal
N/2 steps, a stop, ``--resume`` and N/2 more, bit for bit on the same machine and thread count.
"""

from __future__ import annotations

import dataclasses
import json
import logging
import math
import os
import re
import sys
import time
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import ClassVar

import numpy as np
import torch

from elmokit.configs import SavedConfig
from elmokit.engine.checkpoint import file_sha256, write_checkpoint
from elmokit.engine.distributed import DistributedContext
from elmokit.engine.run_folder import (
    MetricsLog,
    RunFolder,
    model_card,
    resumable,
    resume_differences,
    truncate_metrics,
)
from elmokit.engine.steps import RunResult, StepLoop, StepOutcome, planned_batches, update_if_finite
from elmokit.errors import InputNotFound, UserError
from elmokit.io import atomic_path, write_json
from elmokit.static.vectors import StaticVectors
from elmokit.text.corpus import Tokenizer, open_text
from elmokit.transfer.cove import (
    BOS,
    EOS,
    TARGET_SPECIALS,
    UNK,
    CoveConfig,
    CoveError,
    CoveModel,
    load_cove_model,
    save_cove_model,
)

logger = logging.getLogger(__name__)

VERSE_ID = re.compile(r"^(\d\d)\.\d{3}\.\d{3}$")
RUN_KIND = "cove train"


class ParallelDataError(CoveError):
    """Parallel files that do not line up; the message names the file, the line and the fix."""


# ---------------------------------------------------------------------------------------- config


@dataclass(frozen=True, kw_only=True)
class CoveTrainingConfig(SavedConfig):
    """How to train. Saved in ``training.json``. Stop at ``max_steps`` or after ``epochs`` (either may be None).
    Fields declared ``resumable()`` may differ when a run is resumed."""

    FORMAT_VERSION: ClassVar[int] = 1
    WHAT = "CoVe training config"
    batch_size: int = 64  # sentence pairs per step
    lr: float = 1e-3  # Adam
    clip_norm: float = 5.0
    max_length: int = 80  # pairs with a longer side are left out of training
    target_vocab_size: int = 20_000  # most frequent target words (ties: alphabetical), + the 4 specials
    target_min_count: int = 2
    lowercase_target: bool = True
    valid_books: tuple[int, ...] = (45,)
    test_books: tuple[int, ...] = (44,)
    seed: int = 1
    max_steps: int | None = resumable(None)
    epochs: int | None = resumable(None)
    checkpoint_every: int = resumable(500)
    keep_checkpoints: int = resumable(2)
    log_every: int = resumable(50)
    valid_every: int = resumable(500)
    skip_nonfinite_steps: int = resumable(0)  # skip up to this many steps whose loss or gradient is NaN/inf; then stop

    def __post_init__(self):
        self.require(">= 1", "batch_size", "max_length", "target_vocab_size", "target_min_count", "checkpoint_every",
                     "keep_checkpoints", "log_every", "valid_every", "max_steps", "epochs")
        self.require(">= 0", "skip_nonfinite_steps")
        self.require("finite > 0", "lr", "clip_norm")
        if self.max_steps is None and self.epochs is None:
            raise UserError("give max_steps or epochs (--max-steps N or --epochs N): when to stop")
        object.__setattr__(self, "valid_books", tuple(self.valid_books))
        object.__setattr__(self, "test_books", tuple(self.test_books))

    def to_dict(self) -> dict:
        return {**dataclasses.asdict(self), "format_version": self.FORMAT_VERSION}


# ---------------------------------------------------------------------------------------- data

@dataclass
class ParallelSplit:
    source: list[list[str]]
    target: list[list[str]]
    ids: list[str]  # verse ids, or "<file>:<line>"

    def __len__(self) -> int:
        return len(self.source)


def _read_lines(path: str | os.PathLike) -> list[str]:
    try:
        with open_text(path) as handle:
            return [line.rstrip("\n") for line in handle]
    except FileNotFoundError:
        raise InputNotFound(f"{path}: no such file") from None
    except UnicodeDecodeError as error:
        raise ParallelDataError(f"{path}: not UTF-8 ({error.reason} at byte {error.start})") from None
    except (OSError, EOFError) as error:
        raise ParallelDataError(f"{path}: unreadable ({error})") from None


def _is_verse_file(lines: list[str]) -> bool:
    head = [line for line in lines[:20] if line.strip()]
    return bool(head) and all(VERSE_ID.match(line.partition("\t")[0]) for line in head)


def read_parallel(src: str | os.PathLike, tgt: str | os.PathLike, *, source_lowercase: bool = True,
                  target_lowercase: bool = True, valid_books: Sequence[int] = (45,),
                  test_books: Sequence[int] = (44,)) -> dict[str, ParallelSplit]:
    """The splits of two line-aligned files: {"train", "valid", "test"} for verse files (held-out
    books), {"train"} for plain files. Raises ParallelDataError naming the file and line that do not fit."""
    source_lines, target_lines = _read_lines(src), _read_lines(tgt)
    if len(source_lines) != len(target_lines):
        raise ParallelDataError(f"{src} has {len(source_lines)} lines but {tgt} has {len(target_lines)}; "
                                "fix: give line-aligned files (line i of one translates line i of the other)")
    verses = _is_verse_file(source_lines)
    if verses != _is_verse_file(target_lines):
        raise ParallelDataError(f"{src if verses else tgt} is in the verse format (BB.CCC.VVV<TAB>text) but "
                                f"{tgt if verses else src} is not; fix: give two files of the same format")
    held = {b: "valid" for b in valid_books} | {b: "test" for b in test_books}
    splits = {name: ParallelSplit([], [], []) for name in (("train", "valid", "test") if verses else ("train",))}
    src_tok = Tokenizer(kind="regex", lowercase=source_lowercase)
    tgt_tok = Tokenizer(kind="regex", lowercase=target_lowercase)
    for number, (source_line, target_line) in enumerate(zip(source_lines, target_lines), 1):
        if verses:
            (source_id, tab_s, source_text), (target_id, tab_t, target_text) = (
                source_line.partition("\t"), target_line.partition("\t"))
            for path, identifier, tab in ((src, source_id, tab_s), (tgt, target_id, tab_t)):
                if not tab or not VERSE_ID.match(identifier):
                    raise ParallelDataError(f"{path}:{number}: expected 'BB.CCC.VVV<TAB>text', got {identifier[:30]!r}")
            if source_id != target_id:
                raise ParallelDataError(f"{src}:{number} is verse {source_id} but {tgt}:{number} is {target_id}; "
                                        "fix: give files with the same verse ids in the same order")
            split, identifier = held.get(int(source_id[:2]), "train"), source_id
        else:
            source_text, target_text, split, identifier = source_line, target_line, "train", f"{Path(src).name}:{number}"
        source_tokens, target_tokens = src_tok(source_text), tgt_tok(target_text)
        if not source_tokens or not target_tokens:
            if verses:  # a verse one translation leaves empty (merged into a neighbour): no pair
                continue
            raise ParallelDataError(f"{src if not source_tokens else tgt}:{number}: empty line; fix: one sentence "
                                    "per line on both sides")
        part = splits[split]
        part.source.append(source_tokens)
        part.target.append(target_tokens)
        part.ids.append(identifier)
    if not splits["train"].source:
        raise ParallelDataError(f"{src}, {tgt}: no training pairs (every book held out?)")
    return splits


def build_target_vocabulary(sentences: Sequence[Sequence[str]], *, size: int, min_count: int) -> list[str]:
    """The specials then the ``size`` most frequent words seen ``min_count`` times (ties alphabetical)."""
    counts = Counter(w for s in sentences for w in s)
    ranked = sorted((w for w, n in counts.items() if n >= min_count and w not in TARGET_SPECIALS),
                    key=lambda w: (-counts[w], w))
    return list(TARGET_SPECIALS) + ranked[:size]


@dataclass
class EncodedPairs:
    """Pairs as id lists: source rows of the vector table (-1: not in it), target ids (no <s>, </s>)."""

    source: list[list[int]]
    target: list[list[int]]

    @classmethod
    def encode(cls, split: ParallelSplit, source_index: dict[str, int], target_index: dict[str, int]) -> EncodedPairs:
        unk = target_index[UNK]
        return cls([[source_index.get(w, -1) for w in s] for s in split.source],
                   [[target_index.get(w, unk) for w in s] for s in split.target])


def make_batch(pairs: EncodedPairs, indices: Sequence[int]) -> dict[str, torch.Tensor]:
    """source_ids (B, S) (-1 padded), source_mask (B, S), target_inputs (B, T+1) = <s> y,
    target_outputs (B, T+1) = y </s> (0 padded)."""
    bos, eos = TARGET_SPECIALS.index(BOS), TARGET_SPECIALS.index(EOS)
    width_s = max(len(pairs.source[i]) for i in indices)
    width_t = max(len(pairs.target[i]) for i in indices) + 1
    source = torch.full((len(indices), width_s), -1, dtype=torch.long)
    target_in = torch.zeros(len(indices), width_t, dtype=torch.long)
    target_out = torch.zeros(len(indices), width_t, dtype=torch.long)
    for row, i in enumerate(indices):
        s, t = pairs.source[i], pairs.target[i]
        source[row, : len(s)] = torch.tensor(s, dtype=torch.long)
        target_in[row, : len(t) + 1] = torch.tensor([bos, *t], dtype=torch.long)
        target_out[row, : len(t) + 1] = torch.tensor([*t, eos], dtype=torch.long)
    lengths = torch.tensor([len(pairs.source[i]) for i in indices])
    mask = torch.arange(width_s).unsqueeze(0) < lengths.unsqueeze(1)
    return {"source_ids": source, "source_mask": mask, "target_inputs": target_in, "target_outputs": target_out}


def epoch_batches(lengths: Sequence[int], batch_size: int, *, seed: int, epoch: int) -> list[list[int]]:
    """The batches of one epoch, a function of (seed, epoch) only: shuffle, sort by length within
    pools of 50 batches (little padding), then shuffle the batches."""
    rng = np.random.default_rng([seed, epoch])
    order = rng.permutation(len(lengths))
    pool = 50 * batch_size
    batches = []
    for start in range(0, len(order), pool):
        chunk = sorted(order[start : start + pool].tolist(), key=lambda i: (lengths[i], i))
        batches.extend(chunk[k : k + batch_size] for k in range(0, len(chunk), batch_size))
    return [batches[i] for i in rng.permutation(len(batches))]


# ---------------------------------------------------------------------------------------- BLEU


def corpus_bleu(hypotheses: Sequence[Sequence[str]], references: Sequence[Sequence[str]]):
    """sacrebleu's corpus BLEU of tokenised hypotheses against one tokenised reference each
    (tokens joined by spaces, ``tokenize="none"``: the text is already cut). Returns sacrebleu's BLEU."""
    import sacrebleu

    if len(hypotheses) != len(references):
        raise ValueError(f"{len(hypotheses)} hypotheses for {len(references)} references")
    return sacrebleu.corpus_bleu([" ".join(h) for h in hypotheses], [[" ".join(r) for r in references]],
                                 tokenize="none", force=True)  # force: the text is tokenised on purpose


def translate(model: CoveModel, sources: Sequence[Sequence[str]], source_words: Sequence[str],
              target_words: Sequence[str], *, batch_size: int = 64) -> list[list[str]]:
    """Greedy translations (target tokens) of tokenised source sentences (already lowercased if the table is)."""
    index = {w: i for i, w in enumerate(source_words)}
    pairs = EncodedPairs([[index.get(w, -1) for w in s] for s in sources], [[] for _ in sources])
    model.eval()
    out: list[list[str]] = [[] for _ in sources]
    order = sorted(range(len(sources)), key=lambda i: len(sources[i]))
    for start in range(0, len(order), batch_size):
        indices = order[start : start + batch_size]
        batch = make_batch(pairs, indices)
        longest = max(len(sources[i]) for i in indices)
        decoded = model.greedy_decode(batch["source_ids"], batch["source_mask"], max_length=int(1.5 * longest) + 10)
        for i, ids in zip(indices, decoded):
            out[i] = [target_words[t] for t in ids]
    return out


def evaluate_bleu(model_dir: str | os.PathLike, splits: dict[str, ParallelSplit], *, batch_size: int = 64,
                  out_dir: str | os.PathLike | None = None) -> dict[str, dict]:
    """BLEU per split (greedy decoding); with ``out_dir``, each split's hypotheses in ``<split>.hyp.txt``."""
    model, source_words, target_words = load_cove_model(model_dir)
    results = {}
    for name, split in splits.items():
        started = time.perf_counter()
        hypotheses = translate(model, split.source, source_words, target_words, batch_size=batch_size)
        bleu = corpus_bleu(hypotheses, split.target)
        results[name] = {"bleu": round(bleu.score, 2), "sentences": len(split),
                         "precisions": [round(p, 1) for p in bleu.precisions],
                         "bp": round(bleu.bp, 3), "sys_len": bleu.sys_len, "ref_len": bleu.ref_len,
                         "decoding": "greedy", "seconds": round(time.perf_counter() - started, 1)}
        if out_dir is not None:
            with atomic_path(Path(out_dir) / f"{name}.hyp.txt") as tmp:
                Path(tmp).write_text("".join(i + "\t" + " ".join(h) + "\n" for i, h in zip(split.ids, hypotheses)),
                                     encoding="utf-8")
    return results


# ---------------------------------------------------------------------------------------- training


@dataclass
class CoveTrainResult(RunResult):
    bleu: dict | None = None  # BLEU per held-out split


def load_vectors(path: str | os.PathLike, *, limit: int | None = None):
    """The frozen table (a StaticVectors) from a folder of `elmokit static train` or a word2vec file."""
    if not Path(path).exists():
        raise InputNotFound(f"--vectors {path}: no such file or folder")
    return StaticVectors.load(path, limit=limit)


def train_cove(
    run_dir: str | os.PathLike,
    *,
    src: str | os.PathLike,
    tgt: str | os.PathLike,
    vectors: str | os.PathLike,
    config: CoveConfig,
    training: CoveTrainingConfig,
    valid_src: str | os.PathLike | None = None,
    valid_tgt: str | os.PathLike | None = None,
    max_vectors: int | None = None,
    resume: bool = False,
    bleu: bool = True,
    command: str | None = None,
    progress: bool = True,
    folder: RunFolder | None = None,
) -> CoveTrainResult:
    """Train (or resume) the CoVe MT model into ``run_dir`` (see the module doc); ``config``'s
    ``input_dim``, ``target_vocab_size`` and ``source_lowercase`` are set from the vectors and data.
    ``folder``: the run folder as the caller opened it (opened here when not given)."""
    run_dir = Path(run_dir)
    if folder is None or folder.path != run_dir:
        folder = RunFolder.open(run_dir, kind=RUN_KIND, resume=resume)
    table = load_vectors(vectors, limit=max_vectors)
    config = config.replace(input_dim=table.dim, source_lowercase=table.lowercase)
    splits = read_parallel(src, tgt, source_lowercase=table.lowercase, target_lowercase=training.lowercase_target,
                           valid_books=training.valid_books, test_books=training.test_books)
    if valid_src or valid_tgt:
        if not (valid_src and valid_tgt):
            raise ParallelDataError("--valid-src and --valid-tgt go together")
        splits["valid"] = read_parallel(valid_src, valid_tgt, source_lowercase=table.lowercase,
                                        target_lowercase=training.lowercase_target)["train"]
    train_split = splits["train"]
    keep = [i for i in range(len(train_split))
            if len(train_split.source[i]) <= training.max_length and len(train_split.target[i]) <= training.max_length]
    target_path = run_dir / "target_vocab.txt"
    if folder.resuming and target_path.is_file():
        target_words = target_path.read_text(encoding="utf-8").split("\n")[:-1]
    else:
        target_words = build_target_vocabulary([train_split.target[i] for i in keep], size=training.target_vocab_size,
                                               min_count=training.target_min_count)
    config = config.replace(target_vocab_size=len(target_words))
    source_index = {w: i for i, w in enumerate(table.words)}
    target_index = {w: i for i, w in enumerate(target_words)}
    train_pairs = EncodedPairs.encode(ParallelSplit([train_split.source[i] for i in keep],
                                                    [train_split.target[i] for i in keep], []), source_index, target_index)
    valid_pairs = EncodedPairs.encode(splits["valid"], source_index, target_index) if "valid" in splits else None
    data = {"src": _absolute(src), "tgt": _absolute(tgt), "valid_src": _absolute(valid_src),
            "valid_tgt": _absolute(valid_tgt), "format": "verses" if "test" in splits else "lines",
            "src_sha256": file_sha256(Path(src)), "tgt_sha256": file_sha256(Path(tgt)),
            "pairs": {name: len(split) for name, split in splits.items()}, "train_pairs_used": len(keep),
            "vectors": {"path": _absolute(vectors), "words": len(table.words), "dim": table.dim,
                        "sha256": file_sha256(_vector_file(vectors)), "lowercase": table.lowercase, "limit": max_vectors},
            "source_coverage": _coverage(train_split.source, source_index),
            "target_coverage": _coverage(train_split.target, target_index)}
    _open_run_folder(folder, config, training, data, target_words, command)

    context, device = DistributedContext(), torch.device("cpu")
    torch.manual_seed(training.seed)
    model = CoveModel(config, torch.from_numpy(table.vectors))
    names = [name for name, _ in model.named_parameters()]
    optimizer = torch.optim.Adam(model.parameters(), lr=training.lr)
    torch.manual_seed(training.seed * 1_000_003 + 1)  # dropout's stream, apart from the initial weights'
    position = {"epoch": 0, "batch": 0}  # the next batch of the epoch's plan
    checkpoints = run_dir / "checkpoints"
    metrics = MetricsLog(run_dir / "metrics.jsonl")
    lengths = [len(s) + len(t) for s, t in zip(train_pairs.source, train_pairs.target)]

    def step_fn(indices: list[int], step: int) -> StepOutcome:
        batch = make_batch(train_pairs, indices)
        position["batch"] += 1
        total, n_tokens = model.loss(**batch)
        optimizer.zero_grad(set_to_none=True)
        (total / n_tokens).backward()
        loss = total.item() / n_tokens
        return update_if_finite(optimizer, model.parameters(), training.clip_norm, loss, int(n_tokens),
                                {"ppl": math.exp(min(loss, 700))})

    def validate(step: int) -> None:
        if valid_pairs is not None and step % training.valid_every == 0:
            valid_loss = validation_loss(model, valid_pairs, training.batch_size)
            metrics.write({"step": step, "valid_loss": valid_loss, "valid_ppl": math.exp(min(valid_loss, 700))})
            logger.info("step %d  valid loss %.4f  ppl %.1f", step, valid_loss, math.exp(min(valid_loss, 700)))

    def save() -> None:
        write_checkpoint(checkpoints, steps.step, model_state=model.state_dict(), optimizer=optimizer, param_names=names,
                         state={**steps.state(context, device), "position": dict(position)},
                         keep=training.keep_checkpoints)

    def plan(epoch: int) -> list[list[int]]:
        return epoch_batches(lengths, training.batch_size, seed=training.seed, epoch=epoch)

    steps = StepLoop(batches=planned_batches(plan, position), step_fn=step_fn, save=save, metrics=metrics,
                     checkpoints=checkpoints, max_steps=training.max_steps, epochs=training.epochs, log_every=training.log_every,
                     checkpoint_every=training.checkpoint_every, skip_nonfinite_steps=training.skip_nonfinite_steps,
                     fix=f"lower --lr (now {training.lr})", progress=progress, after_step=validate)
    found = steps.resume(optimizer, names, context, device) if folder.resuming else None
    if found is not None:
        model.load_state_dict(found[0])
        position.update(found[1]["position"])
    truncate_metrics(metrics.path, steps.step)
    model.train()
    steps.run()
    steps.save_final()
    model.eval()
    card = model_card("elmokit CoVe MT-LSTM (trained with `elmokit cove train`)",
                      _card_lines(config, training, data, steps.step, steps.elapsed(), steps.last_loss), run_dir)
    model_dir = save_cove_model(run_dir / "model", model, table.words, target_words, card=card)
    results = None
    if bleu:
        held_out = {name: split for name, split in splits.items() if name != "train"}
        if held_out:
            results = evaluate_bleu(model_dir, held_out, batch_size=training.batch_size, out_dir=run_dir)
            write_bleu(run_dir, results, steps.step)
    return CoveTrainResult(**vars(steps.result(run_dir, model_dir)), bleu=results)


def write_bleu(run_dir: Path, results: dict, step: int) -> None:
    import sacrebleu

    record = {"step": step, "sacrebleu": sacrebleu.__version__, "tokenize": "none (regex-tokenised text)",
              "splits": results}
    write_json(run_dir / "bleu.json", record)
    for name, result in results.items():
        logger.debug("%s BLEU %.2f (%d sentences, greedy)", name, result["bleu"], result["sentences"])


@torch.no_grad()
def validation_loss(model: CoveModel, pairs: EncodedPairs, batch_size: int) -> float:
    """Mean per-token cross-entropy, teacher-forced, dropout off (the RNG is left untouched)."""
    was_training = model.training
    model.eval()
    total, tokens = 0.0, 0
    order = sorted(range(len(pairs.source)), key=lambda i: len(pairs.source[i]))
    for start in range(0, len(order), batch_size):
        loss, n = model.loss(**make_batch(pairs, order[start : start + batch_size]))
        total, tokens = total + loss.item(), tokens + n
    model.train(was_training)
    return total / max(tokens, 1)


def _absolute(path) -> str | None:
    return None if path is None else str(Path(path).resolve())


def _vector_file(path) -> Path:
    path = Path(path)
    if path.is_dir():
        for name in ("vectors.bin", "vectors.txt"):
            if (path / name).is_file():
                return path / name
    return path


def _coverage(sentences: Sequence[Sequence[str]], index: dict[str, int]) -> float:
    tokens = [w for s in sentences for w in s]
    return round(sum(w in index for w in tokens) / max(len(tokens), 1), 4)


def _open_run_folder(folder: RunFolder, config: CoveConfig, training: CoveTrainingConfig, data: dict,
                     target_words: list[str], command: str | None) -> None:
    record = {"format_version": 1, "kind": RUN_KIND, "training": training.to_dict(), "data": data,
              "torch": torch.__version__, "threads": torch.get_num_threads()}
    if folder.resuming:
        saved = folder.record
        problems = resume_differences(folder.saved("config.json", CoveConfig.from_dict), config, "model.")
        problems += resume_differences(folder.saved("training", CoveTrainingConfig.from_dict), training, "training.")
        for key in ("src", "tgt", "valid_src", "valid_tgt"):
            if saved["data"].get(key) != data.get(key):
                problems.append(f"{key}: saved {saved['data'].get(key)}, requested {data.get(key)}")
        if saved["data"]["vectors"]["sha256"] != data["vectors"]["sha256"]:
            problems.append("the vectors file's content differs from the run's")
        for key in ("src_sha256", "tgt_sha256"):
            if saved["data"].get(key, data[key]) != data[key]:
                problems.append(f"{data[key[:3]]}: its content changed since the run read it")
        folder.refuse_if(problems, CoveTrainingConfig)
        folder.write_record({**saved, "training": training.to_dict()})  # the resumable fields as now requested
    folder.start(command or " ".join(sys.argv), 1, record, {
        "config.json": json.dumps(config.to_dict(), indent=2) + "\n",
        "target_vocab.txt": "".join(w + "\n" for w in target_words)})


def _card_lines(config: CoveConfig, training: CoveTrainingConfig, data: dict, step: int, elapsed_s: float,
                last_loss: float | None) -> list[str]:
    pairs = ", ".join(f"{k} {v:,}" for k, v in data["pairs"].items())
    return [
        "McCann et al. (2017): a 2-layer biLSTM encoder over frozen word vectors, trained as the encoder of an "
        "attentional LSTM translation model; its top layer is the CoVe representation (kind `cove`).", "",
        "## Data",
        f"- source {data['src']}, target {data['tgt']} ({data['format']}; pairs: {pairs}; "
        f"{data['train_pairs_used']:,} training pairs with both sides <= {training.max_length} tokens)",
        f"- held-out books: valid {list(training.valid_books)}, test {list(training.test_books)}" if data["format"] == "verses"
        else "- validation: " + str(data.get("valid_src")),
        f"- vectors: {data['vectors']['path']} ({data['vectors']['words']:,} words x {data['vectors']['dim']}, frozen; "
        f"covers {100 * data['source_coverage']:.1f}% of source tokens)",
        f"- target vocabulary {config.target_vocab_size:,} (covers {100 * data['target_coverage']:.1f}% of target tokens); "
        f"lowercased target: {training.lowercase_target}", "",
        "## Architecture",
        f"- encoder: {config.encoder_layers} x biLSTM {config.hidden_dim} per direction (CoVe dim {2 * config.hidden_dim})",
        f"- decoder: {config.decoder_layers} x LSTM {config.decoder_dim}, attention, input feeding, target embedding "
        f"{config.target_embedding_dim}; dropout {config.dropout}", "",
        "## Training",
        f"- steps {step:,}, batch {training.batch_size}, Adam lr {training.lr}, clip {training.clip_norm}, seed {training.seed}; "
        f"wall time {elapsed_s / 60:.1f} min; last training loss "
        + (f"{last_loss:.4f}" if last_loss is not None else "n/a"),
    ]
