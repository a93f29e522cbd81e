"""`elmokit demo`: embed a few sentences and show what contextual vectors are.

The same word in different sentences gets a different vector in every contextual layer but the
same one in layer 0 (the context-independent token vector); the table shows cosine similarities.
"""

from __future__ import annotations

import argparse

import numpy as np

from elmokit.cli.common import add_model_arguments, add_threads_argument, apply_threads, load_embedder

DEMO_SENTENCES = [
    "The children play football in the park every Saturday .".split(),
    "The actors rehearsed the new play for weeks before opening night .".split(),
    "We sat on the bank of the river and watched the boats .".split(),
    "She opened an account at the bank on Main Street .".split(),
]
# Each word is compared between the two sentences that contain it.
DEMO_WORDS = [("play", 0, 1), ("bank", 2, 3)]


def register(subparsers) -> None:
    parser = subparsers.add_parser(
        "demo", help="embed a few sentences and print how contexts change a word's vectors",
        description="Embed four example sentences and print, per layer, the cosine similarity of the same word "
        "('play', 'bank') in two sentences where it has different senses. Layer 0 is the context-independent "
        "token vector, so it is always 1.000; the contextual layers are below 1. Uses the shipped default model "
        "unless --model or --options-file/--weight-file name another.",
    )
    add_model_arguments(parser)
    add_threads_argument(parser)
    parser.set_defaults(func=run)


def cosine(a: np.ndarray, b: np.ndarray) -> float:
    return float(a @ b / (np.linalg.norm(a) * np.linalg.norm(b) + 1e-12))


def run(args: argparse.Namespace) -> int:
    apply_threads(args)
    embedder = load_embedder(args)
    vectors = embedder.embed(DEMO_SENTENCES)
    print(f"model: {embedder.name}   layers: {embedder.num_layers}   dim: {embedder.dim}\n")
    for index, (sentence, array) in enumerate(zip(DEMO_SENTENCES, vectors)):
        print(f"[{index}] {' '.join(sentence)}")
        print(f"    -> array {array.shape} (layers, tokens, dim)")
    print("\ncosine similarity of the same word in two sentences, per layer")
    print("(layer 0 is context-independent, so it is always 1.000):\n")
    header = "word".ljust(16) + "".join(f"layer {j}".rjust(10) for j in range(embedder.num_layers))
    print(header)
    for word, s1, s2 in DEMO_WORDS:
        t1, t2 = DEMO_SENTENCES[s1].index(word), DEMO_SENTENCES[s2].index(word)
        label = f"{word} [{s1}] vs [{s2}]"
        cells = "".join(f"{cosine(vectors[s1][j, t1], vectors[s2][j, t2]):10.3f}" for j in range(embedder.num_layers))
        print(label.ljust(16) + cells)
    return 0
