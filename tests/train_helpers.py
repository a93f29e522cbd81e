"""Shared by the training tests: the tiny corpus, its vocabulary, one-thread runs."""

from __future__ import annotations

import contextlib
from pathlib import Path

import torch

from elmokit.bilm import PRESETS
from elmokit.text.corpus import Corpus
from elmokit.text.vocab import build_vocabulary, count_tokens
from elmokit.training.config import TrainingConfig
from elmokit.training.trainer import train

HERE = Path(__file__).resolve().parent
TINY_CORPUS = HERE / "fixtures" / "tiny_corpus.txt"
GOLDEN_CURVE = HERE / "golden" / "tiny_loss_curve.txt"

# The golden configuration: tiny preset with dropout 0.1, full softmax over the 44-entry vocabulary,
# batches of 6 sentences, seed 0, 30 steps, one thread.
GOLDEN_MODEL = PRESETS["tiny"].replace(dropout=0.1)
GOLDEN_TRAINING = TrainingConfig(batch_size=6, shuffle_buffer=16, softmax="full",
                                 seed=0, max_steps=30, log_every=1, checkpoint_every=10)


def tiny_vocab(directory: Path) -> Path:
    path = directory / "vocab.txt"
    if not path.exists():
        build_vocabulary(count_tokens(Corpus(str(TINY_CORPUS)))).save(path)
    return path


@contextlib.contextmanager
def one_thread():
    before = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        yield
    finally:
        torch.set_num_threads(before)


def run_tiny(run_dir: Path, *, model=GOLDEN_MODEL, training=GOLDEN_TRAINING, resume=False, **changes):
    with one_thread():
        return train(run_dir, corpus=str(TINY_CORPUS), vocab=tiny_vocab(run_dir.parent), model_config=model,
                     training=training.replace(**changes), resume=resume, command="test", progress=False)


def write_golden_curve() -> None:
    """Regenerate tests/golden/tiny_loss_curve.txt (only in a commit that says why)."""
    import tempfile

    with tempfile.TemporaryDirectory() as tmp:
        result = run_tiny(Path(tmp) / "run")
    lines = [f"{e['step']} {e['loss']:.8f}" for e in result.history if "loss" in e]
    GOLDEN_CURVE.write_text("# step loss: tests/train_helpers.py GOLDEN_* on tests/fixtures/tiny_corpus.txt, CPU, 1 thread\n"
                            + "\n".join(lines) + "\n")


if __name__ == "__main__":
    write_golden_curve()
    print(GOLDEN_CURVE.read_text())


def ddp_worker(rank: int, world_size: int, init_method: str, run_dir: str, model_dict: dict, changes: dict) -> None:
    """One rank of the data-parallel test (run by torch.multiprocessing in a fresh process)."""
    from elmokit.bilm import BiLMConfig
    from elmokit.engine.distributed import DistributedContext

    torch.set_num_threads(1)
    train(Path(run_dir), corpus=str(TINY_CORPUS), vocab=tiny_vocab(Path(run_dir).parent),
          model_config=BiLMConfig.from_dict(model_dict), training=GOLDEN_TRAINING.replace(**changes), command="ddp test",
          progress=False,
          context=DistributedContext(rank, world_size, rank), init_method=init_method, dist_timeout_s=60, device="cpu")
