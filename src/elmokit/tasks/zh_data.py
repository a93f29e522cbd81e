"""Chinese task data: People's Daily 1998 (PKU segmented + POS-tagged) and its documented split;
Weibo and Resume NER; word segmentation as B/M/E/S character tagging.

Readers (every error names ``file:line``): ``read_peoples_daily`` (words + PKU POS tags),
``read_peoples_daily_cws`` (characters + B/M/E/S), ``read_segmented`` (a space-separated gold file
such as SIGHAN's ``pku_test_gold.utf8``, as characters + B/M/E/S), ``read_weibo_ner`` and
``read_resume_ner`` (characters + BIO). ``words_to_bmes`` / ``bmes_to_words`` convert between
words and labels; ``cws_to_bio`` / ``bio_to_cws`` between B/M/E/S and the tagger's BIO words.

People's Daily January 1998 (``../shared/data/zh/peoples_daily_199801/199801.txt``) has one
paragraph per line, ``word/TAG`` items separated by two spaces (PKU tagset), and no official
train/dev/test split. elmokit's split, used by the Chinese model's corpus (its dev and test
paragraphs are never in the language model's training text) and by the Chinese tasks:

* lines are grouped in blocks of ``PD_BLOCK`` = 100 consecutive lines (whole articles stay mostly
  together, and every part of the month is in every split);
* block ``b`` goes to dev when ``b % 10 == 8``, to test when ``b % 10 == 9``, else to train
  (about 80/10/10 of the paragraphs: 15,684 / 1,900 / 1,900 lines, 902,917 / 107,813 / 110,717 words).
"""

from __future__ import annotations

import os
import re
from collections.abc import Sequence

from elmokit.tasks.data import TaggedCorpus, TaggingDataError, bio_to_bioes, bioes_to_bio, iob1_to_bio, read_lines

PD_BLOCK = 100
PD_SPLITS = ("train", "dev", "test")


def peoples_daily_split(line_number: int) -> str:
    """"train", "dev" or "test" for the 1-based line number of 199801.txt (the rule above)."""
    block = (line_number - 1) // PD_BLOCK
    return {8: "dev", 9: "test"}.get(block % 10, "train")


def parse_peoples_daily_line(line: str, where: str) -> tuple[list[str], list[str]]:
    """(words, PKU tags) of one ``word/TAG  word/TAG`` line; ``where`` ("file:line") names it in errors."""
    words, tags = [], []
    for item in line.split():
        word, slash, tag = item.rpartition("/")
        if not slash or not word or not tag:
            raise TaggingDataError(f"{where}: {item!r} is not word/TAG (People's Daily items are word/TAG "
                                   "separated by spaces)")
        words.append(word)
        tags.append(tag)
    return words, tags


def read_peoples_daily(path: str | os.PathLike, split: str | None = None) -> TaggedCorpus:
    """The paragraphs of ``split`` (all when None) as words with their PKU POS tags; empty lines skipped."""
    if split is not None and split not in PD_SPLITS:
        raise ValueError(f"split must be one of {PD_SPLITS}, not {split!r}")
    sentences, labels = [], []
    for number, line in read_lines(path, TaggingDataError):
        if not line.strip() or (split is not None and peoples_daily_split(number) != split):
            continue
        words, tags = parse_peoples_daily_line(line, f"{path}:{number}")
        sentences.append(words)
        labels.append(tags)
    return TaggedCorpus(sentences, labels, str(path))


def read_peoples_daily_cws(path: str | os.PathLike, split: str | None = None) -> TaggedCorpus:
    """Word segmentation data from People's Daily: each paragraph of ``split`` as characters with their
    B/M/E/S labels (``words_to_bmes``), the POS tags dropped.

    SIGHAN-2005 PKU's own training text (``pku_training.utf8``, People's Daily 1998 in the PKU
    standard) is not available here; this month of the same newspaper, segmented by the same
    standard, stands in for it."""
    words = read_peoples_daily(path, split)
    corpus = TaggedCorpus([], [], str(path))
    for sentence in words.sentences:
        chars, labels = words_to_bmes(sentence)
        corpus.sentences.append(chars)
        corpus.labels.append(labels)
    return corpus


# PKU name tags -> entity types: nr person (surname and given name are separate nr words: "江/nr 泽民/nr"),
# ns place, nt organisation.
PD_ENTITY_TYPES = {"nr": "PER", "ns": "LOC", "nt": "ORG"}


def peoples_daily_entities_bio(words: Sequence[str], tags: Sequence[str]) -> tuple[list[str], list[str]]:
    """(characters, BIO labels) of one People's Daily paragraph from its PKU tags: an ``ns`` or ``nt``
    word is one LOC / ORG entity; a run of consecutive ``nr`` words is one PER entity (PKU tags a
    surname and a given name as two ``nr`` words); every other word is O.

    >>> peoples_daily_entities_bio(["江", "泽民", "访问", "北京"], ["nr", "nr", "v", "ns"])
    (['江', '泽', '民', '访', '问', '北', '京'], ['B-PER', 'I-PER', 'I-PER', 'O', 'O', 'B-LOC', 'I-LOC'])
    """
    chars, labels = [], []
    previous = None
    for word, tag in zip(words, tags, strict=True):
        kind = PD_ENTITY_TYPES.get(tag)
        chars.extend(word)
        if kind is None:
            labels.extend(["O"] * len(word))
        elif kind == "PER" and previous == "nr":  # the given name after the surname
            labels.extend([f"I-{kind}"] * len(word))
        else:
            labels.extend([f"B-{kind}"] + [f"I-{kind}"] * (len(word) - 1))
        previous = tag
    return chars, labels


def read_peoples_daily_ner(path: str | os.PathLike, split: str | None = None) -> TaggedCorpus:
    """Named entities of People's Daily as character NER: each paragraph of ``split`` as characters with
    BIO labels PER / LOC / ORG from its nr / ns / nt tags (``peoples_daily_entities_bio``)."""
    words = read_peoples_daily(path, split)
    corpus = TaggedCorpus([], [], str(path), ["nr/ns/nt -> PER/LOC/ORG, consecutive nr words one person"])
    for sentence, tags in zip(words.sentences, words.labels):
        chars, labels = peoples_daily_entities_bio(sentence, tags)
        corpus.sentences.append(chars)
        corpus.labels.append(labels)
    return corpus


# --------------------------------------------------------------------------- word segmentation as tagging

# Word segmentation as character tagging (Xue 2003): each character is B (begins a word of two or more
# characters), M (inside one), E (ends one) or S (a word by itself).
BMES = ("B", "M", "E", "S")


def words_to_bmes(words: Sequence[str]) -> tuple[list[str], list[str]]:
    """(characters, B/M/E/S labels) of a segmented sentence; a character is one Unicode code point.

    >>> words_to_bmes(["中国", "人民", "的"])
    (['中', '国', '人', '民', '的'], ['B', 'E', 'B', 'E', 'S'])
    """
    chars, labels = [], []
    for word in words:
        if not word:
            raise ValueError("an empty word cannot be labelled")
        chars.extend(word)
        labels.extend(["S"] if len(word) == 1 else ["B"] + ["M"] * (len(word) - 2) + ["E"])
    return chars, labels


def bmes_to_words(chars: Sequence[str], labels: Sequence[str]) -> list[str]:
    """The words B/M/E/S labels cut ``chars`` into (the inverse of ``words_to_bmes``).

    A word starts at the first character, at every B or S, and after every E or S; so any label
    sequence gives words (an ill-formed one, e.g. ``E B`` without a B before the E, is cut
    where its labels say a word starts or ends) and a well-formed one gives back exactly the words
    ``words_to_bmes`` labelled."""
    if len(chars) != len(labels):
        raise ValueError(f"{len(chars)} characters but {len(labels)} labels")
    words: list[str] = []
    for i, (char, label) in enumerate(zip(chars, labels)):
        if label not in BMES:
            raise ValueError(f"label {label!r} at position {i} is not one of B, M, E, S")
        if i == 0 or label in ("B", "S") or labels[i - 1] in ("E", "S"):
            words.append(char)
        else:
            words[-1] += char
    return words


_SCORER_SPACES = re.compile(r"[ \t\n\r\f\v\u3000]+")


def segmented_words(line: str) -> list[str]:
    """The words of a segmented line by the SIGHAN scorer's rule: split at ASCII whitespace and the
    ideographic space U+3000 (the rule of ``elmokit.evaluation.segmentation.words_of``; tasks do not
    import evaluation, and a test checks the two agree)."""
    return [word for word in _SCORER_SPACES.split(line) if word]


def read_segmented(path: str | os.PathLike) -> TaggedCorpus:
    """A segmented file (one sentence a line, words separated by spaces, as SIGHAN's gold files:
    ``pku_test_gold.utf8``) as characters with B/M/E/S labels. Words are split by the bakeoff
    scorer's rules (ASCII whitespace and U+3000, ``elmokit.evaluation.segmentation.words_of``);
    empty lines are skipped, as the scorer skips them."""
    corpus = TaggedCorpus([], [], str(path))
    for _, line in read_lines(path, TaggingDataError):
        words = segmented_words(line)
        if words:
            chars, labels = words_to_bmes(words)
            corpus.sentences.append(chars)
            corpus.labels.append(labels)
    if not corpus.sentences:
        raise TaggingDataError(f"{path}: no segmented lines found")
    return corpus


def cws_to_bio(labels: Sequence[str]) -> list[str]:
    """B/M/E/S -> the tagger's BIO with one chunk type ``W`` (a word is a chunk: B/S -> B-W, M/E -> I-W).

    Trained with ``scheme="BIOES"`` the tagger works in B-W/I-W/E-W/S-W, which is B/M/E/S itself,
    and its constrained CRF only ever decodes well-formed words."""
    return ["B-W" if label in ("B", "S") else "I-W" for label in labels]


def bio_to_cws(labels: Sequence[str]) -> list[str]:
    """The tagger's BIO words (``cws_to_bio``) -> B/M/E/S. Any label that is not I-W starts a word."""
    out = []
    for i, label in enumerate(labels):
        starts = label != "I-W" or i == 0
        ends = i + 1 == len(labels) or labels[i + 1] != "I-W"
        out.append({(True, True): "S", (True, False): "B", (False, False): "M", (False, True): "E"}[(starts, ends)])
    return out


# --------------------------------------------------------------------------- NER: Weibo and Resume

_ASCII_DIGITS = "0123456789"


def _check_entity_label(label: str, prefixes: str, where: str, scheme: str) -> None:
    prefix, dash, entity = label.partition("-")
    if label != "O" and (not dash or prefix not in prefixes or len(prefix) != 1 or not entity):
        raise TaggingDataError(f"{where}: label {label!r} is not O or {'/'.join(prefixes)}-TYPE ({scheme})")


def read_weibo_ner(path: str | os.PathLike) -> TaggedCorpus:
    """Weibo NER (Peng & Dredze 2015; the revised ``weiboNER_2nd_conll.*``): one character a line,
    ``char+position<TAB>tag``, sentences separated by blank lines, BIO labels over PER/ORG/LOC/GPE
    x NAM/NOM (``B-PER.NOM``).

    The number after the character is its position in the word of the authors' segmentation
    (``科0``, ``技1``); it is stripped, and it can have several digits (``p10``), so every trailing
    ASCII digit goes, except that a field of digits only is a digit character followed by its
    position (``310`` is ``3`` at position 10). Labels are returned in BIO; an ``I-`` that opens a
    chunk is made ``B-`` (counted in ``notes``)."""
    corpus = TaggedCorpus([], [], str(path))
    chars: list[str] = []
    labels: list[str] = []
    for number, line in read_lines(path, TaggingDataError):
        where = f"{path}:{number}"
        if not line.strip():
            if chars:
                corpus.sentences.append(chars)
                corpus.labels.append(labels)
            chars, labels = [], []
            continue
        fields = line.split("\t")
        if len(fields) != 2 or not fields[1].strip():
            raise TaggingDataError(f"{where}: expected 'character+position<TAB>tag', got {line[:80]!r}")
        field, label = fields[0].strip(), fields[1].strip()
        char = field.rstrip(_ASCII_DIGITS)
        if not char and len(field) >= 2:
            char = field[0]  # a digit character, then its position
        if not char or char == field:
            raise TaggingDataError(f"{where}: {field!r} is not a character followed by its position number "
                                   "(e.g. '科0')")
        _check_entity_label(label, "BI", where, "BIO")
        chars.append(char)
        labels.append(label)
    if chars:
        corpus.sentences.append(chars)
        corpus.labels.append(labels)
    if not corpus.sentences:
        raise TaggingDataError(f"{path}: no sentences found")
    _repair_bio(corpus)
    return corpus


def _repair_bio(corpus: TaggedCorpus) -> None:
    changed = 0
    for i, row in enumerate(corpus.labels):
        repaired = iob1_to_bio(row)
        changed += sum(a != b for a, b in zip(row, repaired))
        corpus.labels[i] = repaired
    if changed:
        corpus.notes.append(f"{changed} chunk-opening I- labels made B- (BIO)")


# Lines of the released Resume files that are broken, and what they are read as. train.char.bmes line
# 68,949 is "-NAME": its character and the "M" of its label were lost; between 上汽 (B-NAME, M-NAME) and
# 同济 (M-NAME) of "上汽-同济汽车整车工程中心" it can only be the hyphen inside the name.
RESUME_KNOWN_DEFECTS = {("train.char.bmes", 68949, "-NAME"): ("-", "M-NAME")}


def read_resume_ner(path: str | os.PathLike) -> TaggedCorpus:
    """Resume NER (Zhang & Yang 2018, ``*.char.bmes``): ``char tag`` per line (CRLF or LF), blank
    lines between sentences, tags B/M/E/S-TYPE or O.

    The labels are returned in BIO (B and S -> B-, M and E -> I-), the tagger's input scheme; the
    mapping loses nothing for well-formed BMES (``bmes_to_bioes`` keeps it as BIOES: M -> I), and
    the benchmark trains the tagger in BIOES, which is BMES renamed. An ill-formed BMES chunk (two
    sentences of the train file end inside a chunk: B M M without its E) is read as BIO reads it, the
    chunk closed at the sentence end, and counted in ``notes``. The known broken lines
    of the release (``RESUME_KNOWN_DEFECTS``) are read as repaired and listed in ``notes``."""
    corpus = TaggedCorpus([], [], str(path))
    chars: list[str] = []
    labels: list[str] = []
    ill_formed = 0

    def end_sentence() -> None:
        nonlocal chars, labels, ill_formed
        if chars:
            bioes = bmes_to_bioes(labels)
            bio = bioes_to_bio(bioes)
            ill_formed += bio_to_bioes(bio) != bioes
            corpus.sentences.append(chars)
            corpus.labels.append(bio)
        chars, labels = [], []

    for number, line in read_lines(path, TaggingDataError):
        where = f"{path}:{number}"
        if not line.strip():
            end_sentence()
            continue
        fields = line.split()
        repair = RESUME_KNOWN_DEFECTS.get((os.path.basename(path), number, line.strip()))
        if repair is not None:
            fields = list(repair)
            corpus.notes.append(f"{where}: {line.strip()!r} read as {' '.join(repair)!r} (a known defect of the release)")
        if len(fields) != 2:
            raise TaggingDataError(f"{where}: expected 'character tag', got {line[:80]!r}")
        _check_entity_label(fields[1], "BMES", where, "BMES")
        chars.append(fields[0])
        labels.append(fields[1])
    end_sentence()
    if not corpus.sentences:
        raise TaggingDataError(f"{path}: no sentences found")
    if ill_formed:
        corpus.notes.append(f"{ill_formed} sentences with ill-formed BMES chunks (read as BIO reads them: "
                            "an unclosed chunk ends with the sentence)")
    return corpus


def bmes_to_bioes(labels: Sequence[str]) -> list[str]:
    """B/M/E/S-TYPE -> BIOES: M-x -> I-x, the rest unchanged."""
    return ["I-" + label[2:] if label.startswith("M-") else label for label in labels]
