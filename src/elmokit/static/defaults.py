"""The algorithms of ``elmokit static train`` and each one's defaults (the original tools'): a table without
numpy or torch, so that the command line shows it without importing the trainers."""

ALGOS = ("cbow", "skipgram", "fasttext", "glove", "lsa", "doc2vec")

_W2V = dict(dim=100, window=5, min_count=5, negative=5, hs=False, sample=1e-3, epochs=5, workers=1, seed=1)
DEFAULTS: dict[str, dict] = {
    "cbow": _W2V | dict(alpha=0.05),
    "skipgram": _W2V | dict(alpha=0.025),
    "fasttext": _W2V | dict(sample=1e-4, alpha=0.05, min_n=3, max_n=6, bucket=2_000_000, ft_model="skipgram"),
    "doc2vec": _W2V | dict(alpha=0.025, epochs=10, dm=True, dbow_words=True),
    "glove": dict(dim=100, window=15, min_count=5, epochs=25, alpha=0.05, x_max=100.0, weight_alpha=0.75,
                  batch_size=32768, seed=1, workers=1, chunk_tokens=500_000, max_pairs_in_memory=20_000_000),
    "lsa": dict(dim=100, window=5, min_count=5, weighting="ppmi", cds=0.75, eig_power=0.5, seed=1, workers=1,
                chunk_tokens=500_000, max_pairs_in_memory=20_000_000),
}
