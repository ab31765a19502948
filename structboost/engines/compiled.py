"""An XGBoost booster's trees compiled to machine code, for serving.

:meth:`CompiledTrees.build` reads the booster with treelite, has tl2cgen
write its trees as C (one function adding every tree's leaf to the score of
its label) and compiles that, with a driver of ours over the rows of a CSR
matrix, into a shared library loaded with ``ctypes``. A row costs its
non-zero entries and the trees, not the width of the vocabulary; a call
costs no ``DMatrix`` and no engine configuration. The scores are the
booster's margins up to float32 rounding (the order of the sums differs).

Needs the ``serving`` extra (``pip install "structboost-crf[serving]"``:
treelite, tl2cgen) and a C compiler (``gcc``) when compiling; the library's
bytes travel with a pickle and are loaded again where it is unpickled
(same platform).
"""

import ctypes
import hashlib
import json
import shutil
import tempfile
import weakref
from pathlib import Path

import numpy as np
import scipy.sparse as sp

from .._extras import require

#: Rows below which the driver runs on the calling thread only.
PARALLEL_ROWS = 256

_DRIVER = r"""
#include <stdint.h>
#include <stdlib.h>
#include "header.h"

/* Scores of CSR rows: out (n_rows, N_TARGET), zeroed by the caller; NaN entries are missing. */
int predict_csr(const int64_t* indptr, const int32_t* indices, const float* data,
                int64_t n_rows, int nthread, float* out) {
  int failed = 0;
  const int32_t n_features = get_num_feature();
  #pragma omp parallel num_threads(nthread) if (n_rows >= PARALLEL_ROWS)
  {
    union Entry* row = (union Entry*) malloc(sizeof(union Entry) * (size_t) n_features);
    if (row == NULL) {
      #pragma omp atomic write
      failed = 1;
    } else {
      for (int32_t j = 0; j < n_features; ++j) row[j].missing = -1;
      #pragma omp for schedule(static)
      for (int64_t i = 0; i < n_rows; ++i) {
        for (int64_t p = indptr[i]; p < indptr[i + 1]; ++p) {
          if (data[p] == data[p]) row[indices[p]].fvalue = data[p];
        }
        predict(row, 1, out + i * N_TARGET);
        for (int64_t p = indptr[i]; p < indptr[i + 1]; ++p) row[indices[p]].missing = -1;
      }
      free(row);
    }
  }
  return failed;
}
"""


def _require():
    """treelite and tl2cgen, or ImportError naming the ``serving`` extra."""
    for module in ("treelite", "tl2cgen"):
        require(module, "serving", "compiling the trees (compile())")
    import tl2cgen
    import treelite

    return treelite, tl2cgen


def booster_digest(booster):
    """SHA-256 of the booster's model (trees and attributes), to tell it from another."""
    return hashlib.sha256(booster.save_raw("ubj")).hexdigest()


class CompiledTrees:
    """The first rounds of an XGBoost booster as a loaded shared library.

    Attributes
    ----------
    digest : str
        :func:`booster_digest` of the booster compiled.
    rounds : int
        Rounds compiled.
    num_labels : int
        Scores per row (the booster's ``num_target``).
    num_features : int
    library : bytes
        The shared library's file.
    """

    def __init__(self, library, digest, rounds, num_labels, num_features):
        self.library, self.digest, self.rounds = library, digest, rounds
        self.num_labels, self.num_features = num_labels, num_features
        folder = tempfile.mkdtemp(prefix="structboost-trees-")
        weakref.finalize(self, shutil.rmtree, folder, True)
        path = Path(folder, "trees.so")
        path.write_bytes(library)
        self._lib = ctypes.CDLL(str(path))
        fn = self._lib.predict_csr
        fn.restype = ctypes.c_int
        fn.argtypes = [ctypes.c_void_p, ctypes.c_void_p, ctypes.c_void_p, ctypes.c_int64,
                       ctypes.c_int, ctypes.c_void_p]  # fmt: skip
        self._predict = fn

    def __reduce__(self):
        return (CompiledTrees, (self.library, self.digest, self.rounds, self.num_labels,
                                self.num_features))  # fmt: skip

    @classmethod
    def build(cls, booster, rounds, threads=1):
        """Compile the first ``rounds`` rounds of ``booster``.

        Parameters
        ----------
        booster : xgboost.Booster
            One tree per label and round (not ``multi_strategy="multi_output_tree"``).
        rounds : int
        threads : int
            Compiler processes run at once.

        Raises
        ------
        ImportError
            Without treelite and tl2cgen.
        ValueError
            For trees treelite cannot read, or no working C compiler.
        """
        treelite, tl2cgen = _require()
        sliced = booster[0:rounds] if rounds < booster.num_boosted_rounds() else booster
        try:
            model = treelite.frontend.from_xgboost(sliced)
        except treelite.TreeliteError as err:
            raise ValueError(
                f"treelite cannot read this booster's trees ({err}): compile() takes boosters "
                "of one tree per label and round (not multi_strategy='multi_output_tree')."
            ) from err
        num_labels = json.loads(booster.save_config())["learner"]["learner_model_param"]
        num_labels = int(num_labels["num_target"])
        with tempfile.TemporaryDirectory(prefix="structboost-compile-") as folder:
            tl2cgen.generate_c_code(model, folder, params={"parallel_comp": max(threads, 1)})
            Path(folder, "driver.c").write_text(
                f"#define PARALLEL_ROWS {PARALLEL_ROWS}\n" + _DRIVER
            )
            recipe_path = Path(folder, "recipe.json")
            recipe = json.loads(recipe_path.read_text())
            recipe["sources"].append({"name": "driver", "length": _DRIVER.count("\n")})
            recipe_path.write_text(json.dumps(recipe))
            try:
                lib = tl2cgen.create_shared("gcc", folder, nthread=threads, options=["-fopenmp"],
                                            long_build_time_warning=False)  # fmt: skip
            except (tl2cgen.TL2cgenError, OSError) as err:
                raise ValueError(
                    f"compiling the trees failed ({err}): compile() needs gcc with OpenMP "
                    "on the PATH."
                ) from err
            library = Path(lib).read_bytes()
        return cls(library, booster_digest(booster), rounds, num_labels, booster.num_features())

    def margins(self, rows, threads=1):
        """Scores ``(n, K)`` float32 of rows ``(n, num_features)``: a CSR matrix or float array.

        Absent CSR entries and NaN are missing values, as for the booster.
        """
        if isinstance(rows, np.ndarray):
            n, d = rows.shape
            rows = sp.csr_matrix((rows.ravel(), np.tile(np.arange(d, dtype=np.int32), n),
                                  np.arange(0, n * d + 1, d)), shape=(n, d))  # fmt: skip
        indptr = np.ascontiguousarray(rows.indptr, dtype=np.int64)
        indices = np.ascontiguousarray(rows.indices, dtype=np.int32)
        data = np.ascontiguousarray(rows.data, dtype=np.float32)
        n = rows.shape[0]
        out = np.zeros((n, self.num_labels), dtype=np.float32)
        if self._predict(indptr.ctypes.data, indices.ctypes.data, data.ctypes.data, n,
                         max(int(threads), 1), out.ctypes.data):  # fmt: skip
            raise MemoryError("the compiled trees could not allocate a row buffer.")
        return out

