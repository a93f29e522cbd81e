"""The run folder: open (or refuse) it, read its record once, check a resume, record each command, keep
metrics, write the model card's skeleton. Every command that trains into a folder (``train``, ``pretrain``,
``distill``, ``cove train``) goes through :meth:`RunFolder.open`.

A run folder holds

    command.txt       every command that ran in this folder: ``<time>  world_size=N  <command>`` a line
    training.json     the run record: ``kind`` (the command), the resolved configs, the inputs with the
                      sha256 of each corpus file (so a resume over changed text is refused, naming the file)
    metrics.jsonl     one JSON object a line (``steps.py``)
    checkpoints/      ``step_XXXXXXXX/`` (``checkpoint.py``)
    model/            at the end: what the command exports, with its model card (README.md)

and whatever else the recipe records beside (config.json, vocab.txt, tokenizer/ ...).

The policy (the output policy of ``elmokit.io`` for folders that grow over several calls):

- ``--out`` naming a file is refused; so is a non-empty folder that holds neither a run of the same
  command nor only a run folder's own files (nothing there is touched);
- a run with a checkpoint is continued only with ``--resume``, and only when what a step computes is
  unchanged: the fields a resume may change are declared once, on the config's dataclass fields
  (``resumable()``); every other field, and the content of every corpus file, must be the run's;
- a run without a checkpoint (it failed or was stopped before its first one) holds nothing to keep:
  the same command, with or without ``--resume``, starts it again from step 0 with the settings given.
"""

from __future__ import annotations

import dataclasses
import datetime
import json
import logging
import os
import re
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from elmokit.errors import UserError
from elmokit.io import TEMP_MARK, atomic_path, file_sha256, write_json
from elmokit.text.corpus import Position

logger = logging.getLogger(__name__)

__all__ = [
    "RunError", "RunFolder", "Position", "resumable", "resumable_fields", "resume_differences", "corpus_files_record",
    "record_command", "read_commands", "truncate_metrics", "last_logged_loss", "read_metrics", "MetricsLog",
    "model_card",
]

RECORD_NAME = "training.json"
# What a start can leave before it writes the record (``start`` writes the record before the other files):
# a folder holding only these is a run that never started. Anything else without a record is the user's.
UNSTARTED_NAMES = frozenset({"command.txt", "tokenizer"})


class RunError(UserError):
    """A run folder that does not fit the request; the message says what differs and the fix."""


# ---- the checkpoints' names (their content is checkpoint.py's) ---------------------------------------

STEP_DIR = re.compile(r"^step_(\d{8,})$")


def checkpoint_dir(root: Path, step: int) -> Path:
    return root / f"step_{step:08d}"


def list_checkpoints(root: Path) -> list[tuple[int, Path]]:
    if not root.is_dir():
        return []
    found = []
    for child in root.iterdir():
        match = STEP_DIR.match(child.name)
        if match and child.is_dir() and (child / "state.json").exists():
            found.append((int(match.group(1)), child))
    return sorted(found)


def latest_checkpoint(root: Path) -> Path | None:
    found = list_checkpoints(root)
    return found[-1][1] if found else None


# ---- where a data stream stands (saved in each checkpoint) ------------------------------------------


# ---- the fields a resume may change: declared on the config's fields ------------------------------


def resumable(default: Any = dataclasses.MISSING, **kwargs: Any) -> Any:
    """A config field a resumed run may change (it does not change what a step computes)."""
    return field(default=default, metadata={"resumable": True}, **kwargs)


def resumable_fields(config_class: type) -> frozenset[str]:
    return frozenset(f.name for f in dataclasses.fields(config_class) if f.metadata.get("resumable"))


def resume_differences(saved: Any, requested: Any, prefix: str = "") -> list[str]:
    """``"<prefix>name: saved .., requested .."`` for each field that differs and may not change on resume."""
    may_change = resumable_fields(type(saved))
    return [f"{prefix}{f.name}: saved {getattr(saved, f.name)!r}, requested {getattr(requested, f.name)!r}"
            for f in dataclasses.fields(saved)
            if f.name not in may_change and getattr(saved, f.name) != getattr(requested, f.name)]


# ---- the corpus, fingerprinted by content ----------------------------------------------------------


def corpus_files_record(files: Iterable[str | os.PathLike]) -> list[dict]:
    """``[{"path", "bytes", "sha256"}]`` of the corpus files (sha256 streamed over each file's bytes)."""
    return [{"path": os.fspath(f), "bytes": os.path.getsize(f), "sha256": file_sha256(Path(f))} for f in files]


def corpus_problems(saved: dict, patterns: list[str], files: list[dict]) -> list[str]:
    """What a resume over ``patterns`` (``files``: their ``corpus_files_record`` now) changes against the run's corpus record."""
    if saved.get("patterns") != patterns:
        return [f"corpus: saved {saved.get('patterns')}, requested {patterns}"]
    return corpus_differences(saved.get("files", []), files)


def corpus_differences(saved: list[dict], current: list[dict]) -> list[str]:
    """What differs between the saved and the current corpus files: the file set, then each file's content."""
    saved_paths, current_paths = [f["path"] for f in saved], [f["path"] for f in current]
    if saved_paths != current_paths:
        return [f"corpus files: saved {saved_paths}, now {current_paths}"]
    problems = []
    for old, new in zip(saved, current):
        if old.get("sha256") is None:  # a record written before content hashes: the size is all it has
            if old.get("bytes") != new["bytes"]:
                problems.append(f"corpus file {new['path']}: {new['bytes']} bytes, the run read {old.get('bytes')}")
        elif old["sha256"] != new["sha256"]:
            problems.append(f"corpus file {new['path']}: its content changed since the run read it "
                            f"(sha256 {new['sha256'][:12]}..., the run's {old['sha256'][:12]}...)")
    return problems


# ---- the command record -----------------------------------------------------------------------------


def record_command(run_dir: Path, command: str, world_size: int = 1) -> None:
    """Append ``<time>  world_size=N  <command>`` to ``command.txt`` (every command that ran here)."""
    stamp = datetime.datetime.now().isoformat(timespec="seconds")
    with open(run_dir / "command.txt", "a", encoding="utf-8") as handle:
        handle.write(f"{stamp}  world_size={world_size}  {command}\n")


def read_commands(run_dir: Path) -> list[str]:
    """The commands recorded in ``command.txt``, oldest first, without their time stamps."""
    path = run_dir / "command.txt"
    if not path.exists():
        return []
    commands = []
    for line in path.read_text(encoding="utf-8").splitlines():
        if line.strip():
            stamp, _, rest = line.partition("  ")
            commands.append(rest.partition("  ")[2] if rest.startswith("world_size=") else rest)
    return commands


# ---- metrics ----------------------------------------------------------------------------------------


def truncate_metrics(path: Path, step: int) -> None:
    """Drop metric lines past ``step`` (written after the checkpoint a resumed run restarts from)."""
    if not path.exists():
        return
    kept = []
    for line in path.read_text(encoding="utf-8").splitlines():
        try:
            if json.loads(line)["step"] <= step:
                kept.append(line)
        except (json.JSONDecodeError, KeyError):
            continue  # a line cut by a kill
    with atomic_path(path) as tmp:
        Path(tmp).write_text("".join(line + "\n" for line in kept), encoding="utf-8")


def last_logged_loss(path: Path) -> float | None:
    if not path.exists():
        return None
    losses = [e["loss"] for e in map(json.loads, path.read_text(encoding="utf-8").splitlines()) if "loss" in e]
    return losses[-1] if losses else None


def read_metrics(run_dir: str | os.PathLike) -> list[dict]:
    path = Path(run_dir) / "metrics.jsonl"
    return [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines() if line.strip()]


@dataclass
class MetricsLog:
    """Appends entries to ``metrics.jsonl`` (main rank only) and keeps them in ``history`` (every rank)."""

    path: Path
    is_main: bool = True
    history: list[dict] = field(default_factory=list)

    def write(self, entry: dict) -> None:
        self.history.append(entry)
        if self.is_main:
            with open(self.path, "a", encoding="utf-8") as handle:
                handle.write(json.dumps(entry) + "\n")


# ---- the model card ---------------------------------------------------------------------------------


def model_card(title: str, lines: Iterable[str], run_dir: Path) -> str:
    """The card every trained model folder carries: a title, the recipe's lines, the commands that made it."""
    commands = [f"  - `{c}`" for c in read_commands(run_dir)]
    return "\n".join([f"# {title}", "", *lines, "- command(s):", *commands, ""])


# ---- the folder -------------------------------------------------------------------------------------


def _record_kind(record: dict) -> str:
    """The command a record belongs to (records written before ``kind`` are told by their keys)."""
    if "kind" in record:
        return record["kind"]
    return "cove train" if "data" in record else "train"


@dataclass
class RunFolder:
    """A run folder once looked at: ``record`` is its ``training.json`` (read once; None when there is none),
    ``resuming`` whether a checkpoint is continued (else the run starts at step 0 and its record is written
    anew). Open it on every rank before any rank writes."""

    path: Path
    kind: str
    record: dict | None
    resuming: bool

    @property
    def checkpoints(self) -> Path:
        return self.path / "checkpoints"

    @classmethod
    def open(cls, path: str | os.PathLike, *, kind: str, resume: bool) -> RunFolder:
        """Look at ``path`` for a run of ``elmokit <kind>``; refuse what the policy (module docstring) refuses."""
        path = Path(path)
        if path.exists() and not path.is_dir():
            raise RunError(f"{path}: is a file; --out names a run folder. Fix: give a new folder")
        if not path.exists():
            if resume:
                raise RunError(f"{path}: no such run folder, so there is nothing to resume. Fix: check --out, or drop "
                               "--resume to start a new run there")
            return cls(path, kind, None, False)
        record = cls._read_record(path)
        if record is not None and _record_kind(record) != kind:
            raise RunError(f"{path}: holds a run of `elmokit {_record_kind(record)}`, not of `elmokit {kind}`. "
                           "Fix: give another --out folder")
        if record is None:
            foreign = sorted(name for name in os.listdir(path) if name not in UNSTARTED_NAMES and TEMP_MARK not in name)
            if foreign:
                raise RunError(f"{path}: a non-empty folder that holds no elmokit run ({foreign[0]!r} is in it); "
                               "give a new or empty --out folder (nothing in it is touched)")
            if resume:
                logger.info("%s: no run was started here yet; starting one from step 0", path)
            return cls(path, kind, None, False)
        found = list_checkpoints(path / "checkpoints") or sorted((path / "checkpoints").glob("step_*.damaged*"))
        if not found:
            logger.info("%s: the run here stopped before its first checkpoint; starting it again from step 0", path)
            return cls(path, kind, record, False)  # its record: the settings a bare --resume takes
        if not resume:
            raise RunError(f"{path}: already holds a run; pass --resume to continue it from its newest checkpoint, "
                           "or choose another --out")
        return cls(path, kind, record, True)

    @staticmethod
    def _read_record(path: Path) -> dict | None:
        record_path = path / RECORD_NAME
        if not record_path.exists():
            return None
        try:
            record = json.loads(record_path.read_text(encoding="utf-8"))
        except (OSError, UnicodeDecodeError, json.JSONDecodeError) as error:
            raise RunError(f"{record_path}: unreadable run record ({error}); train into a new --out folder") from None
        if not isinstance(record, dict):
            raise RunError(f"{record_path}: not a run record (a JSON object); train into a new --out folder")
        return record

    def saved(self, key: str, from_dict) -> Any:
        """The config saved under ``key`` in the record (or, for a file name, in that JSON file), read by ``from_dict``."""
        try:
            return from_dict(json.loads((self.path / key).read_text(encoding="utf-8")) if "." in key else self.record[key])
        except (OSError, KeyError, TypeError, ValueError) as error:
            raise RunError(f"{self.path}: not a readable elmokit run folder ({key}: {error})") from None

    def refuse_if(self, problems: list[str], config_class: type) -> None:
        """A resume that asks for another run: one line naming every difference and the fix."""
        if problems:
            raise RunError(f"{self.path}: --resume asks for a different run: " + "; ".join(problems)
                           + f". Fix: resume with the same settings and inputs (only "
                           f"{', '.join(sorted(resumable_fields(config_class)))} may change), or train into a new "
                           "--out folder")

    def start(self, command: str, world_size: int, record: dict | None = None, files: dict[str, str] | None = None) -> None:
        """Main rank: create the folder, record the command, and for a new run write the record, then ``files``
        (name -> text) beside it; a run started afresh drops the metrics of the earlier start."""
        self.path.mkdir(parents=True, exist_ok=True)
        record_command(self.path, command, world_size)
        if self.resuming:
            return
        (self.path / "metrics.jsonl").unlink(missing_ok=True)
        if record is not None:
            self.write_record(record)
        for name, text in (files or {}).items():
            with atomic_path(self.path / name) as tmp:
                Path(tmp).write_text(text, encoding="utf-8")

    def write_record(self, record: dict) -> None:
        self.record = {"kind": self.kind, **record}
        write_json(self.path / RECORD_NAME, self.record)
