"""PPMI and the LSA table against a direct numpy computation on a tiny matrix."""

import numpy as np
import pytest

pytest.importorskip("sklearn")
import scipy.sparse as sp

from elmokit.static.lsa import LsaConfig, lsa_vectors, ppmi


def tiny(seed=0):
    rng = np.random.default_rng(seed)
    X = rng.poisson(1.5, size=(7, 7)).astype(np.float64)
    X = X + X.T
    return X


def numpy_ppmi(X, cds):
    total = X.sum()
    row = X.sum(1)
    col = X.sum(0)
    pc = col**cds / (col**cds).sum()
    with np.errstate(divide="ignore"):
        pmi = np.log((X / total) / (row[:, None] / total) / pc[None, :])
    return np.where(X > 0, np.maximum(pmi, 0), 0)


@pytest.mark.parametrize("cds", [1.0, 0.75])
def test_ppmi_matches_numpy(cds):
    X = tiny()
    np.testing.assert_allclose(ppmi(sp.csr_matrix(X), cds=cds).toarray(), numpy_ppmi(X, cds), rtol=1e-12, atol=1e-12)


@pytest.mark.parametrize("weighting,power", [("ppmi", 0.5), ("counts", 1.0), ("log", 0.0)])
def test_lsa_table_matches_numpy_svd(weighting, power):
    X = tiny(1)
    M = {"ppmi": numpy_ppmi(X, 0.75), "counts": X, "log": np.log1p(X)}[weighting]
    U, S, _ = np.linalg.svd(M)
    k = 3
    expected = U[:, :k] * S[:k] ** power
    got, got_s, _ = lsa_vectors(sp.csr_matrix(X), LsaConfig(dim=k, weighting=weighting, eig_power=power, n_iter=30))
    assert got.shape == (7, k) and got.dtype == np.float32
    np.testing.assert_allclose(got_s, S[:k], rtol=1e-5)
    signs = np.sign((got * expected).sum(0))  # singular vectors are defined up to sign
    np.testing.assert_allclose(got * signs, expected, rtol=1e-4, atol=1e-5)
