"""The one base class of every error that is the user's to fix (a bad file, flag, folder or setting).

The command line reports an ``UserError`` as one line (``elmokit <command>: <message>``) and exits 2;
anything else that escapes a command is a bug and keeps its traceback. A message names the thing
(file and line, field, folder), what is wrong with it, and the fix where there is one.

It subclasses ``ValueError`` so that code written against the older, separate error classes (each of
which was a ``ValueError``) keeps catching them.
"""

from __future__ import annotations

import os

__all__ = ["UserError", "where"]


class UserError(ValueError):
    """An input, setting or output path the user must change; the message says which and how."""


def where(path: str | os.PathLike, line: int | None = None, field: str | None = None) -> str:
    """``corpus.txt:12`` or ``config.json: field cell_clip`` or ``vectors.txt``: the place part of a message."""
    place = os.fspath(path)
    if line is not None:
        place = f"{place}:{line}"
    if field is not None:
        place = f"{place}: field {field}"
    return place
