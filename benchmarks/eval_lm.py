"""Perplexities of a trained biLM on the project's evaluation texts (for model cards).

    python benchmarks/eval_lm.py --model src/elmokit/models/default --json docs/benchmarks/default_model_eval.json
    python benchmarks/eval_lm.py --model DIR --gutenberg-lines 5000 --threads 2 --update-card
    python benchmarks/eval_lm.py --model DIR --only-texts --text "PD test=runs/zh/corpus/test_peoples_daily.txt" --update-card

``--update-card`` writes the table into the model folder's README.md (between marker comments,
replacing an earlier table), with the command that produced it.

Sets (each skipped if ../shared lacks it):
* gutenberg_en test (the model's own tokenizer, lines cut at the model's max length;
  ``--gutenberg-lines`` limits it to the first N lines);
* WikiText-2 test, ``wiki.test.tokens`` - already tokenised, so split on whitespace (its ``<unk>``
  is an ordinary out-of-vocabulary token here), headings and all, blank lines skipped;
* PTB test (Mikolov), whitespace - LDC data, evaluation only.

Perplexity as ``elmokit perplexity``: n + 1 targets per sentence and direction, OOV tokens as
<UNK>; so the numbers compare only between models with the same vocabulary and tokenisation.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import shlex
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "src"))
SHARED = Path(os.environ.get("ELMOKIT_SHARED", REPO.parent / "shared"))

from elmokit.formats import resolve_model_path  # noqa: E402
from elmokit.io import atomic_path  # noqa: E402


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", default="default", help="model folder with the LM head (default: the shipped default)")
    parser.add_argument("--gutenberg-lines", type=int, default=None, help="first N lines of gutenberg_en test (default all)")
    parser.add_argument("--threads", type=int, default=1, help="torch threads (default 1)")
    parser.add_argument("--json", default=None, help="write the results here")
    parser.add_argument("--update-card", action="store_true", help="write the table into the model's README.md")
    parser.add_argument("--text", action="append", default=[], metavar="NAME=PATH",
                        help="also (or with --only-texts, only) this text, cut by the model's own tokenizer; repeatable")
    parser.add_argument("--only-texts", action="store_true",
                        help="measure only the --text sets (e.g. a Chinese model: the English sets mean nothing to it)")
    args = parser.parse_args()

    import torch

    from elmokit.evaluation.perplexity import perplexity
    from elmokit.lm import LanguageModel
    from elmokit.text.corpus import Corpus, Tokenizer
    from elmokit.training.data import make_tokenizer

    torch.set_num_threads(args.threads)
    model, vocabulary, info = LanguageModel.load(args.model)
    own = make_tokenizer(info.get("tokenizer"))
    max_length = info.get("max_length")
    sets = [
        ("gutenberg_en test", SHARED / "data" / "gutenberg_en" / "test.txt.xz", own, args.gutenberg_lines),
        ("WikiText-2 test (wiki.test.tokens)", SHARED / "data" / "wikitext2_eval" / "wiki.test.tokens", Tokenizer(), None),
        ("PTB test (Mikolov)", SHARED / "data" / "ptb_mikolov" / "ptb.test.txt", Tokenizer(), None),
    ]
    extra = []
    for item in args.text:
        name, equals, path = item.partition("=")
        if not equals or not name or not path:
            parser.error(f"--text {item!r}: give NAME=PATH")
        extra.append((name, Path(path), own, None))
    sets = extra if args.only_texts else sets + extra
    results = []
    for name, path, tokenizer, limit in sets:
        if not path.exists():
            print(f"skipping {name}: {path} not found", file=sys.stderr)
            continue
        began = time.perf_counter()
        corpus = Corpus(str(path), tokenizer=tokenizer, max_tokens=max_length, limit_lines=limit)
        r = perplexity(model, vocabulary, corpus)
        entry = {"set": name, "file": os.path.relpath(path, REPO), "tokenizer": tokenizer.to_dict(),
                 "max_length": max_length, "lines_limit": limit, **r.to_dict(),
                 "oov_rate": r.num_oov / max(r.num_tokens, 1), "seconds": round(time.perf_counter() - began, 1)}
        results.append(entry)
        print(f"{name}: forward {r.forward:.1f}  backward {r.backward:.1f}  average {r.average:.1f}  "
              f"({r.num_tokens:,} tokens, OOV {100 * entry['oov_rate']:.1f}%)", flush=True)
    if args.json:
        record = {"model": args.model, "command": shlex.join(["python", "benchmarks/eval_lm.py", *sys.argv[1:]]),
                  "date": time.strftime("%Y-%m-%d"), "machine": f"{platform.machine()}, {os.cpu_count()} cpus",
                  "results": results}
        with atomic_path(args.json) as tmp:
            Path(tmp).write_text(json.dumps(record, indent=1) + "\n")
    if args.update_card:  # the card of a shipped name ("default", "zh") is the package's folder
        update_card(resolve_model_path(args.model), results, shlex.join(["python", "benchmarks/eval_lm.py", *sys.argv[1:]]))
    return 0


CARD_BEGIN, CARD_END = "<!-- perplexity:begin (benchmarks/eval_lm.py --update-card) -->", "<!-- perplexity:end -->"


def update_card(model_dir: Path, results: list[dict], command: str) -> None:
    card = model_dir / "README.md"
    text = card.read_text(encoding="utf-8") if card.exists() else ""
    before, after = text, ""
    if CARD_BEGIN in text:  # the table replaces the old one where it stands
        before, after = text[: text.index(CARD_BEGIN)], text[text.index(CARD_END) + len(CARD_END) :]
    rows = []
    for r in results:
        name = r["set"] if r["lines_limit"] is None else f"{r['set']} (first {r['lines_limit']:,} lines)"
        rows.append(f"| {name} | {r['num_tokens']:,} | {100 * r['oov_rate']:.1f}% | {r['forward']:.1f} | "
                    f"{r['backward']:.1f} | {r['average']:.1f} |")
    table = "\n".join([
        CARD_BEGIN, "", "## Perplexity", "",
        "Full softmax over the model's vocabulary; n + 1 targets per sentence and direction (</S> and <S>"
        " included), out-of-vocabulary tokens scored as <UNK>, every sentence from a zero state. "
        "Comparable only between models with the same vocabulary and tokenisation.", "",
        "| text | tokens | OOV | forward | backward | average |", "|---|---:|---:|---:|---:|---:|", *rows, "",
        f"Measured with `{command}` (the JSON record of a run with `--json` keeps its date and machine).", "", CARD_END,
    ])
    with atomic_path(card) as tmp:
        Path(tmp).write_text(before.rstrip("\n") + "\n\n" + table + "\n" + after, encoding="utf-8")


if __name__ == "__main__":
    sys.exit(main())
