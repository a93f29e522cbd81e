"""What ERNIE 2.0's task labels look like on a corpus: the rates of each label over the ``ernie2`` reader's
examples of the first documents of one file (capitalisation, token-document relation, sentence distance
classes, sentence cuts per segment) and the marker-opened sentence pairs the discourse task would use.

    python benchmarks/ernie2_label_stats.py ../shared/data/gutenberg_en/train.00.txt.xz --documents 3

Prints one JSON record (with the command, machine and date); nothing is trained. The tokenizer is an uncased
WordPiece trained on the documents read (as `elmokit pretrain --objective ernie2` trains one on its corpus).
"""

from __future__ import annotations

import argparse
import datetime
import itertools
import json
import platform
import sys
import time
from collections import Counter

import numpy as np


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("corpus", help="one corpus file (documents separated by blank lines)")
    parser.add_argument("--documents", type=int, default=3, help="read the first N documents")
    parser.add_argument("--max-tokens", type=int, default=128, help="example length, as --max-tokens of pretrain")
    parser.add_argument("--vocab-size", type=int, default=8000)
    args = parser.parse_args(argv)

    from elmokit.pretraining import ernie2 as E
    from elmokit.pretraining.corpus import SpecialIds, encode_document, read_documents
    from elmokit.text.subword_tokenizers import train_wordpiece

    started = time.process_time()
    documents = list(itertools.islice(read_documents(args.corpus), args.documents))
    tokenizer = train_wordpiece((" ".join(s) for d in documents for s in d), vocab_size=args.vocab_size, lowercase=True)
    encoded = [encode_document(tokenizer, d) for d in documents]
    rows = E.examples(encoded, max_tokens=args.max_tokens, special=SpecialIds.from_tokenizer(tokenizer),
                      rng=np.random.default_rng(0))
    cap = Counter(x for r in rows for x in r["cap"])
    tdr = Counter(x for r in rows for x in r["tdr"])
    markers = Counter()
    for d in encoded:
        for i in range(1, len(d.ids)):
            found = E.discourse_marker(d.words[i])
            if found is not None:
                markers[E.DISCOURSE_MARKERS[found[0]]] += 1
    sentences = sum(len(d) for d in documents)
    record = {
        "command": "python " + " ".join([sys.argv[0], *(argv if argv is not None else sys.argv[1:])]),
        "date": datetime.datetime.now(datetime.UTC).isoformat(timespec="seconds"),
        "machine": platform.platform(), "documents": len(documents), "sentences": sentences, "segments": len(rows),
        "capitalised_share": cap[1] / max(cap[0] + cap[1], 1), "cap_unpredicted_words": cap[-100],
        "tdr_positive_share": tdr[1] / max(tdr[0] + tdr[1], 1), "tdr_unpredicted_words": tdr[-100],
        "distance_classes": dict(sorted(Counter(r.get("distance") for r in rows).items(), key=str)),
        "sentence_cuts_per_segment": float(np.mean([len(r["sentence_cuts"]) for r in rows])),
        "discourse_pairs": sum(markers.values()), "discourse_pair_share": sum(markers.values()) / max(sentences, 1),
        "discourse_markers": dict(markers.most_common()), "cpu_s": round(time.process_time() - started, 2),
    }
    print(json.dumps(record, indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
