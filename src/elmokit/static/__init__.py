"""Static word vectors behind the `Representation` interface: word2vec, fastText, GloVe, LSA, Doc2Vec.

``StaticVectors`` is the light table users keep; ``train_static`` (elmokit.static.train) writes a run
folder. gensim, scikit-learn and scipy (the ``static`` extra) are imported only when training.
"""

from elmokit.static.vectors import StaticVectors

__all__ = ["StaticVectors"]
