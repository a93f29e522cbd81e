"""`elmokit warm-state --model DIR [--text FILE]`: compute a model's warm start, once.

Writes ``DIR/warm_state.safetensors`` (atomically): the LSTM state after reading the warm-up text
forwards (forward LSTMs) and backwards (backward LSTMs); see ``elmokit.warm_state``. Then
``Embedder.load(DIR, initial_state="warm")`` or ``--initial-state warm`` starts every sentence from it.
"""

from __future__ import annotations

import argparse
import sys

from elmokit.cli.common import add_threads_argument, apply_threads


def register(subparsers) -> None:
    parser = subparsers.add_parser(
        "warm-state",
        help="compute a model's warm initial LSTM state (warm_state.safetensors in the model folder)",
        description="Read a fixed warm-up text with the stateful biLM (forwards for the forward LSTMs, "
        "backwards for the backward ones) and store the final states in the model folder, so that "
        "--initial-state warm starts every sentence from that same state.",
    )
    parser.add_argument("--model", required=True,
                        help="a native model folder, an options.json + weights.hdf5 folder, or 'default'")
    parser.add_argument("--text", default=None, metavar="FILE",
                        help="warm-up text, one whitespace-tokenised sentence per line "
                        "(default: the shipped opening sentences of public-domain novels)")
    add_threads_argument(parser)
    parser.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    from elmokit.formats import load_bilm, resolve_model_path
    from elmokit.representation import require_elmo_folder
    from elmokit.warm_state import compute_warm_state, read_warmup_text, save_warm_state

    require_elmo_folder(args.model, "elmokit warm-state")
    apply_threads(args)
    directory = resolve_model_path(args.model)
    sentences = read_warmup_text(args.text) if args.text else None
    bilm = load_bilm(directory)
    state = compute_warm_state(bilm, sentences)
    path = save_warm_state(directory, state)
    meta = state.metadata
    print(f"elmokit warm-state: wrote {path} ({meta['text']} text: {meta['n_sentences']} sentences, "
          f"{meta['n_tokens']} tokens; h {tuple(state.h.shape)}, c {tuple(state.c.shape)})", file=sys.stderr)
    return 0
