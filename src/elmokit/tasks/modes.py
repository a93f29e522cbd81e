"""The ways a representation's layers become a task model's features: a table without torch, so that the
command line lists them without importing the models."""

# How the representation's layers become the task model's features (``TaggerConfig.elmo``).
# The feature-based rows of BERT's Table 7 (Devlin et al. 2019, CoNLL-2003 dev F1 with BERT-base:
# embeddings 91.0, second-to-last 95.6, last 94.9, weighted sum last four 95.9, concat last four
# 96.1, weighted sum all 95.5) and TagLM (Peters et al. 2017) sit beside ELMo's learned mix.
# "Last four" of a representation with fewer layers (ELMo's 3) is all of them.
ELMO_MODES = {
    "mix": "learned scalar mix of all layers (ELMo eq. 1; BERT's 'weighted sum all layers')",
    "top": "the top layer only (ELMo's 'last only'; BERT's 'last hidden')",
    "embeddings": "layer 0 only (the context-independent token vectors)",
    "second-to-last": "the layer below the top (BERT's 'second-to-last hidden')",
    "mix-last-four": "learned scalar mix of the top four layers (BERT's 'weighted sum last four hidden')",
    "concat-last-four": "the top four layers concatenated (BERT's 'concat last four hidden')",
    "taglm": "TagLM: the top layer concatenated to the first BiLSTM layer's output, a second BiLSTM above",
    "none": "no representation (the baseline)",
}
