"""elmokit: deep contextualized word representations (ELMo), faithful, deterministic, fast.

    from elmokit import Embedder
    vectors = Embedder.load("default").embed([["Hello", "world", "."]])  # [(3, 3, 32) array]
"""

from elmokit.bilm import PRESETS, BiLM, BiLMConfig, BiLMOutput
from elmokit.elmo import Elmo, Embedder
from elmokit.formats import load_bilm, load_original, save_native, save_original
from elmokit.nn.scalar_mix import ScalarMix
from elmokit.representation import Representation
from elmokit.text.chars import batch_to_ids

__version__ = "0.1.0"

__all__ = [
    "PRESETS",
    "BiLM",
    "BiLMConfig",
    "BiLMOutput",
    "Elmo",
    "Embedder",
    "Representation",
    "ScalarMix",
    "batch_to_ids",
    "load_bilm",
    "load_original",
    "save_native",
    "save_original",
    "__version__",
]
