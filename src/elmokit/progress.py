"""Progress a user can follow: a tqdm bar on a terminal, a plain line with rate and ETA every few seconds
otherwise (a log file, a batch job, a pipe), never silence.

``progress_bar`` takes tqdm's common arguments and returns either a ``tqdm`` or a ``LogProgress``, which
offers the part of tqdm's interface elmokit uses (iteration, ``update``, ``set_postfix``, ``close``,
``with``).
"""

from __future__ import annotations

import sys
import time
from collections.abc import Callable, Iterable, Iterator
from typing import IO, Any

from tqdm import tqdm

LOG_INTERVAL = 10.0  # seconds between two plain progress lines


def progress_bar(iterable: Iterable | None = None, *, total: float | None = None, desc: str = "", unit: str = "it",
                 disable: bool | None = None, file: IO[str] | None = None, interval: float = LOG_INTERVAL,
                 clock: Callable[[], float] = time.monotonic, **tqdm_options: Any):
    """A tqdm bar when ``file`` (default: stderr) is a terminal, else a ``LogProgress`` writing a line every
    ``interval`` seconds; ``disable=True``: silent. Other keywords go to tqdm (a plain line ignores them)."""
    stream = sys.stderr if file is None else file
    if total is None and iterable is not None and hasattr(iterable, "__len__"):
        total = len(iterable)  # type: ignore[arg-type]
    if disable or _is_terminal(stream):
        return tqdm(iterable, total=total, desc=desc, unit=unit, disable=bool(disable), file=stream, **tqdm_options)
    return LogProgress(iterable, total=total, desc=desc, unit=unit, file=stream, interval=interval, clock=clock)


def _is_terminal(stream) -> bool:
    try:
        return bool(stream.isatty())
    except (AttributeError, ValueError):  # no isatty, or a closed stream
        return False


def format_seconds(seconds: float) -> str:
    """``0:07``, ``12:03``, ``1:02:03``."""
    seconds = int(round(seconds))
    hours, rest = divmod(seconds, 3600)
    minutes, secs = divmod(rest, 60)
    return f"{hours}:{minutes:02d}:{secs:02d}" if hours else f"{minutes}:{secs:02d}"


class LogProgress:
    """tqdm's interface for a stream that is not a terminal: one line per ``interval`` seconds,
    ``DESC: N/TOTAL UNIT (P%), R UNIT/s, ETA M:SS[, postfix]``, and a last line at ``close``."""

    def __init__(self, iterable: Iterable | None = None, *, total: float | None = None, desc: str = "", unit: str = "it",
                 file: IO[str] | None = None, interval: float = LOG_INTERVAL, clock: Callable[[], float] = time.monotonic,
                 initial: float = 0) -> None:
        self.iterable, self.total, self.desc, self.unit = iterable, total, desc, unit
        self.file = sys.stderr if file is None else file
        self.interval, self.clock = interval, clock
        self.n = self.initial = initial
        self.postfix = ""
        self.started = self.last = clock()
        self.closed = False

    def __iter__(self) -> Iterator:
        for item in self.iterable or ():
            yield item
            self.update(1)
        self.close()

    def __enter__(self) -> LogProgress:
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def __len__(self) -> int:
        return int(self.total or 0)

    def update(self, n: float = 1) -> None:
        self.n += n
        now = self.clock()
        if now - self.last >= self.interval:
            self.last = now
            self._write(self.line(now))

    def set_postfix(self, ordered_dict: dict | None = None, refresh: bool = True, **values: Any) -> None:
        values = {**(ordered_dict or {}), **values}
        self.postfix = ", ".join(f"{key}={value}" for key, value in values.items())

    def refresh(self) -> None:
        """tqdm's redraw: a plain line waits for its interval."""

    def close(self) -> None:
        if self.closed:
            return
        self.closed = True
        now = self.clock()
        done = self.n - self.initial
        if done > 0 and now - self.started >= self.interval:  # a step of a few seconds says only that it is done
            self._write(f"{self.desc + ': ' if self.desc else ''}{self._count()} {self.unit} in "
                        f"{format_seconds(now - self.started)} ({self._rate(done, now - self.started)})")

    def line(self, now: float) -> str:
        elapsed = now - self.started
        done = self.n - self.initial
        parts = [f"{self._count()} {self.unit}" + (f" ({100 * self.n / self.total:.0f}%)" if self.total else ""),
                 self._rate(done, elapsed)]
        if self.total and done > 0:
            parts.append(f"ETA {format_seconds((self.total - self.n) * elapsed / done)}")
        if self.postfix:
            parts.append(self.postfix)
        return (f"{self.desc}: " if self.desc else "") + ", ".join(parts)

    def _count(self) -> str:
        n = f"{self.n:,.0f}" if float(self.n).is_integer() else f"{self.n:,.1f}"
        return f"{n}/{self.total:,.0f}" if self.total else n

    def _rate(self, done: float, elapsed: float) -> str:
        rate = done / elapsed if elapsed > 0 else 0.0
        return f"{rate:,.1f} {self.unit}/s" if rate < 100 else f"{rate:,.0f} {self.unit}/s"

    def _write(self, text: str) -> None:
        print(text, file=self.file, flush=True)
