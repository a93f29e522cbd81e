"""elmokit: deep contextualized word representations (ELMo), faithful, deterministic, fast."""

from elmokit.representation import Representation

__version__ = "0.1.0"

__all__ = ["Representation", "__version__"]
