"""The `elmokit` command: one parser, one subcommand per module in this package.

Each subcommand module exposes `register(subparsers)`, which adds its parser and sets
`func` to a callable taking the parsed arguments and returning an exit code.
"""

from __future__ import annotations

import argparse
import importlib
import sys

from elmokit import __version__

# Subcommand modules, in the order `elmokit --help` lists them.
SUBCOMMAND_MODULES = ["embed", "convert", "demo", "vocab", "train", "pretrain", "distill", "perplexity", "static", "tag",
                      "eval", "classify", "neighbors", "warm_state", "serve", "cove"]


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="elmokit",
        description="Deep contextualized word representations: embed, convert, train, evaluate.",
    )
    parser.add_argument("--version", action="version", version=f"elmokit {__version__}", help="print the version and exit")
    subparsers = parser.add_subparsers(dest="command", metavar="COMMAND")
    for module_name in SUBCOMMAND_MODULES:
        try:
            module = importlib.import_module(f"elmokit.cli.{module_name}")
        except ModuleNotFoundError as error:
            if error.name != f"elmokit.cli.{module_name}":
                raise
            continue  # a subcommand not present in this checkout (branches are merged later)
        module.register(subparsers)
    return parser


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    args.argv = list(sys.argv[1:] if argv is None else argv)  # recorded by commands that write run folders
    if not getattr(args, "func", None):
        parser.print_help()
        return 2
    return int(args.func(args) or 0)


if __name__ == "__main__":
    sys.exit(main())
