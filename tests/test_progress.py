"""Progress off a terminal is a plain line with rate and ETA every few seconds; on a terminal, tqdm."""

from __future__ import annotations

import io

from tqdm import tqdm

from elmokit.progress import LogProgress, format_seconds, progress_bar


class FakeClock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


class Terminal(io.StringIO):
    def isatty(self) -> bool:
        return True


def test_a_captured_stream_gets_a_line_per_interval_with_rate_and_eta():
    stream, clock = io.StringIO(), FakeClock()
    bar = progress_bar(range(10), desc="embed", unit="sent", file=stream, interval=10.0, clock=clock)
    assert isinstance(bar, LogProgress)
    for _ in bar:
        clock.now += 3.0  # each item takes 3 s, seen by the update after it
    # lines at 12 s (4 items) and 24 s (8): rate 4/12 = 0.33/s, ETA 6 items * 3 s = 18 s; then 4 * 3 = 12 s
    assert stream.getvalue().splitlines() == [
        "embed: 4/10 sent (40%), 0.3 sent/s, ETA 0:18",
        "embed: 8/10 sent (80%), 0.3 sent/s, ETA 0:06",
        "embed: 10/10 sent in 0:30 (0.3 sent/s)",
    ]


def test_without_a_total_the_line_has_count_and_rate_and_the_postfix():
    stream, clock = io.StringIO(), FakeClock()
    with progress_bar(desc="counting", unit="tok", file=stream, interval=5.0, clock=clock) as bar:
        clock.now += 5.0
        bar.set_postfix(pairs="1.2M")
        bar.update(1500)
    assert stream.getvalue().splitlines() == ["counting: 1,500 tok, 300 tok/s, pairs=1.2M",
                                              "counting: 1,500 tok in 0:05 (300 tok/s)"]


def test_a_step_shorter_than_the_interval_writes_nothing():
    stream, clock = io.StringIO(), FakeClock()
    bar = progress_bar(total=3, file=stream, clock=clock)
    bar.update(3)
    bar.close()
    bar.close()
    assert stream.getvalue() == ""


def test_a_terminal_gets_tqdm_and_disable_is_silent():
    terminal = Terminal()
    bar = progress_bar(total=2, desc="x", file=terminal)
    assert isinstance(bar, tqdm)
    bar.update(2)
    bar.close()
    assert "2/2" in terminal.getvalue()
    quiet = io.StringIO()
    silent = progress_bar(total=2, file=quiet, disable=True)
    silent.update(2)
    silent.close()
    assert quiet.getvalue() == ""


def test_format_seconds():
    assert [format_seconds(s) for s in (0, 7.4, 723, 3723)] == ["0:00", "0:07", "12:03", "1:02:03"]


def test_embed_s_rate_excludes_the_first_batch():
    """The first batch also sets up the kernels (a cost of loading): 1000 tokens in 2 s after a first batch of
    100 tokens in 3 s is 500 tokens/s, not 1100 / 5 = 220; a single batch gives no rate."""
    from pathlib import Path

    from elmokit.formats.embedding_hdf5 import EmbedFileSummary, steady_rate

    summary = EmbedFileSummary(Path("o.h5"), sentences=40, tokens=1100, seconds=5.0)
    assert steady_rate(summary, (3.0, 100)) == "500 tokens/s after the first batch"
    assert steady_rate(EmbedFileSummary(Path("o.h5"), 3, 8, 2.4), (2.4, 8)) == "one batch: too little to measure a rate"
    assert steady_rate(EmbedFileSummary(Path("o.h5"), 0, 0, 0.1), None) == "one batch: too little to measure a rate"
