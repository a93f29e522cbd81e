"""Why GloVe lands where it does on the static-vector corpus: count statistics and learning curves.

    PYTHONPATH=src python benchmarks/glove_diagnostics.py                       # count statistics only
    PYTHONPATH=src python benchmarks/glove_diagnostics.py --curve --x-max 10 --epochs 50 --every 5
    PYTHONPATH=src python benchmarks/glove_diagnostics.py --curve --x-max 10 --epochs 13 --every 1 \\
        --lr-drop-epoch 11 --lr-after 0.01                                      # lower the step size late

Counts the co-occurrences exactly as `elmokit static train --algo glove` does (same corpus, tokeniser,
vocabulary, window 15, 1/d weighting), prints how the nonzeros and the weight f(X) are distributed,
and with --curve trains GloVe (glove.c's update, one thread) printing the cost and WS-353 / SimLex-999
/ MEN every --every epochs. Notes in docs/results.md quote this script's output.
"""

from __future__ import annotations

import argparse
import dataclasses
import os
import sys
import time
from pathlib import Path

import numpy as np

REPO = Path(__file__).resolve().parents[1]
SHARED = Path(os.environ.get("ELMOKIT_SHARED", REPO / ".." / "shared"))


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--corpus", default=str(SHARED / "data" / "gutenberg_en" / "train.0[0-2].txt.xz"))
    parser.add_argument("--window", type=int, default=15)
    parser.add_argument("--curve", action="store_true", help="train and print the learning curve")
    parser.add_argument("--x-max", type=float, default=100.0)
    parser.add_argument("--epochs", type=int, default=25)
    parser.add_argument("--every", type=int, default=5, help="evaluate every N epochs")
    parser.add_argument("--lr", type=float, default=0.05)
    parser.add_argument("--lr-drop-epoch", type=int, default=0, help="from this epoch on use --lr-after")
    parser.add_argument("--lr-after", type=float, default=0.01)
    args = parser.parse_args()

    import torch

    from elmokit.evaluation.word_similarity import evaluate_similarity, load_similarity
    from elmokit.static.cooccurrence import CooccurrenceConfig, build_vocab, count_cooccurrences
    from elmokit.static.glove import GloveConfig, GloveModel, weighting
    from elmokit.static.vectors import StaticVectors
    from elmokit.text.corpus import Corpus, Tokenizer

    torch.set_num_threads(1)
    corpus = Corpus(args.corpus, tokenizer=Tokenizer(kind="regex", lowercase=True))
    t0 = time.time()
    words, _ = build_vocab(corpus, min_count=5)
    matrix = count_cooccurrences(corpus, {w: i for i, w in enumerate(words)},
                                 CooccurrenceConfig(window=args.window), progress=False).tocoo()
    x = matrix.data
    print(f"{len(words):,} words, {x.size:,} nonzeros, window {args.window} ({time.time() - t0:.0f} s)")
    for below in (1, 10, 100):
        print(f"  nonzeros with X < {below}: {(x < below).mean():.1%}")
    for x_max in (10.0, 100.0):
        f = np.minimum(x / x_max, 1.0) ** 0.75
        print(f"  x_max {x_max:g}: pairs at full weight {(x >= x_max).mean():.2%}; mean f {f.mean():.4f}; "
              f"share of the total weight on pairs with X < 1: {f[x < 1].sum() / f.sum():.1%}")
    if not args.curve:
        return 0

    rows = torch.from_numpy(matrix.row.astype(np.int64))
    cols = torch.from_numpy(matrix.col.astype(np.int64))
    xt = torch.from_numpy(x.astype(np.float32))
    logx = torch.log(xt)
    config = GloveConfig(x_max=args.x_max, lr=args.lr, epochs=args.epochs)
    fx = weighting(xt, config.x_max, config.alpha)
    model = GloveModel(len(words), config)
    sets = {name: load_similarity(name) for name in ("ws353", "simlex999", "men")}
    for epoch in range(1, args.epochs + 1):
        if args.lr_drop_epoch and epoch == args.lr_drop_epoch:
            model.config = dataclasses.replace(model.config, lr=args.lr_after)
        t0 = time.time()
        cost = model.train_epoch(rows, cols, logx, fx)
        if epoch % args.every == 0 or epoch == args.epochs:
            table = StaticVectors(words, model.word_vectors(), name="glove", lowercase=True)
            scores = "  ".join(f"{name} {evaluate_similarity(table, pairs)['spearman']:.3f}"
                               for name, pairs in sets.items())
            print(f"epoch {epoch:3d}  lr {model.config.lr:g}  cost {cost:.4f}  {scores}  ({time.time() - t0:.0f} s/epoch)",
                  flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
