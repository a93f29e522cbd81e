"""Pieces every subcommand shares: model selection flags, number types, threads."""

from __future__ import annotations

import argparse
import ast
import importlib.util
import os
from pathlib import Path

from elmokit.errors import UserError
from elmokit.text.corpus import TOKENIZER_KINDS

TOKENIZER_HELP = ("whitespace (str.split), regex (\\w+|[^\\w\\s]), or a word segmenter for text written without "
                  "spaces: jieba, rjieba, pkuseg (Chinese; pip install 'elmokit[zh]'), chars (every Han character a token)")


def dataclass_defaults(module: str, class_name: str) -> dict[str, object]:
    """The literal field defaults of the dataclass ``class_name`` in ``module``, read from its source with ``ast``
    so that a command's ``--help`` shows them without importing the module (and torch). A default given through
    a call (``resumable(1000)``, ``field(default=2)``) counts by its literal argument; fields whose default is
    not a literal (``field(default_factory=...)``) are left out."""
    spec = importlib.util.find_spec(module)
    tree = ast.parse(Path(spec.origin).read_text(encoding="utf-8"))
    body = next(node.body for node in tree.body if isinstance(node, ast.ClassDef) and node.name == class_name)
    defaults = {}
    for node in body:
        if (isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name) and node.value is not None
                and "ClassVar" not in ast.unparse(node.annotation)):  # a class constant, not a field
            value = node.value
            if isinstance(value, ast.Call):  # resumable(X) / field(default=X)
                given = [k.value for k in value.keywords if k.arg == "default"] or value.args[:1]
                if not given:
                    continue
                value = given[0]
            try:
                defaults[node.target.id] = ast.literal_eval(value)
            except ValueError:
                continue
    return defaults


def counted(n: int, noun: str, plural: str | None = None) -> str:
    """``1 sentence``, ``0 sentences``, ``3 sentences``."""
    return f"{n} {noun}" if n == 1 else f"{n} {plural or noun + 's'}"


# ---- numeric option types: argparse reports a bad value as "argument --x: ..." and exits 2 --------


def _number_type(convert, low, *, low_inclusive: bool = True, high=None, what: str):
    def parse(text: str):
        try:
            value = convert(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"{text!r} is not {'an integer' if convert is int else 'a number'}") from None
        if value != value or value in (float("inf"), float("-inf")):
            raise argparse.ArgumentTypeError(f"{text!r} is not a finite number")
        if (low is not None and (value < low or (value == low and not low_inclusive))) or (high is not None and value > high):
            raise argparse.ArgumentTypeError(f"must be {what}, got {text}")
        return value

    parse.__name__ = what  # argparse names the type in some messages
    return parse


positive_int = _number_type(int, 1, what="an integer >= 1")
non_negative_int = _number_type(int, 0, what="an integer >= 0")
positive_float = _number_type(float, 0.0, low_inclusive=False, what="a number > 0")
non_negative_float = _number_type(float, 0.0, what="a number >= 0")
probability = _number_type(float, 0.0, high=1.0, what="a number in [0, 1]")
finite_float = _number_type(float, None, what="a finite number")


def number_list(item):
    """A comma-separated list, each item checked by ``item`` (one of the types above): ``1,2``."""

    def parse(text: str):
        parts = [part.strip() for part in text.split(",")]
        if any(not part for part in parts):
            raise argparse.ArgumentTypeError(f"{text!r} is not a comma-separated list (an item is empty)")
        values = []
        for part in parts:
            try:
                values.append(item(part))
            except argparse.ArgumentTypeError as error:
                raise argparse.ArgumentTypeError(f"item {part!r} of {text!r}: {error}") from None
        return values

    parse.__name__ = f"list of {item.__name__}"
    return parse


def add_model_arguments(parser: argparse.ArgumentParser) -> None:
    group = parser.add_argument_group("model (default: the shipped default model)")
    group.add_argument("--model", default=None,
                       help="'default', a native model folder, or a folder with options.json + weights.hdf5 "
                       "(default: the shipped default model)")
    group.add_argument("--options-file", default=None, help="original options.json (with --weight-file; default: none)")
    group.add_argument("--weight-file", default=None, help="original weights.hdf5 (with --options-file; default: none)")
    group.add_argument("--initial-state", choices=("zero", "warm"), default="zero",
                       help="where every sentence's LSTM state starts: zero (default) or the model's warm state "
                       "(warm_state.safetensors, written by `elmokit warm-state`)")


def add_tokenizer_argument(group, *, default: str | None = None, default_help: str = "whitespace",
                           extra_choices: tuple[str, ...] = (), help_prefix: str = "") -> None:
    """``--tokenizer KIND``: every kind of ``elmokit.text.corpus.Tokenizer`` (plus ``extra_choices``)."""
    group.add_argument("--tokenizer", choices=(*TOKENIZER_KINDS, *extra_choices), default=default,
                       help=f"{help_prefix}{TOKENIZER_HELP} (default: {default_help})")


# Below this many parameters a model's matrices are too small for a second thread to gain much (the biLM presets
# tiny and compact), while a thread that waits for a busy core stalls every step; benchmarks/thread_threshold.py
# measures where more threads start to pay.
SMALL_MODEL_PARAMETERS = 2_000_000
CORES_THREADS_HELP = "CPU threads for torch (default: as many as the cores this process may run on, from its CPU affinity)"
THREADS_HELP = ("CPU threads for torch (default: as many as the cores this process may run on, from its CPU affinity; "
                f"1 for a model under {SMALL_MODEL_PARAMETERS // 1_000_000}M parameters, too small to gain from more)")


def available_cores() -> int:
    """The CPUs this process may run on (``taskset``, a container's or a batch system's cpuset), not the machine's."""
    try:
        return max(1, len(os.sched_getaffinity(0)))
    except AttributeError:  # no affinity on this platform (macOS, Windows)
        return os.cpu_count() or 1


def default_threads(parameters: int | None = None) -> int:
    """The thread count ``--threads`` defaults to: 1 for a model under ``SMALL_MODEL_PARAMETERS``
    parameters, else the cores this process may run on (``available_cores``)."""
    if parameters is not None and parameters < SMALL_MODEL_PARAMETERS:
        return 1
    return available_cores()


def add_threads_argument(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--threads", type=positive_int, default=None, help=THREADS_HELP)


def add_speed_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--precision", choices=("fp32", "bf16"), default="fp32",
                        help="fp32: exact (default); bf16: about 1e-2 absolute error per value, faster only on CPUs with native "
                        "bf16 kernels (AVX512-BF16), emulated at fp32 speed elsewhere (see docs/benchmarks.md)")
    parser.add_argument("--token-cache", type=non_negative_int, default=20_000, metavar="N",
                        help="cache the token vectors of N spellings (exact; 0 disables; default 20000)")


def load_representation(args: argparse.Namespace, *, stateful: bool = False, batch_size: int = 64,
                        default_model: str | None = "default"):
    """(representation, spec) from the flags of ``arguments.add_representation_arguments``; (None, {})
    for ``--no-elmo``. The spec is what a task model saves to rebuild the representation
    (``elmokit.representation``). ``default_model=None``: no flag gives (None, {})."""
    vectors = getattr(args, "vectors", None)
    if getattr(args, "no_elmo", False):
        if args.model or args.options_file or vectors:
            raise UserError("--no-elmo takes no --model, --options-file or --vectors")
        return None, {}
    return _load_from_flags(args, vectors, stateful=stateful, batch_size=batch_size, default_model=default_model)


def load_embedder(args: argparse.Namespace, *, stateful: bool = False, batch_size: int = 64):
    """The ELMo model the flags of ``add_model_arguments`` name (default: the shipped one)."""
    return _load_from_flags(args, None, stateful=stateful, batch_size=batch_size)[0]


def _load_from_flags(args, vectors, *, stateful, batch_size, default_model="default"):
    from elmokit.representation import load_representation as load
    from elmokit.representation import spec_from_flags

    spec = spec_from_flags(model=args.model, options_file=args.options_file, weight_file=args.weight_file,
                           vectors=vectors, initial_state=getattr(args, "initial_state", "zero"),
                           default_model=default_model)
    representation = load(spec, stateful=stateful, batch_size=batch_size, precision=getattr(args, "precision", "fp32"),
                          token_cache_size=getattr(args, "token_cache", 20_000))
    apply_model_threads(args, representation)
    return representation, spec


def apply_threads(args: argparse.Namespace, parameters: int | None = None) -> int:
    """Set torch's threads: ``--threads``, else ``default_threads(parameters)``; returns the count set."""
    import torch

    threads = getattr(args, "threads", None) or default_threads(parameters)
    torch.set_num_threads(threads)
    return threads


def bilm_parameters(config) -> int:
    """The parameters of a biLM of ``config`` (a ``BiLMConfig``), counted on the meta device (no memory)."""
    import torch

    from elmokit.bilm import BiLM

    with torch.device("meta"):
        return sum(p.numel() for p in BiLM(config).parameters())


def apply_model_threads(args: argparse.Namespace, model) -> int | None:
    """Once the model is loaded: without ``--threads``, 1 thread for a model too small to gain from more
    (``model``: a torch module, or an object holding one as ``bilm`` or ``model``)."""
    if getattr(args, "threads", None):
        return None
    module = next((m for m in (model, getattr(model, "bilm", None), getattr(model, "model", None))
                   if callable(getattr(m, "parameters", None))), None)
    if module is None:
        return None
    return apply_threads(args, sum(p.numel() for p in module.parameters()))
