"""The knowledge ERNIE (Tsinghua) pretrains with: WordNet 3.0's TransE vectors and SemCor as a corpus with its gold
mentions, written once under ``runs/ernie_thu/`` for ``elmokit pretrain --objective ernie-thu``.

    python benchmarks/ernie_thu_kg.py --epochs 20 --dim 100      # TransE, SemCor corpus + mentions, record.json
    elmokit pretrain --objective ernie-thu --corpus runs/ernie_thu/semcor.txt --out runs/ernie_thu/run \\
        --ernie-thu-wordnet ../shared/data/wordnet3.0/wordnet-3.0.tar.xz --ernie-thu-transe runs/ernie_thu/transe \\
        --ernie-thu-mentions runs/ernie_thu/semcor.mentions.jsonl --max-steps ...

``record.json`` keeps the settings, the graph's and SemCor's counts, TransE's loss per epoch, and the
CPU-seconds and wall seconds of each step, with the machine, torch version and date.
"""

from __future__ import annotations

import argparse
import json
import platform
import sys
import time
from datetime import date
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "src"))

import torch  # noqa: E402

from elmokit.io import atomic_path  # noqa: E402
from elmokit.pretraining.knowledge_graph import (  # noqa: E402
    read_semcor,
    read_wordnet,
    train_wordnet_transe,
    write_semcor_corpus,
)

SHARED = REPO.parent / "shared" / "data"


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--wordnet", default=str(SHARED / "wordnet3.0" / "wordnet-3.0.tar.xz"),
                        help="WordNet 3.0's folder or archive")
    parser.add_argument("--semcor", default=str(SHARED / "semcor3.0" / "semcor3.0.tar.xz"), help="SemCor 3.0's archive")
    parser.add_argument("--out", default=str(REPO / "runs" / "ernie_thu"), help="output folder")
    parser.add_argument("--dim", type=int, default=100, help="TransE dimension (the K-Encoder's entity width)")
    parser.add_argument("--epochs", type=int, default=20, help="TransE epochs")
    parser.add_argument("--batch-size", type=int, default=4096, help="TransE batch size")
    parser.add_argument("--lr", type=float, default=0.01, help="TransE Adam learning rate")
    parser.add_argument("--p", type=int, default=1, choices=(1, 2), help="TransE's norm")
    parser.add_argument("--threads", type=int, default=None, help="torch threads")
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args(argv)
    if args.threads:
        torch.set_num_threads(args.threads)
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    timings = {}

    def timed(name, fn):
        wall, cpu = time.time(), time.process_time()
        result = fn()
        timings[name] = {"wall_s": round(time.time() - wall, 3), "cpu_s": round(time.process_time() - cpu, 3)}
        print(f"{name}: {timings[name]}", file=sys.stderr)
        return result

    wordnet = timed("read_wordnet", lambda: read_wordnet(args.wordnet))
    vectors = timed("transe", lambda: train_wordnet_transe(
        wordnet, out / "transe", dim=args.dim, epochs=args.epochs, batch_size=args.batch_size, lr=args.lr, p=args.p,
        seed=args.seed, progress=sys.stderr.isatty()))
    documents = timed("read_semcor", lambda: read_semcor(args.semcor, wordnet))
    timed("write_semcor", lambda: write_semcor_corpus(documents, out / "semcor.txt", out / "semcor.mentions.jsonl",
                                                      wordnet))
    record = {
        "what": "WordNet 3.0 TransE + SemCor corpus for elmokit pretrain --objective ernie-thu",
        "command": " ".join([sys.executable, *sys.argv]), "date": date.today().isoformat(),
        "machine": platform.platform(), "processor": platform.processor(), "torch": torch.__version__,
        "threads": torch.get_num_threads(),
        "wordnet": {"path": args.wordnet, "synsets": len(wordnet.synsets), "triples": int(len(wordnet.triples)),
                    "relations": len(wordnet.relations)},
        "semcor": {"path": args.semcor, "documents": len(documents), "sentences": sum(len(d) for d in documents),
                   "mentions": sum(len(s.mentions) for d in documents for s in d)},
        "transe": {k: v for k, v in vectors.info.items() if k != "relations"},
        "timings": timings,
    }
    with atomic_path(out / "record.json") as tmp:
        Path(tmp).write_text(json.dumps(record, indent=1) + "\n", encoding="utf-8")
    print(json.dumps({k: record[k] for k in ("wordnet", "semcor", "timings")}), file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
