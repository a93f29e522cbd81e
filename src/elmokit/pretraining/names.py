"""The names of the pretraining objectives (``elmokit pretrain --objective``), without torch: the command line
lists them in its help before any model code is imported. The registry's keys; a test keeps the two equal."""

OBJECTIVE_NAMES = ("bert", "roberta", "wwm", "spanbert", "ernie", "ernie2", "ernie-thu", "ernie-dlm", "xlnet", "unilm", "mass",
                   "gpt", "gpt2")
