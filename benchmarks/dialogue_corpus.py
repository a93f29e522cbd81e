"""The dialogue of the Gutenberg novels, as ``--objective ernie-dlm`` extracts it: counts and examples.

    python benchmarks/dialogue_corpus.py                          # valid + test books -> docs/results/dialogue_corpus.json
    python benchmarks/dialogue_corpus.py --files 'PATH/train.0*.txt.xz' --out runs/dialogue.json
    python benchmarks/dialogue_corpus.py --bible-out runs/bible_kjv.txt   # also the KJV as a corpus file

Counts per run: books (by quote style), paragraphs, dialogues (``dialogue.extract_dialogues``), turns,
tokens of the turns (regex words, ``\\w+|[^\\w\\s]``), the share of paragraphs inside a dialogue, the
three-turn DLM windows by role pattern, and a few dialogues drawn with a fixed seed. ``--bible-out`` writes
the King James Bible as an elmokit corpus file (a verse a line, a blank line between books) for
``--dlm-text bible=FILE``. ``--chinese`` also checks People's Daily (the Chinese data) for dialogue:
paragraphs that open with a quotation mark, and runs of two or more of them.
"""

from __future__ import annotations

import argparse
import json
import lzma
import os
import platform
import random
import sys
import time
from collections import Counter
from datetime import date
from pathlib import Path

from elmokit.data_paths import shared_data
from elmokit.io import atomic_path
from elmokit.pretraining.corpus import read_paragraph_documents
from elmokit.pretraining.dialogue import dlm_windows, extract_dialogues, quote_style, role_pattern
from elmokit.text.corpus import Tokenizer, expand_patterns

WORDS = Tokenizer(kind="regex")


def shown_path(path) -> str:
    """A path as the record shows it: under the shared data folder, relative to it."""
    try:
        return str(Path(path).resolve().relative_to(shared_data().resolve()))
    except ValueError:
        return Path(path).name


def dialogue_counts(files: list[Path], *, examples: int, seed: int = 0) -> dict:
    books = Counter()
    paragraphs = in_dialogue = turns = tokens = 0
    patterns: Counter = Counter()
    lengths: list[int] = []
    kept: list[list] = []
    for path in files:
        for document in read_paragraph_documents(path):
            books[quote_style(document)] += 1
            paragraphs += len(document)
            for dialogue in extract_dialogues(document):
                lengths.append(len(dialogue))
                in_dialogue += len({t.paragraph for t in dialogue})
                turns += len(dialogue)
                tokens += sum(len(WORDS(t.text)) for t in dialogue)
                patterns.update(role_pattern(dialogue[i:i + 3]) for i in dlm_windows(dialogue))
                kept.append(dialogue)
    lengths.sort()
    rng = random.Random(seed)
    shown = rng.sample([d for d in kept if 3 <= len(d) <= 6], min(examples, sum(3 <= len(d) <= 6 for d in kept)))
    return {
        "files": [shown_path(f) for f in files], "books": sum(books.values()), "books_by_quote_style": dict(books),
        "paragraphs": paragraphs, "paragraphs_in_dialogue": in_dialogue, "dialogues": len(lengths), "turns": turns,
        "tokens": tokens, "turns_per_dialogue": {"mean": turns / max(len(lengths), 1),
                                                 "median": lengths[len(lengths) // 2] if lengths else 0,
                                                 "max": lengths[-1] if lengths else 0},
        "dlm_windows": sum(patterns.values()), "dlm_windows_by_pattern": dict(patterns.most_common()),
        "examples": [[{"speaker": t.speaker, "text": t.text} for t in d] for d in shown],
    }


def write_bible(target: Path) -> int:
    """The KJV as a corpus file: a verse a line, a blank line between books; returns the verses written."""
    source = shared_data("bible_parallel", "en_kjv.tsv.xz")
    lines, book, n = [], None, 0
    with lzma.open(source, "rt", encoding="utf-8") as handle:
        for number, line in enumerate(handle, 1):
            verse_id, tab, text = line.rstrip("\n").partition("\t")
            if not tab:
                raise ValueError(f"{source}:{number}: expected 'book.chapter.verse<TAB>text'")
            if book is not None and verse_id.split(".")[0] != book:
                lines.append("")
            book = verse_id.split(".")[0]
            if text.strip():
                lines.append(text.strip())
                n += 1
    target.parent.mkdir(parents=True, exist_ok=True)
    with atomic_path(target) as tmp:
        Path(tmp).write_text("\n".join(lines) + "\n", encoding="utf-8")
    return n


def chinese_check() -> dict:
    """People's Daily: paragraphs opening with a quotation mark, and runs of 2+ consecutive such paragraphs."""
    path = shared_data("zh", "peoples_daily_199801", "199801.txt")
    opening, runs, run, total, with_quote = 0, 0, 0, 0, 0
    paragraphs = []
    with open(path, encoding="utf-8") as handle:
        for line in handle:
            words = [w.rsplit("/", 1)[0] for w in line.split()]  # word/TAG
            text = "".join(words)
            if not text:
                continue
            paragraphs.append(text)
            total += 1
            with_quote += "\u201c" in text
            starts = text.startswith("\u201c")
            opening += starts
            run = run + 1 if starts else 0
            runs += run == 2
    # the extractor as on the novels (a Han run counts as one word: the narration rule is loose here)
    dialogues = extract_dialogues(paragraphs, style="double")
    return {"file": shown_path(path), "paragraphs": total, "paragraphs_with_a_quote": with_quote,
            "paragraphs_opening_with_a_quote": opening, "runs_of_two_or_more_such_paragraphs": runs,
            "dialogues": len(dialogues), "turns": sum(len(d) for d in dialogues),
            "dlm_windows": sum(len(dlm_windows(d)) for d in dialogues),
            "examples": [[t.text for t in d] for d in dialogues[:: max(len(dialogues) // 4, 1)][:4]]}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    default = [str(shared_data("gutenberg_en", name)) for name in ("valid.txt.xz", "test.txt.xz")]
    parser.add_argument("--files", action="append", default=None, help="corpus files or globs (default: the "
                        "Gutenberg valid and test books)")
    parser.add_argument("--out", default="docs/results/dialogue_corpus.json", help="the JSON record to write")
    parser.add_argument("--examples", type=int, default=4, help="dialogues of 3-6 turns to show (seeded draw)")
    parser.add_argument("--bible-out", default=None, help="also write the KJV as a corpus file here")
    parser.add_argument("--chinese", action="store_true", help="also look for dialogue in People's Daily")
    args = parser.parse_args()
    files = expand_patterns(args.files or default)
    started = time.process_time()
    record = {"date": date.today().isoformat(), "machine": f"{platform.machine()}, {os.cpu_count()} CPUs",
              "command": "python benchmarks/dialogue_corpus.py " + " ".join(sys.argv[1:]),
              **dialogue_counts(files, examples=args.examples)}
    if args.chinese:
        record["chinese"] = chinese_check()
    if args.bible_out:
        record["bible"] = {"file": Path(args.bible_out).name, "verses": write_bible(Path(args.bible_out))}
    record["cpu_s"] = round(time.process_time() - started, 1)
    out = Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    with atomic_path(out) as tmp:
        Path(tmp).write_text(json.dumps(record, indent=1, ensure_ascii=False) + "\n", encoding="utf-8")
    print(json.dumps({k: v for k, v in record.items() if k != "examples"}, indent=1, ensure_ascii=False))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
