"""How pretrained models are transferred to task models: one module per
recipe, each a real option of the task commands (``--recipe``).

* :mod:`elmokit.engine.schedules`: slanted triangular learning rates and discriminative
  per-layer rates (Howard & Ruder 2018, eq. 2 and 3), plain functions of the step.
* :mod:`elmokit.transfer.ulmfit`: ULMFiT on elmokit's LSTM language models: target-task LM
  fine-tuning, the concat-pooling classifier, gradual unfreezing, forward + backward averaging.
* :mod:`elmokit.transfer.cove`, :mod:`elmokit.transfer.cove_train`: CoVe, an MT encoder's states.
* :mod:`elmokit.transfer.finetune`: fine-tuning a transformer for classification: BERT's [CLS]
  classifier and GPT's last-token classifier with the auxiliary LM loss (eq. 5).
* :mod:`elmokit.transfer.finetune_tagger`: fine-tuning a transformer for tagging: a linear layer (or
  the CRF) on each word's first sub-token, BERT §5.3 (``tag train --recipe finetune``).
"""
