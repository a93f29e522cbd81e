"""The one base class of every error that is the user's to fix (a bad file, flag, folder or setting).

The command line reports a ``UserError`` as one line (``elmokit <command>: error: <message>``) and exits 2;
anything else that escapes a command is a bug and keeps its traceback. A message names the thing
(file and line, field, folder), what is wrong with it, and the fix where there is one.

It subclasses ``ValueError``, so code catching ``ValueError`` catches it too.
"""

from __future__ import annotations

import errno
import os

__all__ = ["InputNotFound", "NoSpaceLeft", "UserError", "as_user_error", "is_disk_full", "where"]


class UserError(ValueError):
    """An input, setting or output path the user must change; the message says which and how."""


class InputNotFound(UserError, FileNotFoundError):
    """An input file or folder that does not exist (still a ``FileNotFoundError`` for code catching that)."""


class NoSpaceLeft(UserError):
    """The disk (or the quota) filled up while an output was written; the output was left as it was."""


def as_user_error(error: BaseException) -> UserError | None:
    """``error`` as the user meets it: itself for a ``UserError``; a missing file or a full disk (an
    ``OSError`` raised by the standard library while reading or writing) as a ``UserError`` naming the
    path; ``None`` for anything else, which is a bug and keeps its traceback."""
    if isinstance(error, UserError):
        return error
    if isinstance(error, FileNotFoundError):
        return InputNotFound(f"{error.filename}: no such file or folder" if error.filename is not None else str(error))
    if isinstance(error, OSError) and is_disk_full(error):
        place = f"{error.filename}: " if error.filename is not None else ""
        return NoSpaceLeft(f"{place}no space left on the device; free some space or write to another disk")
    return None


def is_disk_full(error: BaseException) -> bool:
    """Whether ``error`` says the disk or the quota is full (h5py puts the errno in its message only)."""
    if not isinstance(error, OSError):
        return False
    return error.errno in (errno.ENOSPC, errno.EDQUOT) or "No space left on device" in str(error)


def where(path: str | os.PathLike, line: int | None = None, field: str | None = None) -> str:
    """``corpus.txt:12`` or ``config.json: field cell_clip`` or ``vectors.txt``: the place part of a message."""
    place = os.fspath(path)
    if line is not None:
        place = f"{place}:{line}"
    if field is not None:
        place = f"{place}: field {field}"
    return place
