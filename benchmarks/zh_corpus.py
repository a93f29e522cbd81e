"""Write the Chinese model's raw training text: People's Daily 1998 (tags stripped) + the CUV Bible.

    python benchmarks/zh_corpus.py --out runs/zh/corpus

Lines are raw, unsegmented Chinese (the words of a People's Daily paragraph joined without
spaces, a Bible verse with its typographic spaces removed), so the model is trained on exactly
what a user gives it: `elmokit train --tokenizer jieba` cuts them, as `elmokit embed --model zh`
will. Held out (never in train.txt): People's Daily's dev and test paragraphs by the split of
`elmokit.tasks.zh_data` (the Chinese POS task's dev/test), and the books of Romans (valid) and Acts
(test), the books the CoVe study holds out. train.txt is shuffled (seed 0): the trainer's shuffle
buffer is bounded, and the sources must be mixed. Files are written to temporary names and renamed.
"""

from __future__ import annotations

import argparse
import lzma
import os
import random
import sys
from pathlib import Path

from elmokit.data_paths import shared_data
from elmokit.tasks.zh_data import parse_peoples_daily_line, peoples_daily_split

BIBLE_HELD_OUT = {"45": "valid", "44": "test_bible_acts"}  # Romans, Acts (books.tsv numbering)
PD_TO_LM = {"train": "train", "dev": "valid", "test": "test_peoples_daily"}


def corpus_lines(shared: Path) -> dict[str, list[str]]:
    """File name -> raw lines: train.txt and valid.txt (both sources), and each test source apart."""
    out: dict[str, list[str]] = {"train": [], "valid": [], "test_peoples_daily": [], "test_bible_acts": []}
    pd = shared / "zh" / "peoples_daily_199801" / "199801.txt"
    with open(pd, encoding="utf-8") as handle:
        for number, line in enumerate(handle, 1):
            if line.strip():
                words, _ = parse_peoples_daily_line(line, f"{pd}:{number}")
                out[PD_TO_LM[peoples_daily_split(number)]].append("".join(words))
    bible = shared / "bible_parallel" / "zh_cuv.tsv.xz"
    with lzma.open(bible, "rt", encoding="utf-8") as handle:
        for number, line in enumerate(handle, 1):
            verse_id, tab, text = line.rstrip("\n").partition("\t")
            if not tab:
                raise ValueError(f"{bible}:{number}: expected 'book.chapter.verse<TAB>text'")
            text = "".join(text.split())
            if text:
                out[BIBLE_HELD_OUT.get(verse_id.split(".")[0], "train")].append(text)
    # One pass of the trainer shuffles only within a bounded buffer, so a file of all the newspaper then all
    # the Bible would be learnt in that order (the valid perplexity rose while it read the Bible): interleave.
    random.Random(0).shuffle(out["train"])
    return out


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", default="runs/zh/corpus",
                        help="folder for train.txt, valid.txt, test_peoples_daily.txt, test_bible_acts.txt")
    parser.add_argument("--shared-data", default=None, help="the shared data folder (default: ../shared/data)")
    args = parser.parse_args()
    shared = Path(args.shared_data) if args.shared_data else shared_data()
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    for name, lines in corpus_lines(shared).items():
        target = out / f"{name}.txt"
        tmp = target.with_suffix(".txt.tmp")
        tmp.write_text("".join(line + "\n" for line in lines), encoding="utf-8")
        os.replace(tmp, target)
        print(f"{target}: {len(lines):,} lines, {sum(map(len, lines)):,} characters")
    return 0


if __name__ == "__main__":
    sys.exit(main())
