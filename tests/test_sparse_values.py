"""A sparse matrix is read by its values, not by how scipy stores them.

Stored zeros and duplicate entries (summed, as scipy defines them) give the
same fit and the same predictions as the same matrix in canonical form.
"""

import numpy as np
import pytest
import scipy.sparse as sp

import structboost as sb
from structboost.features import canonical_sparse

pytest.importorskip("xgboost")


def _raw_csr(rows, cols, values, shape):
    """A CSR matrix holding exactly these entries (scipy's constructors would sum duplicates)."""
    order = np.argsort(rows, kind="stable")
    indptr = np.r_[0, np.cumsum(np.bincount(rows, minlength=shape[0]))]
    return sp.csr_matrix((values[order], cols[order], indptr), shape=shape)


def _matrices(seed=0):
    """A canonical CSR, the same with stored zeros, the same with each entry split in two halves."""
    rng = np.random.default_rng(seed)
    dense = rng.normal(size=(60, 5)) * (rng.random((60, 5)) < 0.5)
    canonical = sp.csr_matrix(dense)
    (rows, cols), values = np.nonzero(dense), dense[np.nonzero(dense)]
    absent_rows, absent_cols = np.nonzero(dense == 0)
    zeros = _raw_csr(
        np.r_[rows, absent_rows], np.r_[cols, absent_cols], np.r_[values, 0 * absent_rows], dense.shape
    )
    split = _raw_csr(np.r_[rows, rows], np.r_[cols, cols], np.r_[values, values] / 2, dense.shape)
    summed = split.copy()
    summed.sum_duplicates()
    return canonical, zeros, split, summed


def test_the_helper_keeps_the_values_and_the_callers_matrix():
    canonical, zeros, split, summed = _matrices()
    assert (zeros.data == 0).any() and not split.has_canonical_format
    before = zeros.data.copy()
    out = canonical_sparse(zeros)
    assert out is not zeros and np.array_equal(zeros.data, before)
    assert out.data.all() and (out != canonical).nnz == 0
    assert (canonical_sparse(split) != canonical_sparse(summed)).nnz == 0
    assert canonical_sparse(canonical) is canonical
    dense = canonical.toarray()
    assert canonical_sparse(dense) is dense
    assert canonical_sparse(zeros.tocsc()).format == "csc"


@pytest.mark.parametrize("make", [
    lambda: sb.XGBCRFClassifier(n_estimators=3, max_depth=3, n_jobs=1),
    lambda: sb.LGBMCRFClassifier(n_estimators=3, num_leaves=4, min_child_samples=2, n_jobs=1),
])  # fmt: skip
def test_fit_and_predict_read_values_not_storage(make):
    canonical, zeros, split, summed = _matrices()
    y = np.random.default_rng(1).integers(0, 3, canonical.shape[0])
    lengths = np.full(6, 10)
    reference = make().fit(canonical, y, lengths=lengths)
    expected = reference.predict_marginals(canonical, lengths=lengths)
    for stored in (zeros, split):
        np.testing.assert_array_equal(
            reference.predict_marginals(stored, lengths=lengths),
            reference.predict_marginals(canonical_sparse(stored), lengths=lengths),
        )
    np.testing.assert_allclose(
        make().fit(zeros, y, lengths=lengths).predict_marginals(canonical, lengths=lengths),
        expected, rtol=0, atol=1e-12,
    )
