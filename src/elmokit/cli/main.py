"""The `elmokit` command: one parser, one subcommand per module in this package.

``COMMANDS`` names every subcommand, its one-line help and the module that defines it. ``elmokit --help``
and ``--version`` are answered from this table alone (no subcommand module, no torch); for a command, only
its own module is imported (``importlib``), and its ``register(subparsers)`` adds its parser and sets
``func``, a callable taking the parsed arguments and returning an exit code.

This is the one place user errors are reported: an ``elmokit.errors.UserError`` escaping a command prints
``elmokit <command>: error: <message>`` on stderr as one line (argparse's form for a bad flag) and exits 2;
Ctrl-C, SIGTERM and SIGHUP end it with one line after every ``finally`` ran (exit 128 + the signal); anything
else keeps its traceback.
"""

from __future__ import annotations

import argparse
import importlib
import logging
import os
import signal
import sys
import textwrap
import threading
from collections.abc import Iterable
from contextlib import contextmanager

from elmokit import __version__
from elmokit.errors import as_user_error
from elmokit.pretraining.names import OBJECTIVE_NAMES

# command -> (module, one-line help), in the order `elmokit --help` lists them.
COMMANDS: dict[str, tuple[str, str]] = {
    "embed": ("elmokit.cli.embed", "embed a file of sentences (one whitespace-tokenised sentence per line) into HDF5"),
    "convert": ("elmokit.cli.convert",
                "convert between the original hdf5 weights and elmokit's native folder (both ways, exact)"),
    "demo": ("elmokit.cli.demo", "embed a few sentences and print how contexts change a word's vectors"),
    "vocab": ("elmokit.cli.vocab", "count a corpus and write the output vocabulary (bilm-tf format)"),
    "train": ("elmokit.cli.train", "train a biLM language model on a corpus (resumable, torchrun for data parallelism)"),
    "pretrain": ("elmokit.cli.pretrain", "pretrain a transformer on a corpus (resumable, torchrun); objectives: "
                 + ", ".join(OBJECTIVE_NAMES)),
    "distill": ("elmokit.cli.distill", "distil a BERT teacher folder into a half-depth DistilBERT student"),
    "perplexity": ("elmokit.cli.perplexity", "forward/backward/average perplexity of a trained biLM on a corpus (full softmax)"),
    "static": ("elmokit.cli.static", "static word vectors: word2vec, fastText, GloVe, LSA, Doc2Vec"),
    "tag": ("elmokit.cli.tag", "sequence tagging (POS, NER): train a BiLSTM-CRF with ELMo, predict"),
    "eval": ("elmokit.cli.eval", "evaluate representations (similarity, analogy, probes, WSD, SST)"),
    "classify": ("elmokit.cli.classify", "train or apply a sentence classifier (with or without ELMo)"),
    "neighbors": ("elmokit.cli.neighbors",
                  "nearest occurrences of a word in context in a corpus, per layer (the paper's Table 4)"),
    "warm-state": ("elmokit.cli.warm_state",
                   "compute a model's warm initial LSTM state (warm_state.safetensors in the model folder)"),
    "serve": ("elmokit.cli.serve", "serve a model over HTTP (text-embeddings-inference and OpenAI-compatible routes)"),
    "cove": ("elmokit.cli.cove", "CoVe: train a translation encoder (MT-LSTM) and score it with BLEU"),
}

# The modules of the commands (the layering tests read them).
SUBCOMMAND_MODULES = [module.rpartition(".")[2] for module, _ in COMMANDS.values()]

VERBOSE_HELP = "show third-party libraries' logs and warnings, and the resolved configuration (default: off)"

# Loggers of libraries whose INFO/WARNING chatter (load reports, advisory warnings) a user did not ask for.
QUIET_LOGGERS = ("transformers", "tokenizers", "huggingface_hub", "datasets", "ray", "urllib3", "filelock")


class DefaultsHelpFormatter(argparse.HelpFormatter):
    """Appends ``(default: X)`` to the help of every option that takes a value and does not state its default
    itself (``none`` when it is None: not given). Positionals, required options and flags are left as written."""

    def _get_help_string(self, action: argparse.Action) -> str:
        text = action.help or ""
        if (not action.option_strings or action.required or action.nargs == 0 or action.default is argparse.SUPPRESS
                or "default" in text):
            return text
        if action.default is None:
            shown = "none"
        elif action.default == "":
            shown = "''"
        elif isinstance(action.default, list):
            shown = ",".join(map(str, action.default))
        else:
            shown = "%(default)s"
        return f"{text} (default: {shown})" if text else f"default: {shown}"

    def _split_lines(self, text: str, width: int) -> list[str]:
        # never break a name at its hyphen (ernie-thu, --max-steps): wrap at spaces only
        return textwrap.wrap(self._whitespace_matcher.sub(" ", text).strip(), width, break_on_hyphens=False)


def command_in(argv: list[str]) -> str | None:
    """The subcommand ``argv`` names: its first word that is not an option (the top level takes no values)."""
    return next((word for word in argv if not word.startswith("-")), None)


def build_parser(commands: Iterable[str] | None = None) -> argparse.ArgumentParser:
    """The parser of ``elmokit``. Only the modules of ``commands`` (default: all) are imported and their
    parsers built; the other commands are listed by name and help."""
    built = set(COMMANDS if commands is None else commands)
    parser = argparse.ArgumentParser(
        prog="elmokit",
        description="Deep contextualized word representations: embed, convert, train, evaluate.",
        formatter_class=DefaultsHelpFormatter,
    )
    parser.add_argument("--version", action="version", version=f"elmokit {__version__}", help="print the version and exit")
    parser.add_argument("--verbose", action="store_true", help=VERBOSE_HELP)
    subparsers = parser.add_subparsers(dest="command", metavar="COMMAND")
    for name, (module_name, help_text) in COMMANDS.items():
        if name in built:
            importlib.import_module(module_name).register(subparsers)
            finish_command_parsers(subparsers.choices[name], name)
        else:
            subparsers.add_parser(name, help=help_text, add_help=False)
    return parser


def finish_command_parsers(parser: argparse.ArgumentParser, command: str) -> None:
    """Every parser of ``command`` (its actions too, ``tag train``...) shows defaults in its help, takes
    ``--verbose``, and records its full name for error messages."""
    own = parser.formatter_class
    if not issubclass(own, DefaultsHelpFormatter):  # keep what the command chose (a raw epilog table, say)
        parser.formatter_class = DefaultsHelpFormatter if own is argparse.HelpFormatter else \
            type(f"Defaults{own.__name__}", (DefaultsHelpFormatter, own), {})
    if "--verbose" not in parser._option_string_actions:
        parser.add_argument("--verbose", action="store_true", default=argparse.SUPPRESS, help=VERBOSE_HELP)
    parser.set_defaults(command_name=command)
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for name, sub in action.choices.items():
                finish_command_parsers(sub, f"{command} {name}")


def quiet_third_party(verbose: bool) -> None:
    """Unless ``--verbose``: the libraries' loggers at ERROR (set before they are imported, where they read
    the environment: transformers' verbosity, Ray Data's log level)."""
    logging.basicConfig(level=logging.INFO, format="%(message)s", stream=sys.stderr)
    if verbose:
        return
    os.environ.setdefault("TRANSFORMERS_VERBOSITY", "error")
    os.environ.setdefault("TRANSFORMERS_NO_ADVISORY_WARNINGS", "1")
    os.environ.setdefault("RAY_DATA_LOG_LEVEL", "WARNING")  # Ray Data's per-dataset progress and plan lines
    for name in QUIET_LOGGERS:
        logging.getLogger(name).setLevel(logging.ERROR)


def one_line(error: BaseException) -> str:
    return " ".join(str(error).split())


class Terminated(KeyboardInterrupt):
    """SIGTERM or SIGHUP, raised where the program is, so that every ``finally`` and every
    temporary-file cleanup runs as for Ctrl-C (``elmokit.io.atomic_path``)."""

    def __init__(self, signum: int) -> None:
        super().__init__(signum)
        self.signum = signum


@contextmanager
def signals_as_interrupts():
    """While inside: SIGTERM (``kill``, a batch system's time limit) and SIGHUP (the terminal
    closed) raise ``Terminated`` once; a second one while cleaning up is ignored. Signals set
    to be ignored (``nohup``) stay ignored; only the main thread can take signals."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    previous = {}
    raised = False

    def handler(signum, frame):
        nonlocal raised
        if not raised:
            raised = True
            raise Terminated(signum)

    for sig in (signal.SIGTERM, getattr(signal, "SIGHUP", None)):
        if sig is not None and signal.getsignal(sig) == signal.SIG_DFL:
            previous[sig] = signal.signal(sig, handler)
    try:
        yield
    finally:
        for sig, old in previous.items():
            signal.signal(sig, old)


def main(argv: list[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    command = command_in(argv)
    parser = build_parser([command] if command in COMMANDS else [])
    args = parser.parse_args(argv)
    args.argv = argv  # recorded by commands that write run folders
    if not getattr(args, "func", None):
        parser.print_help()
        return 2
    args.verbose = bool(getattr(args, "verbose", False))
    quiet_third_party(args.verbose)
    name = f"elmokit {getattr(args, 'command_name', command)}"
    try:
        with signals_as_interrupts():
            return int(args.func(args) or 0)
    except Exception as error:  # a user's error (a missing file and a full disk included) is one line; a bug keeps its traceback
        user_error = as_user_error(error)
        if user_error is None:
            raise
        print(f"{name}: error: {one_line(user_error)}", file=sys.stderr)
        return 2
    except Terminated as stop:
        print(f"{name}: stopped by {signal.Signals(stop.signum).name}; nothing was written to the output", file=sys.stderr)
        return 128 + stop.signum
    except KeyboardInterrupt:
        print(f"{name}: interrupted; nothing was written to the output", file=sys.stderr)
        return 130

if __name__ == "__main__":
    sys.exit(main())
