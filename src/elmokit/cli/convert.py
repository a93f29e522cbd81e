"""`elmokit convert SRC DST`: original options.json + weights.hdf5 <-> native folder, exactly."""

from __future__ import annotations

import argparse
import shutil
import sys
from pathlib import Path


def register(subparsers) -> None:
    parser = subparsers.add_parser(
        "convert",
        help="convert between the original hdf5 weights and elmokit's native folder (both ways, exact)",
        description="Convert a model folder. A native folder (config.json + model.safetensors) becomes "
        "options.json + weights.hdf5; an original folder (options.json + one .hdf5) becomes a native one.",
    )
    parser.add_argument("source", help="model folder, or 'default'")
    parser.add_argument("destination", help="folder to write: a new or empty folder, or an earlier output of convert "
                        "(replaced atomically; anything else is refused, never deleted)")
    parser.add_argument("--to", choices=("native", "original"), default=None, help="target format (default: the other one)")
    parser.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    from elmokit.formats import CONFIG_NAME, load_bilm, resolve_model_path, save_native, save_original
    from elmokit.io import check_output, output_directory
    from elmokit.representation import require_elmo_folder
    from elmokit.warm_state import WARM_STATE_NAME

    require_elmo_folder(args.source, "elmokit convert")
    source = resolve_model_path(args.source)
    destination = Path(args.destination)
    check_output(destination, command="convert", inputs=[source])  # before the model loads
    target = args.to or ("original" if (source / CONFIG_NAME).exists() else "native")
    bilm = load_bilm(source)
    with output_directory(destination, command="convert", inputs=[source], artifact="elmo") as tmp:
        if target == "native":
            save_native(bilm, tmp)
        else:
            save_original(bilm, tmp)
        if (source / WARM_STATE_NAME).exists():  # keyed by the parameters, so valid in either format
            shutil.copyfile(source / WARM_STATE_NAME, tmp / WARM_STATE_NAME)
    print(f"elmokit convert: wrote {target} model to {destination}", file=sys.stderr)
    return 0
