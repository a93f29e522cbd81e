"""Exact resume at the default thread count (two threads on a 2-core box), not only on one thread.

The cause this guards against: ``weight[ids]`` differentiates through ``index_put_(accumulate=True)``,
which adds the gradient rows of repeated ids with atomic float additions in thread-arrival order
once there are two or more threads and 32768+ gradient elements (the sampled softmax's target rows
on a realistic batch). ``elmokit.lm.rows`` gathers with ``index_select`` instead.
"""

import random

import pytest
import torch
from safetensors.torch import load_file

from elmokit.bilm import PRESETS
from elmokit.lm import rows
from elmokit.text.corpus import Corpus
from elmokit.text.vocab import build_vocabulary, count_tokens
from elmokit.training.config import TrainingConfig
from elmokit.training.trainer import train


def threads(n):
    class Threads:
        def __enter__(self):
            self.before = torch.get_num_threads()
            torch.set_num_threads(n)

        def __exit__(self, *exc):
            torch.set_num_threads(self.before)

    return Threads()


def gradient_of_rows(ids, upstream):
    table = torch.zeros(64, upstream.shape[1], requires_grad=True)
    (rows(table, ids) * upstream).sum().backward()
    return table.grad


def test_gathered_rows_have_a_thread_independent_gradient():
    g = torch.Generator().manual_seed(0)
    ids = torch.randint(0, 64, (8000,), generator=g)  # many repeats, 8000 x 8 > 32768 elements
    upstream = torch.randn(8000, 8, generator=g)
    with threads(1):
        expected = gradient_of_rows(ids, upstream)
    with threads(2):
        got = [gradient_of_rows(ids, upstream) for _ in range(8)]
    for grad in got:
        assert torch.equal(grad, expected)


def synthetic_corpus(path, lines=120, words=300, length=32, seed=0):
    rng = random.Random(seed)
    vocab = [f"w{i}" for i in range(words)]
    weights = [1.0 / (i + 1) for i in range(words)]
    path.write_text("".join(" ".join(rng.choices(vocab, weights, k=length)) + "\n" for _ in range(lines)))
    return path


@pytest.mark.slow  # two-thread training runs (~7 s): the default suite stays under a minute; CI runs -m slow
def test_resume_is_bit_exact_on_two_threads(tmp_path):
    """Sampled softmax, batches of 2 x 96 x 33 targets: the target-row gradient is big enough for
    the multi-threaded kernels. 4 straight steps == 2 steps + resume to 4, on two threads."""
    corpus = synthetic_corpus(tmp_path / "corpus.txt")
    vocab = tmp_path / "vocab.txt"
    build_vocabulary(count_tokens(Corpus(str(corpus)))).save(vocab)
    training = TrainingConfig(batch_size=96, softmax="sampled", n_negative_samples=64, max_steps=4, shuffle_buffer=50)

    def run(name, steps, resume=False):
        with threads(2):
            train(tmp_path / name, corpus=str(corpus), vocab=vocab, model_config=PRESETS["tiny"],
                  training=training.replace(max_steps=steps), resume=resume, command="test", progress=False)
        last = sorted((tmp_path / name / "checkpoints").iterdir())[-1]
        return load_file(str(last / "model.safetensors"))

    straight = run("straight", 4)
    run("stopped", 2)
    resumed = run("stopped", 4, resume=True)
    again = run("again", 4)
    for name in straight:
        assert torch.equal(straight[name], again[name]), f"two uninterrupted runs differ in {name}"
        assert torch.equal(straight[name], resumed[name]), f"resumed run differs in {name}"
