"""Tree-CRF objective, typed-edge transition solvers, XGBoost wiring and estimator."""

import pickle

import numpy as np
import pytest
import xgboost as xgb
from hypothesis import given, settings
from hypothesis import strategies as st
from sklearn.base import clone

import structboost as sb
from structboost import inference
from structboost.objectives.chain import CRFObjective, SequenceBatch
from structboost.transitions.chain import TransitionParams, refit
from structboost.estimators.tree import TreeCRFClassifier
from structboost.inference.tree import tree_forward_backward, tree_gamma, tree_nll, tree_viterbi
from structboost.objectives.tree import TreeCRFObjective, TreeLabelBatch
from structboost.transitions.tree import TreeTransitionParams, TreeTransitionProblem
from structboost.engines.predict import predict_tree, predict_tree_marginals, tree_log_likelihood
from structboost.engines.xgboost_tree import register_tree, tree_crf_objective, tree_dmatrix

K, TYPES = 3, 2
close = np.testing.assert_allclose


def random_trees(seed, n_inst=4, max_size=6, k=K, n_types=TYPES, scale=1.5):
    """Random forests (local parents, random row order), typed edges, labels, weights."""
    rng = np.random.default_rng(seed)
    lengths = rng.integers(1, max_size + 1, size=n_inst)
    parents = []
    for size in lengths:
        perm = rng.permutation(size)
        par = np.full(size, -1)
        for i in range(1, size):
            if rng.random() > 0.15:
                par[perm[i]] = perm[rng.integers(i)]
        parents.append(par)
    n = int(lengths.sum())
    return {
        "margins": rng.normal(scale=scale, size=(n, k)),
        "labels": rng.integers(0, k, size=n),
        "lengths": lengths,
        "parents": np.concatenate(parents),
        "types": rng.integers(0, n_types, size=n),
        "weights": rng.uniform(0.5, 2.0, size=n_inst),
    }


def batch_of(d, k=K, n_types=TYPES):
    return TreeLabelBatch.build(
        d["labels"], d["lengths"], d["parents"], k, n_types, d["types"], d["weights"]
    )


def total_nll(d, margins, transitions):
    nll = tree_nll(margins, d["lengths"], d["parents"], d["labels"], transitions, d["types"])
    return d["weights"] @ nll


@pytest.mark.parametrize("mode", ["gbcrf", "treecrf", "logitboost"])
def test_gradient_matches_finite_differences_of_tree_nll(mode):
    d = random_trees(0)
    obj = TreeCRFObjective(K, TYPES, mode=mode)
    grad, _ = obj.grad_hess(d["margins"], batch_of(d))
    trans = obj.params.transitions
    assert (mode == "logitboost") == (not np.any(trans))
    eps = 1e-6
    fd = np.zeros_like(d["margins"])
    for idx in np.ndindex(*fd.shape):
        up, down = d["margins"].copy(), d["margins"].copy()
        up[idx] += eps
        down[idx] -= eps
        fd[idx] = (total_nll(d, up, trans) - total_nll(d, down, trans)) / (2 * eps)
    close(grad, fd, atol=1e-6)


def test_hessian_of_each_mode():
    d = random_trees(1)
    row_w = np.repeat(d["weights"], d["lengths"])[:, None]
    obj = TreeCRFObjective(K, TYPES, mode="gbcrf")
    _, h = obj.grad_hess(d["margins"], batch_of(d))
    args = (d["margins"], d["lengths"], d["parents"], obj.params.transitions, d["types"])
    _, p = tree_forward_backward(*args)
    close(h, row_w * tree_gamma(*args)[:, None] * p * (1 - p), rtol=1e-10)
    _, h = TreeCRFObjective(K, TYPES, mode="treecrf").grad_hess(d["margins"], batch_of(d))
    close(h, np.broadcast_to(row_w, h.shape))


def test_chain_as_tree_objective_equals_chain_objective():
    rng = np.random.default_rng(2)
    lengths = np.array([3, 1, 5, 4])
    n = int(lengths.sum())
    margins = rng.normal(size=(n, K))
    labels = rng.integers(0, K, size=n)
    weights = rng.uniform(0.5, 2.0, size=4)
    parents = np.concatenate([np.arange(m) - 1 for m in lengths])
    trans = rng.normal(size=(K, K))
    chain_batch = SequenceBatch.build(labels, lengths, K, weights)
    tree_batch = TreeLabelBatch.build(labels, lengths, parents, K, 1, None, weights)
    close(tree_batch.counts, chain_batch.counts[: K * K])
    for mode in ("gbcrf", "treecrf"):
        # transition_iter=0 keeps the given potentials, so both see the same CRF
        chain = CRFObjective(K, mode=mode, transition_solver="newton", transition_iter=0)
        tree = TreeCRFObjective(K, 1, mode=mode, transition_solver="newton", transition_iter=0)
        chain.params = TransitionParams(trans.copy(), np.zeros(K), np.zeros(K))
        tree.params = TreeTransitionParams(trans[None].copy())
        for a, b in zip(chain.grad_hess(margins, chain_batch), tree.grad_hess(margins, tree_batch)):
            close(a, b, rtol=1e-10, atol=1e-12)
        close(chain.sequence_nll(margins, chain_batch), tree.sequence_nll(margins, tree_batch))
        np.testing.assert_array_equal(
            chain.decode(margins, chain_batch), tree.decode(margins, tree_batch)
        )


def problem_of(d, reg, transitions=None):
    b = batch_of(d)
    trans = np.zeros((TYPES, K, K)) if transitions is None else transitions
    structure = b.with_potentials(d["margins"], trans)
    return TreeTransitionProblem(structure, b.seq_weight, b.counts, reg)


def test_per_type_transition_gradient_matches_finite_differences():
    d = random_trees(3)
    problem = problem_of(d, reg=0.7)
    vec = np.random.default_rng(0).normal(size=TYPES * K * K)
    value, grad = problem.value_and_grad(vec)
    eps = 1e-6
    fd = [
        (problem.value(vec + eps * e) - problem.value(vec - eps * e)) / (2 * eps)
        for e in np.eye(vec.size)
    ]
    close(grad, fd, atol=1e-6)
    trans = vec.reshape(TYPES, K, K)
    node = d["weights"] @ np.add.reduceat(
        d["margins"][np.arange(len(d["labels"])), d["labels"]],
        np.cumsum(d["lengths"]) - d["lengths"],
    )
    assert value == pytest.approx(total_nll(d, d["margins"], trans) + node + 0.35 * vec @ vec)


@pytest.mark.parametrize("seed", [0, 4, 9])
def test_tree_edge_bound_dominates_the_shared_transition_hessian(seed):
    d = random_trees(seed, n_inst=3, max_size=5)
    problem = problem_of(d, reg=0.0)
    vec = np.random.default_rng(seed).normal(size=TYPES * K * K)
    problem.value(vec)
    _, curvature = problem.expected_counts(problem._last[1].posterior, with_curvature=True)
    eps = 1e-5
    hess = np.array(
        [
            (problem.value_and_grad(vec + eps * e)[1] - problem.value_and_grad(vec - eps * e)[1])
            / (2 * eps)
            for e in np.eye(vec.size)
        ]
    )
    hess = 0.5 * (hess + hess.T)
    assert np.linalg.eigvalsh(np.diag(curvature) - hess).min() >= -1e-6


@settings(max_examples=20, deadline=None)
@given(seed=st.integers(0, 10_000), scale=st.floats(0.1, 4.0), reg=st.floats(0.0, 2.0))
def test_tree_newton_step_never_increases_penalised_nll(seed, scale, reg):
    d = random_trees(seed, scale=scale)
    problem = problem_of(d, reg)
    rng = np.random.default_rng(seed)
    params = TreeTransitionParams(rng.normal(scale=scale, size=(TYPES, K, K)))
    before = problem.value(params.to_vector())
    after = problem.value(problem.newton_step(params).to_vector())
    assert after <= before + 1e-9 * max(1.0, abs(before))


def test_lbfgs_and_newton_reach_the_same_optimum():
    d = random_trees(5, n_inst=6)
    problem = problem_of(d, reg=0.5)
    start = TreeTransitionParams.zeros(K, TYPES)
    by_lbfgs = refit(problem, start, "lbfgs", 100)
    by_newton = refit(problem, start, "newton", 300)
    assert problem.value(by_newton.to_vector()) == pytest.approx(
        problem.value(by_lbfgs.to_vector()), rel=1e-6
    )


# ----------------------------------------------------------------------------- XGBoost


def typed_tree_data(seed, m=80):
    """Root label from x; type 0 children copy their parent, type 1 children flip it."""
    rng = np.random.default_rng(seed)
    shape = np.array([-1, 0, 0, 1, 1])
    kinds = np.array([0, 0, 1, 0, 1])
    size = len(shape)
    X = rng.normal(size=(m * size, 2))
    y = np.zeros(m * size, dtype=np.int64)
    for i in range(m):
        o = i * size
        y[o] = int(X[o, 0] + 0.5 * rng.normal() > 0)
        for v in range(1, size):
            keep = (rng.random() < 0.9) ^ (kinds[v] == 1)
            y[o + v] = y[o + shape[v]] if keep else 1 - y[o + shape[v]]
    return X, y, np.full(m, size), np.tile(shape, m), np.tile(kinds, m)


@pytest.fixture(scope="module")
def trained():
    X, y, lengths, parents, types = typed_tree_data(0)
    dtrain = tree_dmatrix(X, y, lengths, parents, types)
    obj = tree_crf_objective(2, n_edge_types=2)
    log = {}
    booster = xgb.train(
        sb.xgb_params(2, eta=1.0, max_depth=2, nthread=1),
        dtrain,
        num_boost_round=6,
        obj=obj,
        custom_metric=obj.metric,
        evals=[(dtrain, "train")],
        evals_result=log,
        verbose_eval=False,
        callbacks=[obj.callback()],
    )
    return obj, booster, log, (X, y, lengths, parents, types)


def test_training_nll_never_rises_and_types_learn_their_sign(trained):
    obj, _, log, _ = trained
    nll = np.array(log["train"]["crf-nll"])
    assert np.all(np.diff(nll) <= 1e-9) and nll[-1] < nll[0]
    t = obj.params.transitions
    assert t[0, 0, 0] + t[0, 1, 1] > t[0, 0, 1] + t[0, 1, 0]  # copy
    assert t[1, 0, 0] + t[1, 1, 1] < t[1, 0, 1] + t[1, 1, 0]  # flip


def test_predictions_agree_with_inference_and_survive_pickling(trained, tmp_path):
    obj, booster, _, (X, y, lengths, parents, types) = trained
    margins = booster.predict(xgb.DMatrix(X), output_margin=True)
    trans = obj.params.transitions
    np.testing.assert_array_equal(
        predict_tree(booster, X, lengths, parents, types),
        tree_viterbi(margins, lengths, parents, trans, types),
    )
    _, marg = tree_forward_backward(margins, lengths, parents, trans, types)
    close(predict_tree_marginals(booster, X, lengths, parents, types), marg, rtol=1e-5)
    ll = tree_log_likelihood(booster, X, y, lengths, parents, types)
    close(-ll, tree_nll(margins, lengths, parents, y, trans, types), rtol=1e-5)
    path = tmp_path / "tree.json"
    booster.save_model(path)
    loaded = xgb.Booster(model_file=path)
    for other in (loaded, pickle.loads(pickle.dumps(booster))):
        close(predict_tree_marginals(other, X, lengths, parents, types), marg, rtol=1e-5)


def test_clear_errors(trained):
    obj, booster, _, (X, y, lengths, parents, types) = trained
    plain = xgb.DMatrix(X, label=y, group=lengths)
    with pytest.raises(ValueError, match="no tree structure"):
        obj.metric(np.zeros((len(y), 2)), plain)
    register_tree(plain, parents, types)
    assert obj.metric(np.zeros((len(y), 2)), plain)[0] == "crf-nll"
    wrong = tree_dmatrix(X, y, lengths, parents, types)
    with pytest.raises(ValueError, match="1 edge type"):
        tree_crf_objective(2, n_edge_types=1)(np.zeros((len(y), 2)), wrong)
    with pytest.raises(ValueError, match="one entry per row"):
        tree_dmatrix(X, y, lengths, parents[:-1], types)
    with pytest.raises(ValueError, match="cycle"):
        bad = np.tile([1, 0, 0, 1, 1], len(lengths))
        tree_crf_objective(2, 2)(np.zeros((len(y), 2)), tree_dmatrix(X, y, lengths, bad, types))
    chain_booster = xgb.train({"nthread": 1}, xgb.DMatrix(X[:5], label=y[:5]), 1)
    with pytest.raises(ValueError, match="tree_crf_objective"):
        predict_tree(chain_booster, X, lengths, parents, types)


def test_tree_estimator_fits_any_labels_and_clones():
    X, y, lengths, parents, types = typed_tree_data(1, m=40)
    names = np.array(["no", "yes"])[y]
    est = TreeCRFClassifier(n_estimators=4, max_depth=2, n_jobs=1)
    assert clone(est).get_params() == est.get_params()
    est.fit(X, names, parents=parents, edge_types=types, lengths=lengths,
            eval_set=[(X, names, lengths, parents, types)])  # fmt: skip
    assert list(est.classes_) == ["no", "yes"] and est.n_edge_types_ == 2
    # The dialect of the chain estimators: an int best_iteration_, validation_i histories.
    assert est.best_iteration_ == 3 and isinstance(est.best_iteration_, int)
    assert len(est.evals_result_["validation_0"]["crf-nll"]) == 4
    pred = est.predict(X, parents=parents, edge_types=types, lengths=lengths)
    assert set(pred) <= {"no", "yes"}
    marg = est.predict_marginals(X, parents=parents, edge_types=types, lengths=lengths)
    close(marg.sum(axis=1), 1.0)
    assert est.score(X, names, parents=parents, edge_types=types, lengths=lengths) > 0.6
    assert np.all(est.predict_log_likelihood(X, names, parents=parents, edge_types=types,
                                     lengths=lengths) < 0)  # fmt: skip
    assert est.feature_importances_.shape == (2,)
    with pytest.raises(ValueError, match="not seen in fit"):
        est.predict_log_likelihood(X, np.full(len(y), "maybe"), parents=parents, edge_types=types,
                           lengths=lengths)  # fmt: skip


def test_chain_inference_unchanged_by_the_refactor():
    rng = np.random.default_rng(7)
    lengths = np.array([2, 3])
    margins = rng.normal(size=(5, K))
    batch = SequenceBatch.build(rng.integers(0, K, 5), lengths, K)
    obj = CRFObjective(K, transition_solver="newton")
    obj.grad_hess(margins, batch)
    p = obj.params
    close(
        obj.sequence_nll(margins, batch),
        inference.sequence_nll(margins, lengths, batch.labels, p.transitions, p.start, p.end),
    )
