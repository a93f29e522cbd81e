"""The transformer family after ELMo on HF transformers and tokenizers.

- tokenizers: WordPiece and byte-level BPE trained on a corpus, word alignment: ``elmokit.text.subword_tokenizers``
  (shared with the fine-tuning recipes).
- ``masking``: BERT / whole-word / SpanBERT / ERNIE masking, RoBERTa packing, BERT's NSP pairs.
- ``heads``: the MLM loss over masked positions only; SpanBERT's span boundary head.
- ``models``: small presets of BERT, RoBERTa, GPT, GPT-2, DistilBERT.
- ``batching``: the ``Objective`` interface (batches + loss) the training loop calls, and the helpers every
  objective shares (``collate``, ``chunks``, ``example_field``).
- ``objectives``: the BERT family (token / whole-word / span / phrase masking, NSP) and the causal LM (GPT, GPT-2);
  ``permutation`` (XLNet), ``unilm``, ``seq2seq`` (MASS), ``knowledge`` (ERNIE), ``distill``: the others.
- ``registry``: ``OBJECTIVES``, the table ``elmokit pretrain --objective NAME`` reads.
- ``representation``: ``TransformerRepresentation``, any model folder behind the ``Representation`` interface.

transformers and tokenizers (the ``transformers`` extra) are imported only where used; see docs/pretraining.md.
"""
