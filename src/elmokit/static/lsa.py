"""LSA-style count vectors: (P)PMI of the co-occurrence matrix, reduced by truncated SVD.

The count-based baseline the GloVe paper compares with (Pennington et al. 2014, section 4.3:
"SVD", "SVD-S", "SVD-L"), in the form Levy, Goldberg & Dagan (2015) found strongest:

    PMI(i, j) = log( X_ij * sum(X) / (row_i * col_j) ),   PPMI = max(PMI, 0)
    with context-distribution smoothing: col_j is replaced by col_j^cds * sum(col) / sum(col^cds)
    M ~ U S V^T (rank ``dim``, scikit-learn's randomized_svd),  word vectors = U S^eig_power

``weighting="counts"`` skips PMI and factorises the raw (1/d-weighted) counts;
``weighting="log"`` factorises log(1 + X) (the GloVe paper's "SVD-L").

Legend: V vocabulary, D dimension.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

WEIGHTINGS = ("ppmi", "log", "counts")


@dataclass(frozen=True, kw_only=True)
class LsaConfig:
    """Options (defaults after Levy et al. 2015: PPMI, cds 0.75, eigenvalue weighting 0.5)."""

    dim: int = 100
    weighting: str = "ppmi"
    cds: float = 0.75
    eig_power: float = 0.5
    n_iter: int = 5
    seed: int = 1

    def __post_init__(self) -> None:
        if self.weighting not in WEIGHTINGS:
            raise ValueError(f"weighting {self.weighting!r} is not one of {WEIGHTINGS}")


def ppmi(matrix, *, cds: float = 0.75):
    """Positive PMI of a (V, V) scipy sparse count matrix, same sparsity (zeros dropped)."""
    import scipy.sparse as sp

    m = sp.csr_matrix(matrix, dtype=np.float64, copy=True)
    m.eliminate_zeros()
    total = m.sum()
    row = np.asarray(m.sum(axis=1)).ravel()
    col = np.asarray(m.sum(axis=0)).ravel()
    col_s = col ** cds
    col_s = col_s * (col.sum() / col_s.sum())
    coo = m.tocoo()
    pmi = np.log(coo.data * total / (row[coo.row] * col_s[coo.col]))
    keep = pmi > 0
    out = sp.csr_matrix((pmi[keep], (coo.row[keep], coo.col[keep])), shape=m.shape)
    out.sort_indices()
    return out


def weighted_matrix(matrix, config: LsaConfig):
    import scipy.sparse as sp

    if config.weighting == "ppmi":
        return ppmi(matrix, cds=config.cds)
    m = sp.csr_matrix(matrix, dtype=np.float64, copy=True)
    if config.weighting == "log":
        m.data = np.log1p(m.data)
    return m


def lsa_vectors(matrix, config: LsaConfig) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Word vectors U S^p (V, D) float32, the singular values S (D,) and U (V, D)."""
    from sklearn.utils.extmath import randomized_svd

    m = weighted_matrix(matrix, config)
    k = min(config.dim, min(m.shape) - 1) if min(m.shape) > 1 else 1
    U, S, _ = randomized_svd(m, n_components=k, n_iter=config.n_iter, random_state=config.seed)
    vectors = U * (S ** config.eig_power)[None, :]
    return vectors.astype(np.float32), S, U
