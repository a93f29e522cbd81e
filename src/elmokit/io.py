"""File helpers shared by every writer: nothing half-written ever sits where a result should.

A result is written under a temporary name beside it and renamed over it at the end. The
temporary is named ``.<name>.elmokit-tmp-<host>-<pid>`` (``.out.h5.elmokit-tmp-node1-4242``
for ``out.h5``), so that anyone can tell it is ours, which output it belongs to and which process
writes it. A writer that is killed outright (``kill -9``, a power cut) cannot remove its
temporary; the next writer of the same output removes every such temporary whose process is no
longer running on this host, and says so (a warning on the ``elmokit.io`` logger). Temporaries
written on another host (a shared filesystem) are left alone: their process cannot be checked.
"""

from __future__ import annotations

import contextlib
import ctypes
import errno
import hashlib
import json
import logging
import os
import re
import shutil
import socket
import sys
import time
from collections.abc import Iterable, Iterator
from pathlib import Path

from elmokit.errors import NoSpaceLeft, UserError, is_disk_full

logger = logging.getLogger(__name__)

TEMP_MARK = ".elmokit-tmp-"
_held: set[str] = set()  # temporaries this process is writing now (absolute paths)


def _host() -> str:
    return re.sub(r"[^A-Za-z0-9.-]", "_", socket.gethostname()) or "localhost"


def temporary_path(target: str | os.PathLike, *, pid: int | None = None, host: str | None = None) -> Path:
    """The name of the temporary that process ``pid`` (default: this one) writes ``target`` under."""
    target = Path(target)
    return target.with_name(f".{target.name}{TEMP_MARK}{host or _host()}-{os.getpid() if pid is None else pid}")


def _temporary_owner(target: Path, candidate: str) -> tuple[str, int] | None:
    """(host, pid) when ``candidate`` is the name of one of our temporaries of ``target``."""
    prefix = f".{target.name}{TEMP_MARK}"
    if not candidate.startswith(prefix):
        return None
    match = re.fullmatch(r"(?P<host>[A-Za-z0-9._-]+)-(?P<pid>\d+)(?:\.\d+)?", candidate[len(prefix):])
    return (match["host"], int(match["pid"])) if match else None


def _process_running(pid: int) -> bool:
    if pid <= 0:
        return False
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # another user's process: it exists
        return True
    return True


def _process_start_time(pid: int) -> float | None:
    """When process ``pid`` started (seconds since the epoch), where /proc says (Linux); else None."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
        ticks = int(stat[stat.rindex(")") + 2 :].split()[19])  # field 22, starttime, in clock ticks since boot
        boot = next(int(line.split()[1]) for line in Path("/proc/stat").read_text().splitlines() if line.startswith("btime "))
        return boot + ticks / os.sysconf("SC_CLK_TCK")
    except (OSError, ValueError, IndexError, StopIteration):
        return None


def _is_stale(path: Path, host: str, pid: int) -> bool:
    """Whether the temporary ``path`` of process ``pid`` on ``host`` can no longer be written to."""
    if host != _host():
        return False  # another machine's process: nothing here can tell whether it still runs
    if pid == os.getpid():
        return str(path.absolute()) not in _held  # left by an earlier process that had this pid
    if not _process_running(pid):
        return True
    started = _process_start_time(pid)  # the pid may have been reused by a process started since
    try:
        modified = path.lstat().st_mtime
    except OSError:
        return False
    return started is not None and started > modified + 2.0


def remove_stale_temporaries(target: str | os.PathLike) -> list[Path]:
    """Remove the temporaries of ``target`` left by writers of this host that no longer run
    (killed before they could clean up); log each one. Returns the paths removed."""
    target = Path(target)
    removed = []
    try:
        names = os.listdir(target.parent if str(target.parent) else ".")
    except OSError:
        return removed
    for name in names:
        owner = _temporary_owner(target, name)
        if owner is None:
            continue
        path = target.with_name(name)
        if not _is_stale(path, *owner):
            continue
        try:
            if path.is_dir() and not path.is_symlink():
                shutil.rmtree(path)
            else:
                path.unlink()
        except FileNotFoundError:
            continue
        except OSError as error:
            logger.warning("%s: could not remove this temporary left by an interrupted run (process %d): %s",
                           path, owner[1], error.strerror or error)
            continue
        logger.warning("removed %s: a temporary left by an interrupted run (process %d, no longer running)", path, owner[1])
        removed.append(path)
    return removed


def _claim(target: Path, *, directory: bool) -> Path:
    """Create this process's temporary beside ``target`` (exclusively) and mark it held; the path
    returned is absolute (release it with ``_release``)."""
    target = target.absolute()
    remove_stale_temporaries(target)
    base = temporary_path(target)
    for attempt in range(1000):
        path = base if attempt == 0 else base.with_name(f"{base.name}.{attempt}")  # this process writes it twice
        if str(path) in _held:
            continue
        try:
            if directory:
                os.mkdir(path, 0o700)
            else:
                os.close(os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600))
        except FileExistsError:
            continue
        _held.add(str(path))
        return path
    raise FileExistsError(errno.EEXIST, "too many temporaries", str(base))


def _release(path: Path) -> None:
    _held.discard(str(path))


@contextlib.contextmanager
def _temporary(target: Path, *, directory: bool) -> Iterator[Path]:
    """This process's temporary beside ``target``, for the body to fill and move into place. On any exception
    (KeyboardInterrupt included) it is removed, leaving ``target`` as it was; a full disk becomes ``NoSpaceLeft``."""
    tmp = None
    try:
        tmp = _claim(target, directory=directory)
        yield tmp
    except BaseException as error:
        if tmp is not None:
            if directory:
                shutil.rmtree(tmp, ignore_errors=True)
            else:
                with contextlib.suppress(FileNotFoundError):
                    os.remove(tmp)
        if is_disk_full(error):
            raise _disk_full(target) from error
        raise
    finally:
        if tmp is not None:
            _release(tmp)


def file_sha256(path: str | os.PathLike) -> str:
    """The sha256 of a file's bytes, read in 1 MiB blocks (a file of any size)."""
    digest = hashlib.sha256()
    with open(path, "rb") as handle:
        for block in iter(lambda: handle.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


@contextlib.contextmanager
def atomic_path(target: str | os.PathLike) -> Iterator[str]:
    """Yield a temporary path beside ``target``; on success rename it over ``target``.

    On any exception (KeyboardInterrupt included) the temporary file is removed and ``target``
    is left exactly as it was. The rename is atomic on POSIX filesystems. Stale temporaries of
    ``target`` (their writer was killed) are removed first.
    """
    target = Path(target)
    # the umask, to give the result the permissions of a normal file (the temporary is private, 0600)
    umask = os.umask(0)
    os.umask(umask)
    with _temporary(target, directory=False) as tmp:
        yield str(tmp)
        os.chmod(tmp, 0o666 & ~umask)  # after the writer: it may have replaced the temporary file
        os.replace(tmp, target)


def write_json(target: str | os.PathLike, value, *, indent: int = 2, ensure_ascii: bool = True) -> None:
    """``value`` as JSON text with a final newline, written through ``atomic_path``."""
    with atomic_path(target) as tmp:
        Path(tmp).write_text(json.dumps(value, indent=indent, ensure_ascii=ensure_ascii) + "\n", encoding="utf-8")


def _exchange(first: Path, second: Path) -> bool:
    """Swap two paths in one step (Linux ``renameat2(RENAME_EXCHANGE)``); False where the system cannot,
    so the caller falls back to moving the old folder aside first."""
    if not sys.platform.startswith("linux"):
        return False
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        renameat2 = libc.renameat2
    except (OSError, AttributeError):
        return False
    at_fdcwd, rename_exchange = -100, 2
    result = renameat2(at_fdcwd, os.fsencode(first), at_fdcwd, os.fsencode(second), rename_exchange)
    return result == 0


@contextlib.contextmanager
def atomic_directory(target: str | os.PathLike) -> Iterator[Path]:
    """Yield a temporary folder beside ``target`` that replaces it on success.

    An existing ``target`` is moved aside first and removed only once the new folder is in place,
    so a reader never finds a half-written folder; on any exception the temporary folder is removed
    and ``target`` is left as it was. Stale temporary folders of ``target`` are removed first.
    """
    target = Path(target)
    target.parent.mkdir(parents=True, exist_ok=True)
    with _temporary(target, directory=True) as tmp:
        yield tmp
        _apply_umask(tmp)  # the temporary folder is private (0700), and some writers make their files 0600
        if target.exists() and _exchange(tmp, target):
            shutil.rmtree(tmp, ignore_errors=True)  # now the old folder: the new one is in place
        else:
            old = None
            if target.exists():  # no atomic exchange here: move aside, never remove before the new one is in
                old = target.with_name(f".{target.name}.old-{os.getpid()}-{time.monotonic_ns()}")
                os.replace(target, old)
            os.replace(tmp, target)
            if old is not None:
                shutil.rmtree(old, ignore_errors=True)


def _disk_full(target: Path) -> NoSpaceLeft:
    return NoSpaceLeft(f"{target}: the disk filled up while it was written; it was left as it was (the partial "
                       "temporary removed); free some space, or write to another disk")


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


def write_marked_block(path: str | os.PathLike, begin: str, end: str, body: str, *, after: str | None = None,
                       heading: str | None = None) -> None:
    """Put ``body`` between the lines ``begin`` and ``end`` of the text file ``path`` (a generated part of a
    document), atomically. Where the markers are not there yet, the block goes after the marker ``after``
    when present, else under the line ``heading`` (added at the end when missing), else at the end."""
    path = Path(path)
    text = path.read_text(encoding="utf-8")
    block = f"{begin}\n{body}\n{end}"
    if begin in text and end in text:
        head, rest = text.split(begin, 1)
        text = head + block + rest.split(end, 1)[1]
    elif after is not None and after in text:
        head, tail = text.split(after, 1)
        text = head + after + "\n\n" + block + "\n" + tail
    elif heading is not None:
        if heading not in text:
            text = text.rstrip("\n") + f"\n\n{heading}\n"
        head, tail = text.split(heading, 1)
        text = head + heading + "\n\n" + block + "\n" + tail.lstrip("\n")
    else:
        text = text.rstrip("\n") + "\n\n" + block + "\n"
    with atomic_path(path) as tmp:
        Path(tmp).write_text(text, encoding="utf-8")


# ---- the output policy: what a command may write over ------------------------------------------------

OUTPUT_RECORD = ".elmokit-output.json"  # in every folder a command writes: which command wrote it, and its files


class OutputRefused(UserError):
    """An output path a command must not write: a file, one of its inputs, or a folder it did not write."""


def _same_or_inside(path: Path, other: Path) -> bool:
    return path == other or other in path.parents or path in other.parents


def check_output(target: str | os.PathLike, *, command: str, inputs: Iterable[str | os.PathLike | None] = (),
                 replace: bool = True, replace_flag: str | None = None) -> Path:
    """Refuse ``target`` as the output folder of ``command`` before any work; return it resolved.

    The policy every command that writes a folder keeps:

    - a path that is an existing file is refused (never replaced by a folder);
    - a path that is, contains or lies inside one of ``inputs`` is refused;
    - a missing or empty folder is fine;
    - a non-empty folder is accepted only when it is an earlier output of the same ``command`` (its
      ``.elmokit-output.json`` says so) holding nothing but the files that command wrote, and ``replace``
      is true; anything else is refused, naming the folder and what is in the way (and ``replace_flag``, the
      command's flag that allows replacing its earlier output, where it has one). Nothing here deletes.
    """
    path = Path(target)
    resolved = path.resolve()
    if path.exists() and not path.is_dir():
        raise OutputRefused(f"{path}: is a file, not a folder; give a new folder for the output")
    for item in inputs:
        if item is None:
            continue
        if _same_or_inside(resolved, Path(item).resolve()):
            raise OutputRefused(f"{path}: is, holds or lies inside the input {item}; give another folder for the output")
    if not path.exists() or not any(path.iterdir()):
        return resolved
    record = read_output_record(path)
    if record is None:
        raise OutputRefused(f"{path}: holds {sorted(os.listdir(path))[0]!r} and is no earlier output of `elmokit "
                            f"{command}`; give a new or empty folder (nothing in it is touched)")
    if record.get("command") != command:
        raise OutputRefused(f"{path}: holds the output of `elmokit {record.get('command')}`, not of `elmokit {command}`; "
                            "give another folder")
    foreign = sorted(set(os.listdir(path)) - set(record.get("files", [])) - {OUTPUT_RECORD})
    if foreign:
        raise OutputRefused(f"{path}: holds {foreign[0]!r}, which `elmokit {command}` did not write; move it away or "
                            "give another folder (nothing is deleted)")
    if not replace:
        how = f"pass {replace_flag} to replace it" if replace_flag else "ask to replace it"
        raise OutputRefused(f"{path}: holds an earlier output of `elmokit {command}`; give another folder, or {how}")
    return resolved


def check_output_file(target: str | os.PathLike, *, inputs: Iterable[str | os.PathLike | None] = ()) -> Path:
    """Refuse ``target`` as an output file before any work: an existing folder, or one of ``inputs`` by any
    name (a symlink, a hard link), which writing would destroy. The file itself is written with
    :func:`atomic_path`, so an existing output is replaced only when the new one is complete."""
    path = Path(target)
    if path.is_dir():
        raise OutputRefused(f"{path}: is a folder; give the path of the file to write")
    for item in inputs:
        if item is None or not os.path.exists(item):
            continue
        same = path.resolve() == Path(item).resolve()
        with contextlib.suppress(OSError):
            same = same or os.path.samefile(path, item)
        if same:
            raise OutputRefused(f"{path}: is the input file {item}; writing it would destroy the input; give another "
                                "output path")
    return path


def read_output_record(folder: str | os.PathLike) -> dict | None:
    """The ``.elmokit-output.json`` of ``folder`` (which command wrote it, its artifact and files), or None."""
    try:
        record = json.loads((Path(folder) / OUTPUT_RECORD).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    return record if isinstance(record, dict) else None


def write_output_record(folder: str | os.PathLike, *, command: str, artifact: str | None = None) -> None:
    """Say in ``folder`` which command wrote it and which files are its own (call it last, before the
    folder is put in place). ``artifact`` names what the folder is for the loader (``tagger``, ``cove``...)."""
    folder = Path(folder)
    files = sorted(name for name in os.listdir(folder) if name != OUTPUT_RECORD)
    record = {"command": command, "files": files}
    if artifact is not None:
        record["artifact"] = artifact
    write_json(folder / OUTPUT_RECORD, record, indent=1)


@contextlib.contextmanager
def output_directory(target: str | os.PathLike, *, command: str, inputs: Iterable[str | os.PathLike | None] = (),
                     artifact: str | None = None, replace: bool = True, replace_flag: str | None = None) -> Iterator[Path]:
    """Check ``target`` by :func:`check_output`, then yield a temporary folder that replaces it, recorded
    as ``command``'s output, only when the block succeeds (:func:`atomic_directory`). A failure leaves
    ``target`` as it was, so the same command can simply be run again."""
    check_output(target, command=command, inputs=inputs, replace=replace, replace_flag=replace_flag)
    with atomic_directory(target) as tmp:
        yield tmp
        write_output_record(tmp, command=command, artifact=artifact)
