"""Static word vectors behind the `Representation` interface: word2vec, fastText, GloVe, LSA, Doc2Vec.

``StaticVectors`` is the light table users keep; ``train_static`` (elmokit.static.train) writes a run
folder. gensim, scikit-learn and scipy (the ``static`` extra) are imported only when training.
"""

import importlib

__all__ = ["StaticVectors"]


def __getattr__(name: str):  # PEP 562: the algorithm table (static.defaults) is read without loading the vectors' stack
    if name != "StaticVectors":
        raise AttributeError(f"module 'elmokit.static' has no attribute {name!r}")
    return importlib.import_module("elmokit.static.vectors").StaticVectors
