"""Training hyper-parameters: one frozen, keyword-only dataclass saved with every run.

Defaults are bilm-tf's recipe (``bin/train_elmo.py`` and ``bilm/training.py``): Adagrad with
learning rate 0.2 and initial accumulator 1.0, gradient-norm clipping at 10.0 over all
parameters, 8192 negative samples shared by the batch, and the loss scaled by 20 - bilm-tf
differentiates ``loss * unroll_steps`` with ``unroll_steps = 20``, i.e. the per-row sum over a
20-token window; we keep the same scale so the learning rate means the same.

``optimizer="sgd"`` with ``lr_decay`` is the recipe of the PTB language models ELMo is measured
against (Zaremba et al. 2014, Kim et al. 2016): plain SGD, and the learning rate multiplied by
``lr_decay`` (Kim: 0.5) whenever a validation does not lower the held-out perplexity by more than
``lr_decay_min_gain`` (Kim: 1.0) below the previous validation.

What differs from bilm-tf by default, deliberately: batches are whole sentences (cut at
``max_length``) starting from a zero state, the way elmokit's stateless inference reads them.
``window=T`` trains as bilm-tf does (``unroll_steps``) and as the PTB language models do: T-token
windows of ``batch_size`` contiguous rows of text, the LSTM state carried from batch to batch
(``data.py``). bilm-tf: T = 20; Zaremba et al. and Kim et al.: T = 35.
"""

from __future__ import annotations

import dataclasses
import logging
import math
from dataclasses import dataclass
from typing import ClassVar, Literal

from elmokit.configs import SavedConfig
from elmokit.engine.run_folder import resumable
from elmokit.training.data import make_tokenizer  # the recorded form, complete (e.g. the regex itself)

logger = logging.getLogger(__name__)

# The plateau rule may be switched on (or changed) for the rest of a run: it acts from the next
# validation on, starting from the learning rate the checkpoint saved; the run record keeps the new rule.
SCHEDULE_FIELDS = ("lr_decay", "lr_decay_min_gain")


@dataclass(frozen=True, kw_only=True)
class TrainingConfig(SavedConfig):
    """How to train. Saved as ``training.json`` in the run folder (with ``format_version``).

    Batches are global: under data parallelism they are split over the ranks. Fields declared
    ``resumable()`` may differ when a run is resumed (all but the plateau rule leave every step's
    computation as it was).
    """

    # 2: added optimizer, lr_decay, lr_decay_min_gain (missing in version-1 files: Adagrad, no decay).
    # 3: added window (missing in older files: 0, whole sentences from a zero state).
    FORMAT_VERSION: ClassVar[int] = 3
    WHAT = "training config"

    # data
    batch_size: int = 64  # sentences per global batch (unless batch_tokens is set)
    batch_tokens: int | None = None  # or: tokens per global batch (sentences added while they fit)
    # > 0: batch_size rows of running text read in windows of this many tokens, the LSTM state
    # carried across batches (bilm-tf's unroll_steps); 0: whole sentences, each from a zero state
    window: int = 0
    max_length: int = 50  # longer lines are cut into pieces of at most this many tokens
    shuffle_buffer: int = 10_000  # sentences in the per-shard shuffle buffer
    tokenizer: dict = dataclasses.field(default_factory=lambda: {"kind": "whitespace", "lowercase": False})
    # optimisation (bilm-tf)
    optimizer: Literal["adagrad", "sgd"] = "adagrad"
    lr: float = 0.2
    initial_accumulator: float = 1.0  # Adagrad only
    # plateau decay at each validation (needs valid_corpus); 1.0 = the learning rate never changes
    lr_decay: float = resumable(1.0)
    lr_decay_min_gain: float = resumable(1.0)  # perplexity points a validation must gain on the previous one
    clip_norm: float = 10.0
    loss_scale: float = 20.0
    # softmax
    softmax: Literal["auto", "full", "sampled"] = "auto"  # auto: full iff vocab <= 2 x negatives
    n_negative_samples: int = 8192
    # run
    seed: int = 0
    max_steps: int | None = resumable(None)
    epochs: int | None = resumable(None)
    checkpoint_every: int = resumable(1000)
    keep_checkpoints: int = resumable(2)
    log_every: int = resumable(10)
    skip_nonfinite_steps: int = resumable(0)  # skip up to this many steps whose loss or gradient is NaN/inf; then stop
    # start from a trained model folder's weights (biLM + softmax) instead of random ones: bilm-tf's
    # bin/restart.py. The optimizer starts fresh (a model folder keeps no Adagrad accumulators).
    init_from: str | None = None
    bf16: bool = False  # autocast the forward pass to bfloat16 (GPU; CPU works but is optional)
    # held-out perplexity (full softmax) every valid_every steps, on the first valid_sentences
    valid_corpus: list[str] | None = resumable(None)
    valid_every: int = resumable(1000)
    valid_sentences: int = resumable(1000)

    def __post_init__(self) -> None:
        if self.batch_tokens is None and self.batch_size < 1:
            raise ValueError("batch_size must be at least 1")
        if self.batch_tokens is not None and self.batch_tokens < 1:
            raise ValueError("batch_tokens must be at least 1")
        if self.optimizer not in ("adagrad", "sgd"):
            raise ValueError(f"optimizer must be adagrad or sgd, got {self.optimizer!r}")
        if not (isinstance(self.lr_decay, (int, float)) and 0.0 < self.lr_decay <= 1.0):
            raise ValueError(f"lr_decay must be in (0, 1], got {self.lr_decay!r}")
        if not (isinstance(self.lr_decay_min_gain, (int, float)) and math.isfinite(self.lr_decay_min_gain)
                and self.lr_decay_min_gain >= 0):
            raise ValueError(f"lr_decay_min_gain must be a finite number >= 0, got {self.lr_decay_min_gain!r}")
        if self.lr_decay < 1.0 and not self.valid_corpus:
            raise ValueError("lr_decay < 1 decays on validation perplexity: give valid_corpus too")
        if self.softmax not in ("auto", "full", "sampled"):
            raise ValueError(f"softmax must be auto, full or sampled, got {self.softmax!r}")
        if self.max_steps is None and self.epochs is None:
            raise ValueError("give max_steps or epochs (how long to train)")
        self.require("finite > 0", "lr", "initial_accumulator", "clip_norm", "loss_scale")
        if not (isinstance(self.window, int) and self.window >= 0):
            raise ValueError(f"window must be an integer >= 0 (0 = whole sentences), got {self.window!r}")
        if self.window and self.batch_tokens is not None:
            raise ValueError("window > 0 reads batch_size rows of windows; batch_tokens does not apply to it")
        self.require(">= 0", "seed", "skip_nonfinite_steps")
        self.require(">= 1", "max_steps", "epochs", "max_length", "shuffle_buffer", "n_negative_samples", "checkpoint_every",
                     "keep_checkpoints", "log_every", "valid_every", "valid_sentences")

        object.__setattr__(self, "tokenizer", make_tokenizer(self.tokenizer).to_dict())
        if isinstance(self.valid_corpus, str):
            object.__setattr__(self, "valid_corpus", [self.valid_corpus])

    def uses_sampled_softmax(self, vocab_size: int) -> bool:
        if self.softmax == "auto":
            return vocab_size > 2 * self.n_negative_samples
        return self.softmax == "sampled"
