"""Random and adversarial chain CRFs shared by the tests (``(unary, lengths, transitions, start, end)``)."""

import numpy as np
from hypothesis import strategies as st


def make_crf(seed, lengths, num_labels, scale=1.0, sticky=0.0):
    """Random batch ``(unary, lengths, transitions, start, end)``."""
    rng = np.random.default_rng(seed)
    lengths = np.asarray(lengths, dtype=np.int64)
    unary = scale * rng.normal(size=(int(lengths.sum()), num_labels))
    transitions = scale * rng.normal(size=(num_labels, num_labels)) + sticky * np.eye(num_labels)
    start = scale * rng.normal(size=num_labels)
    end = scale * rng.normal(size=num_labels)
    return unary, lengths, transitions, start, end


@st.composite
def crfs(draw, scales=(0.3, 1.0, 2.5), sticky=(0.0, 3.0, 6.0, -4.0), max_labels=4):
    num_labels = draw(st.integers(1, max_labels))
    lengths = draw(st.lists(st.integers(1, 5), min_size=1, max_size=4))
    seed = draw(st.integers(0, 2**32 - 1))
    return make_crf(seed, lengths, num_labels, draw(st.sampled_from(scales)), draw(st.sampled_from(sticky)))


def sequence_ends(lengths):
    """Row index of the last position of every sequence."""
    return np.cumsum(lengths) - 1


def make_forbidding_crf(seed, lengths, num_labels, scale=1.0):
    """Random batch where some moves, first and last labels are ``-inf`` (forbidden).

    Label 0 may always start, repeat and end, so every sequence keeps a possible labelling.
    """
    unary, lengths, transitions, start, end = make_crf(seed, lengths, num_labels, scale)
    rng = np.random.default_rng(seed + 1)
    transitions[rng.random(transitions.shape) < 0.35] = -np.inf
    start[rng.random(num_labels) < 0.3] = -np.inf
    end[rng.random(num_labels) < 0.3] = -np.inf
    transitions[0, 0] = start[0] = end[0] = 0.0
    return unary, lengths, transitions, start, end


def forbidding_extreme(case, margin):
    """Tiny chains whose only possible paths go through labels that the margins disfavour.

    ``tie``: both positions prefer label 1 by ``2 * margin`` but 1 -> 1 is forbidden, so
    (0, 1) and (1, 0) tie: log Z = log 2 and every marginal is 1/2. ``end``: the preferred
    label may not end the sequence. ``dead end``: the preferred first label has no allowed
    successor.
    """
    inf = np.inf
    if case == "tie":
        return (np.array([[-margin, margin], [-margin, margin]]), np.array([2]),
                np.array([[0.0, 0.0], [0.0, -inf]]), np.zeros(2), np.zeros(2))
    if case == "end":
        return (np.array([[margin, -margin]]), np.array([1]), np.zeros((2, 2)),
                np.zeros(2), np.array([-inf, 0.0]))
    return (np.array([[margin, -margin], [0.0, 0.0]]), np.array([2]),
            np.array([[-inf, -inf], [0.0, 0.0]]), np.zeros(2), np.zeros(2))
