"""The sequence tagger of Peters et al. (2018, §3.3, §5): a BiLSTM-CRF with ELMo added.

For token k the task model's input is ``[x_k; ELMo_k]``: x_k a learned word embedding over the
training words, and (eq. 1)

    ELMo_k = gamma * sum_j softmax(w)_j h_{k,j}

a learned scalar mix of the L+1 layers of any ``Representation`` (ScalarMix), with dropout. A
BiLSTM reads the sequence; optionally ELMo is added again at its output, ``[h_k; ELMo'_k]`` with
its own mix (the paper's "input & output" variant). Label scores go to a linear-chain CRF (NER,
Lample et al. 2016, with the transition constraints of the tagging scheme) or to a per-token
softmax (an option for POS). ``elmo="top"`` uses the top layer alone (the paper's "last only"
row, no gamma), ``elmo="none"`` no representation at all (the baseline). The paper's L2
regulariser ``lambda * ||w||^2`` on the mix weights is ``mix_l2`` (0.001).

By default x_k is a word embedding learned from scratch. The paper's baseline input is an option
(``elmokit.tasks.word_input``): ``word_vectors`` initialises the embedding from a static table
(fine-tuned, or frozen with ``freeze_word_vectors``) and ``char_filters`` adds a character CNN,
``x_k = [w_k; c_k]``.

The package, in the order a tagger is made and used:

* ``model``: ``TaggerConfig`` (what shapes the model, saved as config.json) and ``TaggerModel``
  (the nn.Module: word embedding + ELMo mix -> BiLSTM -> CRF or softmax).
* ``training``: ``train_tagger`` and ``TrainOptions``: the epoch loop with early stopping on dev.
  The biLM is frozen by default: its layers are computed once per sentence (the feature cache of
  ``elmokit.features``), so an epoch costs only the task model. ``fine_tune=True`` (ELMo models
  only) runs the biLM live on character ids and trains it with its own learning rate. (The live
  path calls ``BiLM`` directly rather than ``Elmo`` so that the frozen and the fine-tuned tagger
  share one mixing code path; without layer norm the two are the same.)
* ``saved``: ``SequenceTagger``, the trained tagger users keep: predict, evaluate, save, load.
  A saved tagger is a folder: ``config.json`` (TaggerConfig, with the representation spec of
  ``elmokit.representation``), ``model.safetensors``, ``vocab.json`` (words and labels),
  ``metrics.json`` (training history), and ``bilm/`` when fine-tuned.
* ``metrics``: ``score`` (token accuracy; seqeval strict span F1 for NER) and ``main_metric``.

Shapes: B batch, T tokens, L representation layers, D representation dim, H LSTM hidden, N labels.
"""

from elmokit.tasks.tagger.metrics import main_metric, score
from elmokit.tasks.tagger.model import TaggerConfig, TaggerModel
from elmokit.tasks.tagger.saved import SequenceTagger, TaggerFolderError
from elmokit.tasks.tagger.training import TrainOptions, build_words, train_tagger

__all__ = ["SequenceTagger", "TaggerConfig", "TaggerFolderError", "TaggerModel", "TrainOptions", "build_words",
           "main_metric", "score", "train_tagger"]
