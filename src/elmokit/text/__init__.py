"""Tokens to model inputs: ELMo character ids."""

from elmokit.text.chars import BOS_TOKEN, EOS_TOKEN, batch_to_ids, token_to_char_ids

__all__ = ["BOS_TOKEN", "EOS_TOKEN", "batch_to_ids", "token_to_char_ids"]
