"""File helpers shared by every writer: nothing half-written ever sits where a result should."""

from __future__ import annotations

import contextlib
import os
import shutil
import tempfile
from collections.abc import Iterator
from pathlib import Path


@contextlib.contextmanager
def atomic_path(target: str | os.PathLike) -> Iterator[str]:
    """Yield a temporary path beside ``target``; on success rename it over ``target``.

    On any exception (KeyboardInterrupt included) the temporary file is removed and ``target``
    is left exactly as it was. The rename is atomic on POSIX filesystems.
    """
    target = Path(target)
    fd, tmp = tempfile.mkstemp(prefix=f".{target.name}.", suffix=".tmp", dir=target.parent)
    os.close(fd)
    # mkstemp creates the file private (0600); give the result the permissions of a normal file.
    umask = os.umask(0)
    os.umask(umask)
    try:
        yield tmp
        os.chmod(tmp, 0o666 & ~umask)  # after the writer: it may have replaced the temporary file
        os.replace(tmp, target)
    except BaseException:
        with contextlib.suppress(FileNotFoundError):
            os.remove(tmp)
        raise


@contextlib.contextmanager
def atomic_directory(target: str | os.PathLike) -> Iterator[Path]:
    """Yield a temporary folder beside ``target`` that replaces it on success.

    An existing ``target`` is moved aside first and removed only once the new folder is in place,
    so a reader never finds a half-written folder; on any exception the temporary folder is removed
    and ``target`` is left as it was.
    """
    target = Path(target)
    target.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=f".{target.name}.", suffix=".tmp", dir=target.parent))
    try:
        yield tmp
        _apply_umask(tmp)  # mkdtemp makes the folder private (0700), and some writers their files (0600)
        old = None
        if target.exists():
            old = target.with_name(f".{target.name}.old-{os.getpid()}")
            os.replace(target, old)
        os.replace(tmp, target)
        if old is not None:
            shutil.rmtree(old, ignore_errors=True)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise


def _apply_umask(folder: Path) -> None:
    """Give ``folder``, its subfolders and files the permissions of ones made normally (umask 022:
    0755 folders, 0644 files), whatever the writers created them with."""
    umask = os.umask(0)
    os.umask(umask)
    os.chmod(folder, 0o777 & ~umask)
    for root, folders, files in os.walk(folder):
        for name in folders:
            os.chmod(os.path.join(root, name), 0o777 & ~umask)
        for name in files:
            path = os.path.join(root, name)
            if not os.path.islink(path):
                os.chmod(path, 0o666 & ~umask)
