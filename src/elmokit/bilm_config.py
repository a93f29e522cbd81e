"""The architecture of ELMo's biLM: ``BiLMConfig`` (saved as ``config.json``) and the named presets.

Apart from the model (``elmokit.bilm``) so that the file formats (``elmokit.formats``) and the
training and command-line code can read and write configs without importing the model; ``elmokit.bilm``
re-exports both names.
"""

from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass
from typing import Any, ClassVar, Literal

from elmokit.configs import SavedConfig

ORIGINAL_FILTERS = ((1, 32), (2, 32), (3, 64), (4, 128), (5, 256), (6, 512), (7, 1024))


@dataclass(frozen=True, kw_only=True)
class BiLMConfig(SavedConfig):
    """Architecture of a biLM. Saved as ``config.json`` (with ``format_version``).

    Field names follow the reference ``options.json`` (bilm-tf's) where one exists.
    """

    # 2: added `dropout` (missing in version-1 files means 0.0).
    FORMAT_VERSION: ClassVar[int] = 2

    char_embedding_dim: int = 16
    filters: tuple[tuple[int, int], ...] = ORIGINAL_FILTERS  # (width, number of filters)
    activation: Literal["relu", "tanh"] = "relu"
    n_highway: int = 2
    n_characters: int = 262  # 261 byte/special ids + the padding id 0
    max_characters_per_token: int = 50
    lstm_dim: int = 4096  # D, the memory cell
    projection_dim: int = 512  # P, the LSTM output and the token vector size
    n_layers: int = 2
    cell_clip: float | None = 3.0
    proj_clip: float | None = 3.0
    use_skip_connections: bool = True
    # bilm-tf builds the token projection only when sum(filters) != projection_dim.
    token_projection: bool = True
    # Training only (bilm-tf `dropout`): dropout on every LSTM layer's input, active in train
    # mode only; inference never uses it. The LM head drops the top layer too (lm.py).
    dropout: float = 0.0

    def __post_init__(self) -> None:
        # JSON gives lists; keep the frozen config hashable and comparable.
        try:
            object.__setattr__(self, "filters", tuple((int(w), int(n)) for w, n in self.filters))
        except (TypeError, ValueError):
            raise ValueError(f"field filters must be [width, count] pairs of integers, got {self.filters!r}") from None
        self._check_settings()
        if self.max_characters_per_token != 50:
            raise ValueError("ELMo character ids are fixed at 50 per token (max_characters_per_token=50)")
        if not 0.0 <= self.dropout < 1.0:
            raise ValueError(f"field dropout must be in [0, 1), got {self.dropout}")
        if self.n_characters != 262:
            raise ValueError(
                f"n_characters must be 262 (261 ids + padding); got {self.n_characters}. "
                "Files written with 261 are converted on load."
            )

    def _check_settings(self) -> None:
        """Refuse a setting no biLM can have (a negative clip would clamp every value to it), naming the field."""
        if self.activation not in ("relu", "tanh"):
            raise ValueError(f"field activation must be 'relu' or 'tanh', got {self.activation!r}")
        for name in ("char_embedding_dim", "lstm_dim", "projection_dim", "n_layers"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                raise ValueError(f"field {name} must be an integer >= 1, got {value!r}")
        if isinstance(self.n_highway, bool) or not isinstance(self.n_highway, int) or self.n_highway < 0:
            raise ValueError(f"field n_highway must be an integer >= 0, got {self.n_highway!r}")
        if not self.filters or any(w < 1 or w > self.max_characters_per_token or n < 1 for w, n in self.filters):
            raise ValueError(f"field filters must be [width, count] pairs with 1 <= width <= "
                             f"{self.max_characters_per_token} and count >= 1, got {[list(f) for f in self.filters]}")
        for name in ("cell_clip", "proj_clip"):
            value = getattr(self, name)
            if value is None:
                continue
            if isinstance(value, bool) or not isinstance(value, int | float) or not math.isfinite(value) or value <= 0:
                raise ValueError(f"field {name} must be a finite number > 0, or null for no clipping; got {value!r}")
        if isinstance(self.dropout, bool) or not isinstance(self.dropout, int | float) or not math.isfinite(self.dropout):
            raise ValueError(f"field dropout must be a number in [0, 1), got {self.dropout!r}")

    @property
    def n_filters(self) -> int:
        return sum(n for _, n in self.filters)

    @property
    def output_dim(self) -> int:
        """Size of every output layer: 2P."""
        return 2 * self.projection_dim

    def to_dict(self) -> dict[str, Any]:
        data = dataclasses.asdict(self)
        data["filters"] = [list(f) for f in self.filters]
        return {"format_version": self.FORMAT_VERSION, **data}


# Named architectures. `original` is elmo_2x4096_512_2048cnn_2xhighway; `allennlp_small` and
# `allennlp_medium` the published 2x1024_128 and 2x2048_256 shapes; `small` a CPU-sized one
# (512-filter CNN); `compact` half of its CNN and a 256-cell LSTM projected to 96 (4.3 MB of fp32 weights,
# with a 12k-word softmax of 4.7 MB: every file under 5 MB; the shipped `zh`); `tiny` is for tests. The
# trainable presets carry bilm-tf's dropout 0.1.
PRESETS: dict[str, BiLMConfig] = {
    "tiny": BiLMConfig(
        char_embedding_dim=4,
        filters=((1, 4), (2, 8), (3, 16)),
        n_highway=1,
        lstm_dim=24,
        projection_dim=8,
    ),
    "small": BiLMConfig(
        filters=((1, 32), (2, 32), (3, 64), (4, 128), (5, 256)),
        n_highway=1,
        lstm_dim=1024,
        projection_dim=128,
        dropout=0.1,
    ),
    "compact": BiLMConfig(
        filters=((1, 16), (2, 16), (3, 32), (4, 64), (5, 128)),
        n_highway=1,
        lstm_dim=256,
        projection_dim=96,
        dropout=0.1,
    ),
    "allennlp_small": BiLMConfig(n_highway=1, lstm_dim=1024, projection_dim=128, dropout=0.1),
    "allennlp_medium": BiLMConfig(n_highway=1, lstm_dim=2048, projection_dim=256, dropout=0.1),
    "original": BiLMConfig(dropout=0.1),
}
