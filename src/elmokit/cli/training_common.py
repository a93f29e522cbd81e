"""The flags shared by the commands that train (`train`, `pretrain`, `distill`, `cove train`: the run folder and
the step loop's settings) and the tokenizer flags of `vocab`, `train` and `perplexity` (not a subcommand)."""

from __future__ import annotations

import argparse

from elmokit.cli.common import add_tokenizer_argument, non_negative_int, positive_int
from elmokit.errors import UserError

# The step loop's settings, one flag per config field (field -> (flag, type, help)), said alike by every
# command that trains on it; each merges the ones its config has into its own table for add_config_flags.
STEP_LOOP_FLAGS = {
    "max_steps": ("--max-steps", positive_int, "stop after this many optimiser steps"),
    "epochs": ("--epochs", positive_int, "stop after this many passes over the corpus"),
    "checkpoint_every": ("--checkpoint-every", positive_int, "write a checkpoint every N steps (and always at the end)"),
    "keep_checkpoints": ("--keep-checkpoints", positive_int, "keep the newest N checkpoints"),
    "log_every": ("--log-every", positive_int, "append to metrics.jsonl every N steps"),
    "skip_nonfinite_steps": ("--skip-nonfinite-steps", non_negative_int,
                             "skip up to N steps whose loss or gradient is NaN/inf (counted in metrics.jsonl as "
                             "skipped_nonfinite); one more stops the run with an error"),
}


def add_run_folder_arguments(parser: argparse.ArgumentParser) -> None:
    """``--out RUN`` and ``--resume``."""
    parser.add_argument("--out", required=True, help="run folder (created; must be new unless --resume)")
    parser.add_argument("--resume", action="store_true", help="continue the run in --out from its last good checkpoint, exactly")


def add_tokenizer_arguments(parser: argparse.ArgumentParser, *, default_help: str = "whitespace") -> None:
    group = parser.add_argument_group("tokenisation")
    add_tokenizer_argument(group, default=None, default_help=default_help, extra_choices=("hook",),
                           help_prefix="hook (--tokenizer-hook), ")
    group.add_argument("--tokenizer-hook", default=None,
                       help="'package.module:function' mapping a line to a list of tokens (default: none)")
    group.add_argument("--lowercase", action="store_true", default=None, help="lowercase lines before tokenising (default: off)")


def tokenizer_changes_from_args(args: argparse.Namespace) -> dict:
    """The tokenizer fields the flags set (``{}`` for none): laid over a saved or default spec."""
    changes: dict = {}
    if args.tokenizer_hook is not None and args.tokenizer not in (None, "hook"):
        raise SettingError(f"--tokenizer-hook goes with --tokenizer hook, not --tokenizer {args.tokenizer}")
    if args.tokenizer is not None or args.tokenizer_hook is not None:
        changes["kind"] = args.tokenizer or "hook"
    if changes.get("kind") == "hook":
        if not args.tokenizer_hook:
            raise SettingError("--tokenizer hook needs --tokenizer-hook package.module:function")
        changes["callable"] = args.tokenizer_hook
    if args.lowercase is not None:
        changes["lowercase"] = bool(args.lowercase)
    return changes


def tokenizer_spec_from_args(args: argparse.Namespace, fallback: dict | None = None) -> dict:
    """The recorded form ({"kind": ...}) of the tokenizer the flags ask for; ``fallback`` when none given."""
    from elmokit.training.run_config import merge_tokenizer_spec

    return merge_tokenizer_spec(tokenizer_changes_from_args(args), fallback)


def tokenizer_from_args(args: argparse.Namespace, fallback: dict | None = None):
    from elmokit.training.data import make_tokenizer

    try:
        return make_tokenizer(tokenizer_spec_from_args(args, fallback))
    except ValueError as error:
        raise SettingError(str(error)) from None


def add_config_flags(parser: argparse.ArgumentParser, flags: dict, defaults: dict) -> None:
    """One flag per config field, ``field -> (flag or flags, type, help)``. Each defaults to None ("not given", so
    a resume keeps the run's value); its help ends with the config's default (``defaults``: field -> value, from
    ``common.dataclass_defaults``, which reads them without importing the config's module)."""
    for name, (flag, kind, text) in flags.items():
        default = "none" if defaults[name] is None else defaults[name]
        parser.add_argument(*((flag,) if isinstance(flag, str) else flag), dest=name, type=kind, default=None,
                            help=f"{text} (default: {default})")


def interrupted(command: str, out: str, stop: KeyboardInterrupt) -> int:
    """Ctrl-C, SIGTERM or SIGHUP during a training command: say which checkpoint the run folder keeps and how
    to go on; the exit code of the signal."""
    import json
    import shlex
    import signal
    import sys
    from pathlib import Path

    from elmokit.engine.run_folder import latest_checkpoint

    signum = getattr(stop, "signum", None)
    how = f"stopped by {signal.Signals(signum).name}" if signum else "interrupted"
    kept = latest_checkpoint(Path(out) / "checkpoints")
    resume = f"elmokit {command} --out {shlex.quote(str(out))} --resume"
    if kept is not None:
        step = json.loads((kept / "state.json").read_text())["step"]
        print(f"elmokit {command}: {how}; the run folder keeps checkpoint {kept} (step {step}); continue with: {resume}",
              file=sys.stderr)
    elif (Path(out) / "training.json").exists():
        print(f"elmokit {command}: {how} before the first checkpoint; {out} holds the run's settings only; start it again "
              f"from step 0 with: {resume}", file=sys.stderr)
    else:
        print(f"elmokit {command}: {how}; nothing was written", file=sys.stderr)
    return 128 + signum if signum else 130


class SettingError(UserError):
    """A flag value that cannot be used (reported without a traceback)."""
