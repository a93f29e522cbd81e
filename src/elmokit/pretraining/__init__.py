"""The transformer family after ELMo on HF transformers and tokenizers.

- ``tokenizers``: WordPiece and byte-level BPE trained on a corpus; word alignment (``encode_words``).
- ``masking``: BERT / whole-word / SpanBERT / ERNIE masking, RoBERTa packing, BERT's NSP pairs.
- ``heads``: the MLM loss over masked positions only; SpanBERT's span boundary head.
- ``models``: small presets of BERT, RoBERTa, GPT, GPT-2, DistilBERT.
- ``objectives``: the ``Objective`` interface (batches + loss) the training loop will call.
- ``representation``: ``TransformerRepresentation``, any model folder behind the ``Representation`` interface.

transformers and tokenizers (the ``transformers`` extra) are imported only where used; see docs/pretraining.md.
"""
