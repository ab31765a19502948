"""Constrained decoding: scheme masks, constrained inference against brute force,
the log-space fallback, constrained training, estimators and errors."""

import itertools

import numpy as np
import pytest
import xgboost as xgb
from hypothesis import given, settings
from hypothesis import strategies as st
from naive import ChainOracle

import structboost as sb
from structboost import inference
from structboost.inference import chain as chain_inference
from structboost.objectives.constraints import Constraints, allowed_transitions, from_masks, valid_tags
from structboost.objectives.chain import CRFObjective, SequenceBatch
from structboost.transitions.chain import TransitionParams, TransitionProblem, refit

IOB = ["B-LOC", "B-PER", "I-LOC", "I-PER", "O"]
BIOES = ["B-LOC", "B-PER", "E-LOC", "E-PER", "I-LOC", "I-PER", "O", "S-LOC", "S-PER"]
TAGS = {"iob1": IOB, "iob2": IOB, "bioes": BIOES}


def rule_check(tags, scheme):
    """Independent rule check of one tag sequence (written from the scheme definitions)."""
    prev = "O"
    for i, tag in enumerate(tags):
        prefix, _, kind = tag.partition("-")
        p_prefix, _, p_kind = prev.partition("-")
        if scheme == "iob2" and prefix == "I" and not (i > 0 and p_prefix in "BI" and p_kind == kind):
            return False
        if scheme == "iob1" and prefix == "B" and not (i > 0 and p_prefix in "BI" and p_kind == kind):
            return False
        if scheme == "bioes":
            inside = i > 0 and p_prefix in ("B", "I")
            if inside != (prefix in ("I", "E")) or (inside and p_kind != kind):
                return False
        prev = tag
    return not (scheme == "bioes" and prev.partition("-")[0] in ("B", "I"))


# -- scheme masks ------------------------------------------------------------

def test_iob2_masks():
    c = allowed_transitions(IOB, "iob2")
    expected = [
        [1, 1, 1, 0, 1],
        [1, 1, 0, 1, 1],
        [1, 1, 1, 0, 1],
        [1, 1, 0, 1, 1],
        [1, 1, 0, 0, 1],
    ]
    np.testing.assert_array_equal(c.transitions, np.array(expected, dtype=bool))
    np.testing.assert_array_equal(c.start, [1, 1, 0, 0, 1])
    np.testing.assert_array_equal(c.end, [1, 1, 1, 1, 1])


def test_iob1_masks():
    c = allowed_transitions(IOB, "iob1")
    expected = [
        [1, 0, 1, 1, 1],
        [0, 1, 1, 1, 1],
        [1, 0, 1, 1, 1],
        [0, 1, 1, 1, 1],
        [0, 0, 1, 1, 1],
    ]
    np.testing.assert_array_equal(c.transitions, np.array(expected, dtype=bool))
    np.testing.assert_array_equal(c.start, [0, 0, 1, 1, 1])
    np.testing.assert_array_equal(c.end, [1, 1, 1, 1, 1])


def test_bioes_masks():
    c = allowed_transitions(BIOES, "BIOES")
    outside = [1, 1, 0, 0, 0, 0, 1, 1, 1]  # after O, E-*, S-*: O, B-*, S-*
    loc = [0, 0, 1, 0, 1, 0, 0, 0, 0]  # after B-LOC, I-LOC: I-LOC, E-LOC
    per = [0, 0, 0, 1, 0, 1, 0, 0, 0]
    expected = [loc, per, outside, outside, loc, per, outside, outside, outside]
    np.testing.assert_array_equal(c.transitions, np.array(expected, dtype=bool))
    np.testing.assert_array_equal(c.start, [1, 1, 0, 0, 0, 0, 1, 1, 1])
    np.testing.assert_array_equal(c.end, [0, 0, 1, 1, 0, 0, 1, 1, 1])


@pytest.mark.parametrize("scheme", ["iob1", "iob2", "bioes"])
def test_valid_sequences_match_the_rules(scheme):
    tags = TAGS[scheme]
    c = allowed_transitions(tags, scheme)
    for length in (1, 2, 3):
        seqs = np.array(list(itertools.product(range(len(tags)), repeat=length)))
        got = c.valid_sequences(seqs.ravel(), np.full(len(seqs), length))
        want = [rule_check([tags[k] for k in s], scheme) for s in seqs]
        np.testing.assert_array_equal(got, want)
        flat = np.array(tags)[seqs.ravel()]
        np.testing.assert_array_equal(valid_tags(flat, scheme, np.full(len(seqs), length)), want)


def test_masks_as_scores():
    c = allowed_transitions(IOB, "iob2")
    params = c.apply(TransitionParams.zeros(5))
    assert np.isneginf(params.transitions[4, 2]) and params.transitions[0, 2] == 0.0
    assert np.isneginf(params.start[3]) and (params.end == 0).all()
    assert c.free_vector().sum() == c.transitions.sum() + c.start.sum() + c.end.sum()


# -- constrained inference against brute force ------------------------------

def _random_model(rng, c, scale=1.0):
    k = c.num_labels
    m = c.masks()
    return (
        scale * rng.normal(size=(k, k)) + m.transitions,
        rng.normal(size=k) + m.start,
        rng.normal(size=k) + m.end,
    )


def _conflicting_unary(rng, lengths, k, shift):
    """Node scores with one label per row lifted by ``shift``: forbidden paths dominate."""
    u = rng.normal(size=(sum(lengths), k)) * 2.0
    u[np.arange(len(u)), rng.integers(0, k, len(u))] += shift
    return u


def _check_against_oracle(u, lengths, trans, start, end):
    log_z, marg = inference.forward_backward(u, lengths, trans, start, end)
    pair = inference.edge_marginals(u, lengths, trans, start, end)
    path = inference.viterbi(u, lengths, trans, start, end)
    mixing = inference.gamma(u, lengths, trans, start, end, "mixing")
    exact = inference.gamma(u, lengths, trans, start, end, "exact")
    edge = inference.edge_gamma(u, lengths, trans, start, end)
    lo = 0
    for i, length in enumerate(lengths):
        o = ChainOracle(u[lo : lo + length], trans, start, end)
        rows = slice(lo, lo + length)
        np.testing.assert_allclose(log_z[i], o.log_z, rtol=1e-12, atol=1e-9)
        np.testing.assert_allclose(marg[rows], o.marginals, atol=1e-9)
        np.testing.assert_array_equal(path[rows], o.map_labelling)
        np.testing.assert_allclose(mixing[rows], o.mixing_node_gamma, rtol=1e-7)
        np.testing.assert_allclose(exact[rows], np.nan_to_num(o.exact_node_gamma, nan=2.0), rtol=1e-6)
        if length > 1:
            np.testing.assert_allclose(pair[lo : lo + length - 1], o.edge_marginals, atol=1e-9)
            np.testing.assert_allclose(edge[lo : lo + length - 1], o.mixing_edge_gamma, rtol=1e-7)
        lo += length


@pytest.mark.parametrize("scheme", ["iob1", "iob2", "bioes"])
def test_constrained_inference_is_the_masked_oracle(scheme):
    rng = np.random.default_rng(1)
    tags = TAGS[scheme][:5] if scheme != "bioes" else ["B-PER", "E-PER", "I-PER", "O", "S-PER"]
    c = allowed_transitions(tags, scheme)
    lengths = [1, 2, 3, 4, 3]
    u = rng.normal(size=(sum(lengths), 5)) * 2.0
    _check_against_oracle(u, lengths, *_random_model(rng, c))


def test_log_space_fallback_matches_oracle():
    """Margins shifted by 5000: the scaled messages fail, the log-space pass does not.

    Exactly the sequences whose row-wise best labels make a forbidden move go
    to log space (the others keep the fast path).
    """
    rng = np.random.default_rng(2)
    c = allowed_transitions(IOB, "iob2")
    used = 0
    for _ in range(4):
        lengths = [4, 1, 3, 4, 2]
        u = _conflicting_unary(rng, lengths, 5, 5000.0)
        model = _random_model(rng, c)
        trans, start, end = model
        bounds = np.concatenate(([0], np.cumsum(lengths)))
        conflicting = []
        for i in range(len(lengths)):
            y = u[bounds[i] : bounds[i + 1]].argmax(axis=1)
            score = start[y[0]] + end[y[-1]] + trans[y[:-1], y[1:]].sum()
            if not np.isfinite(score):
                conflicting.append(i)
        post = chain_inference.posterior(*chain_inference.check_chain(u, lengths, *model))
        if post.log_space is not None:
            used += 1
            assert post.log_space.sequences.tolist() == conflicting
        else:
            assert conflicting == []
        _check_against_oracle(u, lengths, *model)
    assert used >= 2


@settings(max_examples=25, deadline=None)
@given(
    scheme=st.sampled_from(["iob1", "iob2", "bioes"]),
    lengths=st.lists(st.integers(1, 12), min_size=1, max_size=4),
    shift=st.sampled_from([0.0, 30.0, 800.0, 1e4]),
    seed=st.integers(0, 2**16),
)
def test_constrained_viterbi_is_always_valid(scheme, lengths, shift, seed):
    rng = np.random.default_rng(seed)
    tags = TAGS[scheme]
    c = allowed_transitions(tags, scheme)
    u = _conflicting_unary(rng, lengths, len(tags), shift)
    model = _random_model(rng, c, scale=3.0)
    path = inference.viterbi(u, lengths, *model)
    lo = 0
    for length in lengths:
        assert rule_check([tags[k] for k in path[lo : lo + length]], scheme)
        lo += length
    log_z, marg = inference.forward_backward(u, lengths, *model)
    assert np.isfinite(log_z).all() and np.isfinite(marg).all()
    np.testing.assert_allclose(marg.sum(axis=1), 1.0)
    assert (marg[np.cumsum([0] + lengths[:-1])][:, ~c.start] == 0).all()


# -- constrained training -----------------------------------------------------

def _tagged_data(rng, c, m=6, length=5):
    """Valid label sequences drawn by rejection, with noisy margins."""
    k = c.num_labels
    labels = []
    while len(labels) < m:
        y = rng.integers(0, k, length)
        if c.valid_sequences(y, [length])[0]:
            labels.append(y)
    y = np.concatenate(labels)
    u = rng.normal(size=(y.size, k))
    u[np.arange(y.size), y] += 1.0
    return u, y, np.full(m, length)


@pytest.mark.parametrize("solver", ["lbfgs", "newton", "majorize"])
def test_solvers_keep_forbidden_entries_fixed(solver):
    rng = np.random.default_rng(3)
    c = allowed_transitions(IOB, "iob2")
    u, y, lengths = _tagged_data(rng, c)
    batch = SequenceBatch.build(y, lengths, 5)
    free = c.free_vector()
    problem = TransitionProblem(u, batch.offsets, batch.seq_weight, batch.counts, 0.5, free)
    params = c.apply(TransitionParams.zeros(5))
    before = problem.value(params.to_vector()[free])
    new = refit(problem, params, solver, 3)
    vec = new.to_vector()
    assert np.isneginf(vec[~free]).all() and np.isfinite(vec[free]).all()
    assert problem.value(vec[free]) < before
    # the gradient lives on the free entries only and matches finite differences
    x = vec[free]
    _, grad = problem.value_and_grad(x)
    assert grad.shape == (free.sum(),)
    eps = 1e-6
    for j in rng.choice(x.size, 6, replace=False):
        dx = np.zeros_like(x)
        dx[j] = eps
        fd = (problem.value(x + dx) - problem.value(x - dx)) / (2 * eps)
        np.testing.assert_allclose(grad[j], fd, rtol=1e-5, atol=1e-7)


def test_objective_node_gradient_by_finite_differences():
    rng = np.random.default_rng(4)
    c = allowed_transitions(IOB, "iob1")
    u, y, lengths = _tagged_data(rng, c)
    batch = SequenceBatch.build(y, lengths, 5)
    obj = CRFObjective(5, mode="treecrf", transition_solver="newton", allowed_transitions=c)
    grad, _ = obj.grad_hess(u, batch)
    assert np.isneginf(obj.params.to_vector()[~c.free_vector()]).all()
    eps = 1e-6
    for i, j in zip(rng.integers(0, u.shape[0], 8), rng.integers(0, 5, 8)):
        du = np.zeros_like(u)
        du[i, j] = eps
        fd = (obj.sequence_nll(u + du, batch).sum() - obj.sequence_nll(u - du, batch).sum()) / (2 * eps)
        np.testing.assert_allclose(grad[i, j], fd, rtol=1e-5, atol=1e-7)


def test_objective_survives_huge_margins():
    rng = np.random.default_rng(5)
    c = allowed_transitions(IOB, "iob2")
    u, y, lengths = _tagged_data(rng, c)
    u = _conflicting_unary(rng, lengths, 5, 1e4)
    batch = SequenceBatch.build(y, lengths, 5)
    for solver in ("lbfgs", "newton", "majorize"):
        obj = CRFObjective(5, transition_solver=solver, allowed_transitions=c)
        grad, hess = obj.grad_hess(u, batch)
        assert np.isfinite(grad).all() and np.isfinite(hess).all()
        assert np.isfinite(obj.sequence_nll(u, batch)).all()


# -- engines and estimators -----------------------------------------------------

def _ner_data(seed, m=40, length=8):
    """Features that hint at IOB2 tags, noisy enough for an unconstrained model to err."""
    rng = np.random.default_rng(seed)
    c = allowed_transitions(IOB, "iob2")
    tags = []
    for _ in range(m):
        seq, prev = [], "O"
        for _ in range(length):
            r = rng.random()
            if prev != "O" and r < 0.4:
                tag = "I-" + prev[2:]
            elif r < 0.7:
                tag = "O"
            else:
                tag = rng.choice(["B-LOC", "B-PER"])
            seq.append(tag)
            prev = tag
        tags.extend(seq)
    tags = np.array(tags)
    assert c.valid_sequences(np.searchsorted(IOB, tags), np.full(m, length)).all()
    codes = np.searchsorted(IOB, tags)
    X = rng.normal(size=(tags.size, 4))
    X[np.arange(tags.size), codes % 4] += 1.0
    return X, tags, np.full(m, length), c


@pytest.mark.usefixtures("single_threaded")
@pytest.mark.parametrize("cls", ["XGBCRFClassifier", "LGBMCRFClassifier"])
@pytest.mark.parametrize("mode", ["gbcrf", "logitboost"])
def test_estimator_never_predicts_invalid_tags(cls, mode):
    pytest.importorskip("lightgbm")
    X, tags, lengths, c = _ner_data(0)
    est = getattr(sb, cls)(
        mode=mode, n_estimators=4, max_depth=2, allowed_transitions="iob2", n_jobs=1
    )
    est.fit(X, tags, lengths=lengths)
    Xt, tt, lt, _ = _ner_data(1)
    pred = est.predict(Xt, lengths=lt)
    lo = 0
    for length in lt:
        assert rule_check(pred[lo : lo + length], "iob2")
        lo += length
    marg = est.predict_marginals(Xt, lengths=lt)
    assert (marg[np.cumsum(lt) - lt][:, ~c.start] == 0).all()
    assert 0.0 <= est.score(Xt, tt, lengths=lt) <= 1.0
    if mode == "gbcrf":
        assert np.isneginf(est.transitions_.loc["O", "I-PER"])
    assert np.isfinite(est.predict_log_likelihood(Xt, tt, lengths=lt)).all()


def test_booster_keeps_constraints_through_save(tmp_path):
    X, tags, lengths, c = _ner_data(2)
    y = np.searchsorted(IOB, tags)
    obj = sb.crf_objective(5, allowed_transitions=c)
    dtrain = xgb.DMatrix(X, label=y, group=lengths)
    booster = xgb.train(
        sb.xgb_params(5, max_depth=2, nthread=1), dtrain, 3, obj=obj, callbacks=[obj.callback()]
    )
    booster.save_model(tmp_path / "m.json")
    loaded = xgb.Booster(model_file=tmp_path / "m.json")
    path = sb.predict(loaded, xgb.DMatrix(X, group=lengths))
    assert c.valid_sequences(path, lengths).all()
    # decode-time constraints on an unconstrained model
    free = sb.crf_objective(5)
    plain = xgb.train(sb.xgb_params(5, max_depth=2, nthread=1), dtrain, 3, obj=free, callbacks=[free.callback()])
    path = sb.predict(plain, X, lengths=lengths, allowed_transitions=c)
    assert c.valid_sequences(path, lengths).all()
    ll = sb.sequence_log_likelihood(plain, dtrain, allowed_transitions=c.transitions)
    assert ll.shape == (len(lengths),) and (ll <= 0).all()


# -- errors -------------------------------------------------------------------------

def test_errors():
    with pytest.raises(ValueError, match="unknown scheme 'iobes'"):
        allowed_transitions(IOB, "iobes")
    with pytest.raises(ValueError, match="'E-PER' .* not a iob2 tag"):
        allowed_transitions(["B-PER", "E-PER", "O"], "iob2")
    with pytest.raises(ValueError, match="tag names"):
        allowed_transitions([0, 1, 2], "iob2")
    with pytest.raises(ValueError, match="covers 5 labels but the model has 4"):
        CRFObjective(4, allowed_transitions=allowed_transitions(IOB, "iob2"))
    with pytest.raises(ValueError, match="needs the tag names"):
        sb.crf_objective(5, allowed_transitions="iob2")
    with pytest.raises(ValueError, match="bool array"):
        from_masks(np.ones((3, 3)))
    with pytest.raises(ValueError, match="square"):
        from_masks(np.ones((3, 2), dtype=bool))
    with pytest.raises(ValueError, match=r"start must have shape \(3,\)"):
        from_masks(np.ones((3, 3), dtype=bool), start=np.ones(2, dtype=bool))
    c = allowed_transitions(IOB, "iob2")
    batch = SequenceBatch.build([4, 3, 4], [3], 5)  # O I-PER O
    obj = CRFObjective(5, allowed_transitions=c)
    with pytest.raises(ValueError, match="label 4 followed by 3 at row 0"):
        obj.grad_hess(np.zeros((3, 5)), batch)
    diagonal = Constraints(np.eye(5, dtype=bool), np.eye(5, dtype=bool)[0], np.eye(5, dtype=bool)[1])
    masks = diagonal.masks()
    with pytest.raises(ValueError, match="no allowed labelling"):
        inference.forward_backward(np.zeros((2, 5)), [2], masks.transitions, masks.start, masks.end)
    X, tags, lengths, _ = _ner_data(3, m=6)
    with pytest.raises(ValueError, match="tag names"):
        sb.XGBCRFClassifier(n_estimators=1, allowed_transitions="iob2").fit(
            X, np.searchsorted(IOB, tags), lengths=lengths
        )
