"""Compile (and cache on disk) the numba kernels for the signatures training and prediction use.

:func:`warmup` makes the first calls on tiny data (a default fit and
prediction of each estimator on serial and parallel batches, every chain mode
and solver, constrained or not, tree CRFs, lexical features), so later
processes load the kernels from numba's on-disk cache.
"""

import time

import numpy as np
import pandas as pd
import xgboost as xgb

from . import _config
from ._extras import installed
from .datasets import make_hmm_sequences
from .engines.predict import predict, predict_marginals, predict_tree, sequence_log_likelihood
from .engines.xgboost import crf_objective, xgb_params
from .engines.xgboost_tree import tree_crf_objective, tree_dmatrix
from .estimators.chain import XGBCRFClassifier
from .estimators.lgbm import LGBMCRFClassifier
from .objectives.params import MODES, SOLVERS
from .text.lexical import TokenFeatures


def _chain(n_sequences, mask):
    """Two rounds of every mode and solver on ``n_sequences`` sequences, then prediction."""
    X, y, lengths = make_hmm_sequences(n_sequences=n_sequences, length=(5, 15), random_state=0)
    dtrain = xgb.DMatrix(X, label=y, group=lengths, nthread=1)
    for mode in MODES:
        for solver in SOLVERS if mode != "logitboost" else SOLVERS[:1]:
            allowed = mask if mode != "logitboost" else None
            obj = crf_objective(3, mode=mode, transition_solver=solver, allowed_transitions=allowed)
            booster = xgb.train(
                xgb_params(3, max_depth=2, nthread=1), dtrain, num_boost_round=2, obj=obj,
                custom_metric=obj.metric, evals=[(dtrain, "train")], verbose_eval=False,
                callbacks=[obj.callback()],
            )  # fmt: skip
    for decode in ("viterbi", "marginal"):
        predict(booster, dtrain, decode=decode, allowed_transitions=mask)
    predict_marginals(booster, dtrain, allowed_transitions=mask)
    sequence_log_likelihood(booster, dtrain, allowed_transitions=mask)
    return len(y)


def _estimators(n_sequences):
    """A default fit (two rounds), ``predict`` and ``predict_proba`` of each estimator."""
    X, y, lengths = make_hmm_sequences(n_sequences=n_sequences, length=(5, 15), random_state=0)
    engines = [XGBCRFClassifier]
    if installed("lightgbm"):
        engines.append(LGBMCRFClassifier)
    for engine in engines:
        clf = engine(n_estimators=2).fit(X, y, lengths=lengths, verbose=False)
        clf.predict(X, lengths=lengths)
        clf.predict_proba(X, lengths=lengths)


def _tree():
    """Two rounds of a tree CRF, then prediction."""
    rng = np.random.default_rng(0)
    lengths = np.full(20, 5)
    parents = np.tile([-1, 0, 0, 1, 1], 20)
    X = rng.normal(size=(100, 3))
    y = rng.integers(0, 3, 100)
    dtrain = tree_dmatrix(X, y, lengths, parents)
    obj = tree_crf_objective(3)
    booster = xgb.train(xgb_params(3, max_depth=2, nthread=1), dtrain, num_boost_round=2,
                        obj=obj, callbacks=[obj.callback()])  # fmt: skip
    predict_tree(booster, X, lengths, parents)


def _lexical():
    """The lexical features of one sentence."""
    frame = pd.DataFrame({"token": ["The", "cat", "sat", "."], "sentence": [0, 0, 0, 0]})
    TokenFeatures(half_width=1, min_count=1).fit_transform(frame)


def warmup(log=print):
    """Compile the common kernels now, ``log`` getting one line per step; the seconds it took."""
    start = time.perf_counter()
    allowed = np.ones((3, 3), dtype=bool)  # the constrained (free-mask) code paths
    # Batches of at least SERIAL_ROWS rows run the parallel kernels.
    large = _config.SERIAL_ROWS // 5
    steps = [
        ("default fit and predict, serial batches", lambda: _estimators(30)),
        ("default fit and predict, parallel batches", lambda: _estimators(large)),
        ("chain CRFs, serial batches", lambda: _chain(30, None)),
        ("chain CRFs with allowed transitions", lambda: _chain(30, allowed)),
        ("chain CRFs, parallel batches", lambda: _chain(large, None)),
        ("tree CRFs", _tree),
        ("lexical features", _lexical),
    ]
    for name, step in steps:
        t0 = time.perf_counter()
        step()
        log(f"  {name:<42} {time.perf_counter() - t0:6.1f} s")
    return time.perf_counter() - start
