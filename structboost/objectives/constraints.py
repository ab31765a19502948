"""Constrained decoding: which label moves a chain CRF may make.

A :class:`Constraints` holds three boolean masks: ``transitions[a, b]``
(``a`` may be followed by ``b``), ``start[k]`` and ``end[k]``. Added as
``-inf`` scores (:meth:`Constraints.apply`) they give every labelling with
a forbidden move zero probability.

:func:`allowed_transitions` builds the masks of a chunk tagging scheme from
the tag names in label order (:func:`structboost.text.tags.scheme_moves`):

===========  ==========================================================
scheme       rules
===========  ==========================================================
``"iob2"``   ``I-X`` only after ``B-X`` or ``I-X``; no ``I-X`` first.
``"iob1"``   ``B-X`` only after ``B-X`` or ``I-X`` (it separates two
             adjacent chunks of one type); no ``B-X`` first.
``"bioes"``  after ``B-X``/``I-X`` only ``I-X``/``E-X``; after ``O``,
             ``E-*``, ``S-*`` only ``O``, ``B-*``, ``S-*``; a sequence
             starts with ``O``/``B-*``/``S-*`` and ends with
             ``O``/``E-*``/``S-*``.
===========  ==========================================================
"""

from typing import NamedTuple

import numpy as np

from .._typing import ArrayLike
from ..text.tags import as_tags, check_scheme, scheme_moves, sentence_offsets
from ..transitions.chain import TransitionParams


class Constraints(NamedTuple):
    """Allowed moves of a chain CRF over K labels.

    Attributes
    ----------
    transitions : (K, K) bool ndarray
        ``transitions[a, b]``: label ``a`` may be followed by label ``b``.
    start, end : (K,) bool ndarray
        Labels a sequence may begin / end with.
    """

    transitions: np.ndarray
    start: np.ndarray
    end: np.ndarray

    @property
    def num_labels(self):
        return self.start.shape[0]

    def free_vector(self):
        """Allowed entries ``(K*K + 2K,)`` bool, in the order of :meth:`TransitionParams.to_vector`."""
        return np.concatenate((self.transitions.ravel(), self.start, self.end))

    def masks(self):
        """The constraints as :class:`TransitionParams` scores to add: ``0`` where allowed, ``-inf``
        where forbidden.
        """
        return TransitionParams(
            *(np.where(mask, 0.0, -np.inf) for mask in (self.transitions, self.start, self.end))
        )

    def apply(self, params):
        """A copy of ``params`` (:class:`TransitionParams` over the same K labels) with every
        forbidden entry ``-inf``.
        """
        if params.num_labels != self.num_labels:
            raise ValueError(
                f"the constraints cover {self.num_labels} labels but the model has "
                f"{params.num_labels}: build them from the model's labels in class order."
            )
        masks = self.masks()
        return TransitionParams(
            params.transitions + masks.transitions, params.start + masks.start, params.end + masks.end
        )

    def _moves(self, labels, lengths):
        """``(y (n,), first (m,), last (m,), move_ok (n,))``: rows, sequence ends, and whether row
        ``t``'s move is allowed.
        """
        y = np.asarray(labels, dtype=np.int64)
        lengths = np.asarray(lengths, dtype=np.int64)
        first = np.concatenate(([0], np.cumsum(lengths)[:-1])).astype(np.int64)
        last = first + lengths - 1
        move_ok = np.ones(y.size, dtype=bool)
        inner = np.ones(y.size, dtype=bool)
        inner[last] = False
        idx = np.flatnonzero(inner)
        move_ok[idx] = self.transitions[y[idx], y[idx + 1]]
        return y, first, last, move_ok

    def valid_sequences(self, labels, lengths):
        """Whether each labelled sequence makes only allowed moves, ``(m,)`` bool; ``labels (n,)``,
        ``lengths (m,)``.
        """
        y, first, last, move_ok = self._moves(labels, lengths)
        if not y.size:
            return np.zeros(0, dtype=bool)
        return np.logical_and.reduceat(move_ok, first) & self.start[y[first]] & self.end[y[last]]

    def check_labels(self, labels, lengths):
        """Raise a ``ValueError`` naming the first forbidden move of labelled sequences ``labels
        (n,)``, ``lengths (m,)``.
        """
        y, first, last, move_ok = self._moves(labels, lengths)
        bad_start = np.flatnonzero(~self.start[y[first]])
        bad_end = np.flatnonzero(~self.end[y[last]])
        bad_move = np.flatnonzero(~move_ok)
        problems = []
        if bad_start.size:
            i = int(bad_start[0])
            problems.append((first[i], f"sequence {i} starts with label {y[first[i]]}"))
        if bad_end.size:
            i = int(bad_end[0])
            problems.append((last[i], f"sequence {i} ends with label {y[last[i]]}"))
        if bad_move.size:
            t = int(bad_move[0])
            i = int(np.searchsorted(first, t, "right") - 1)
            problems.append((t, f"sequence {i} has label {y[t]} followed by {y[t + 1]} at row {t}"))
        if problems:
            what = min(problems)[1]
            raise ValueError(
                f"{what}, which allowed_transitions forbids: the labels must obey the "
                "constraints (convert the tags to the constrained scheme with "
                "structboost.datasets.convert_tags, or relax allowed_transitions)."
            )


def _check_mask(arr, name, shape):
    mask = np.asarray(arr)
    if mask.shape != shape:
        raise ValueError(
            f"allowed_transitions {name} must have shape {shape} (one entry per label, in class "
            f"order); got {mask.shape}."
        )
    if mask.dtype != np.bool_:
        raise ValueError(
            f"allowed_transitions {name} must be a bool array (True = allowed); got dtype "
            f"{mask.dtype}."
        )
    return np.ascontiguousarray(mask)


def from_masks(transitions, start=None, end=None):
    """Validated :class:`Constraints` from bool masks ``transitions (K, K)``, ``start, end (K,)``
    (every label when omitted).
    """
    trans = np.asarray(transitions)
    if trans.ndim != 2 or trans.shape[0] != trans.shape[1]:
        raise ValueError(
            f"allowed_transitions must be a square (K, K) bool array; got shape {trans.shape}."
        )
    k = trans.shape[0]
    trans = _check_mask(trans, "transitions", (k, k))
    start = np.ones(k, dtype=bool) if start is None else _check_mask(start, "start", (k,))
    end = np.ones(k, dtype=bool) if end is None else _check_mask(end, "end", (k,))
    if not (start.any() and end.any() and trans.any()):
        raise ValueError(
            "allowed_transitions forbids every first label, every last label or every move; "
            "allow at least one of each."
        )
    return Constraints(trans, start, end)


def allowed_transitions(labels: ArrayLike, scheme: str) -> Constraints:
    """Allowed moves of a chunk tagging scheme.

    Parameters
    ----------
    labels : sequence of str, shape (K,)
        The tag of each label in class order (e.g. an estimator's
        ``classes_``): ``"O"`` or ``"P-TYPE"`` with a prefix of the scheme.
    scheme : {"iob1", "iob2", "bioes"}
        See the module notes for the rules.

    Returns
    -------
    Constraints

    Examples
    --------
    >>> c = allowed_transitions(["B-PER", "I-PER", "O"], "iob2")
    >>> c.transitions.astype(int)
    array([[1, 1, 1],
           [1, 1, 1],
           [1, 0, 1]])
    >>> c.start
    array([ True, False,  True])
    """
    key = check_scheme(scheme)
    arr = np.asarray(labels)
    if arr.size and arr.dtype.kind not in "UO":
        raise ValueError(
            f"allowed_transitions={key!r} needs tag names such as 'B-PER' or 'O' for the labels; "
            f"got {arr.dtype} labels {arr.tolist()[:5]}. Pass a (K, K) bool array instead."
        )
    return Constraints(*scheme_moves(as_tags(arr), key))


def valid_tags(tags, scheme, lengths=None):
    """Whether each tag sequence of the flat ``tags (n,)`` (``lengths (m,)``, default one sequence)
    obeys ``scheme``: ``(m,)`` bool.
    """
    arr = as_tags(tags)
    names, codes = np.unique(arr, return_inverse=True)
    offsets = sentence_offsets(lengths, arr.size)
    return allowed_transitions(names, scheme).valid_sequences(codes, np.diff(offsets))


def resolve(allowed, num_labels, labels=None):
    """An ``allowed_transitions=`` argument (None, a scheme name, which needs the tag names
    ``labels (K,)``, :class:`Constraints` or a ``(K, K)`` bool mask) as :class:`Constraints` or None.
    """
    if allowed is None:
        return None
    if isinstance(allowed, str):
        if labels is None:
            raise ValueError(
                f"allowed_transitions={allowed!r} needs the tag names of the labels, which a "
                "raw booster or objective does not know: pass "
                f"structboost.objectives.constraints.allowed_transitions(tag_names, {allowed!r}) instead."
            )
        out = allowed_transitions(labels, allowed)
    elif isinstance(allowed, Constraints):
        out = from_masks(*allowed)
    else:
        out = from_masks(allowed)
    if out.num_labels != num_labels:
        raise ValueError(
            f"allowed_transitions covers {out.num_labels} labels but the model has {num_labels}: "
            "give one row and column per label, in class order."
        )
    return out
