"""The training data stream: every line once per epoch, seeded shuffling within a bounded buffer,
an exact resume position, whole-sentence batches, and the split over data-parallel ranks."""

import lzma
from itertools import islice

import pytest

from elmokit.training.data import Position, SentenceStream, batches, make_tokenizer


@pytest.fixture
def shards(tmp_path):
    """3 shards (plain, .xz, plain) of numbered one-token... five-token lines."""
    paths = []
    for s in range(3):
        lines = [" ".join(f"s{s}l{i}t{k}" for k in range(1 + i % 5)) for i in range(7 + 2 * s)]
        text = "\n".join(lines) + "\n\n"  # a blank line is skipped
        if s == 1:
            path = tmp_path / f"part{s}.txt.xz"
            with lzma.open(path, "wt", encoding="utf-8") as handle:
                handle.write(text)
        else:
            path = tmp_path / f"part{s}.txt"
            path.write_text(text, encoding="utf-8")
        paths.append(path)
    return tmp_path, paths


def all_lines(paths):
    out = []
    for p in paths:
        opener = lzma.open if p.suffix == ".xz" else open
        with opener(p, "rt", encoding="utf-8") as handle:
            out += [line.split() for line in handle if line.strip()]
    return out


def epoch(stream, start=None):
    start = Position() if start is None else start
    return [(s, pos) for s, pos in islice(stream(start), 7 + 9 + 11)]


def test_each_epoch_is_a_seeded_permutation_of_all_lines(shards):
    root, paths = shards
    stream = SentenceStream(str(root / "part*"), shuffle_buffer=4, seed=5)
    first = [s for s, _ in epoch(stream)]
    assert sorted(map(tuple, first)) == sorted(map(tuple, all_lines(paths)))
    assert first != all_lines(paths), "shuffled"
    assert first == [s for s, _ in epoch(SentenceStream(str(root / "part*"), shuffle_buffer=4, seed=5))], "seeded"
    assert first != [s for s, _ in epoch(SentenceStream(str(root / "part*"), shuffle_buffer=4, seed=6))]
    second = [s for s, _ in islice(stream(Position(epoch=1)), 27)]
    assert sorted(map(tuple, second)) == sorted(map(tuple, first)) and second != first, "a new order each epoch"


def test_shuffle_is_bounded_by_the_buffer_and_the_shard(shards):
    root, paths = shards
    stream = SentenceStream(str(root / "part*"), shuffle_buffer=3, seed=0)
    items = epoch(stream)
    order = stream.shard_order(0)
    for sentence, pos in items:
        shard_lines = all_lines([order[pos.shard]])
        assert sentence in shard_lines, "sentences never cross shards"
        # with a buffer of 3, the k-th sentence out of a shard is among its first k + 3 lines
        assert shard_lines.index(sentence) < pos.offset + 3
    unbuffered = [s for s, _ in epoch(SentenceStream(str(root / "part*"), shuffle_buffer=1, seed=0))]
    assert unbuffered == [line for p in order for line in all_lines([p])], "buffer 1 = shard order, lines in order"


def test_resuming_at_any_position_gives_the_rest_of_the_stream(shards):
    root, _ = shards
    stream = SentenceStream(str(root / "part*"), shuffle_buffer=4, seed=1)
    full = list(islice(stream(), 60))  # more than two epochs
    for cut in (0, 1, 6, 7, 13, 26, 27, 40):
        start = full[cut - 1][1] if cut else Position()
        assert list(islice(stream(start), 60 - cut)) == full[cut:], cut


def test_long_lines_are_cut_at_max_length(tmp_path):
    (tmp_path / "c.txt").write_text("a b c d e f g\nh\n")
    stream = SentenceStream(str(tmp_path / "c.txt"), shuffle_buffer=1, max_length=3)
    assert [s for s, _ in islice(stream(), 4)] == [["a", "b", "c"], ["d", "e", "f"], ["g"], ["h"]]


def test_batches_by_sentences_and_by_tokens_never_span_epochs(shards):
    root, _ = shards
    stream = SentenceStream(str(root / "part*"), shuffle_buffer=4, seed=2)
    flat = [s for s, _ in islice(stream(), 27)]
    got = list(islice(batches(stream, batch_size=5), 6))
    assert [len(b.sentences) for b in got] == [5, 5, 5, 5, 5, 2]  # 27 = 5 * 5 + 2, then epoch 1
    assert [s for b in got for s in b.sentences] == flat and got[-1].epoch == 0
    by_tokens = list(islice(batches(stream, batch_tokens=9), 12))
    for b in by_tokens:
        assert b.num_tokens <= 9 or len(b.sentences) == 1
    epoch0 = [s for b in by_tokens if b.epoch == 0 for s in b.sentences]
    assert epoch0 == flat
    # the position after a batch restarts the stream exactly after it
    third = list(islice(batches(stream, batch_tokens=9, start=by_tokens[2].end), 3))
    assert [b.sentences for b in third] == [b.sentences for b in by_tokens[3:6]]


def test_ranks_split_each_global_batch(shards):
    root, _ = shards
    stream = SentenceStream(str(root / "part*"), shuffle_buffer=4, seed=3)
    batch = next(batches(stream, batch_size=7))
    parts = [batch.part(r, 3) for r in range(3)]
    assert [len(p) for p in parts] == [3, 2, 2]
    assert sorted(map(tuple, sum(parts, []))) == sorted(map(tuple, batch.sentences))


def test_tokenizer_hook_is_recorded(tmp_path):
    tokenizer = make_tokenizer({"kind": "hook", "callable": "shlex:split"})
    assert tokenizer('a "b c"') == ["a", "b c"]
    assert tokenizer.to_dict() == {"kind": "hook", "callable": "shlex:split", "lowercase": False}
    with pytest.raises(ValueError, match="cannot be imported"):
        make_tokenizer({"kind": "hook", "callable": "no_such_module:f"})
