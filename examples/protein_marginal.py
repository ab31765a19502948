"""Protein secondary structure from residue windows, with marginal decoding.

Every residue is described by the one-hot amino acids of a window of 11
residues around it (Qian & Sejnowski 1988; Dietterich et al. 2008), and
labelled helix (``h``), strand (``e``) or coil (``_``). For per-residue
accuracy the posterior marginals are the better decoding than the single most
likely path: ``decode="marginal"`` (the ``"per-token"`` preset) makes it what
``predict``, ``score`` and grid searches use.

Without arguments it runs on synthetic chains. With the Qian & Sejnowski files
(``protein-secondary-structure.train`` and ``.test``)::

    python examples/protein_marginal.py --data-dir ../shared/data/protein-qs
"""

import argparse
import time
from pathlib import Path

import numpy as np

import structboost as sb
from structboost.datasets import make_hmm_sequences, read_protein_qs
from structboost.features import SlidingWindow

AMINO_ACIDS = "ACDEFGHIKLMNPQRSTVWY"


def one_hot_residues(residues):
    """(n, 20) indicators of the amino acids; unknown codes give a zero row."""
    index = {a: i for i, a in enumerate(AMINO_ACIDS)}
    X = np.zeros((len(residues), len(AMINO_ACIDS)), dtype=np.float32)
    for row, residue in enumerate(residues):
        if residue in index:
            X[row, index[residue]] = 1.0
    return X


def synthetic_proteins(n_sequences, seed):
    """Sticky three-state chains emitting one of 21 symbols, one-hot; labels h / e / _."""
    X, y, lengths = make_hmm_sequences(
        n_sequences=n_sequences, length=(40, 120), n_labels=3, n_observations=21,
        stay=0.9, emission=0.5, random_state=seed,
    )
    return X.astype(np.float32), np.array(["h", "e", "_"])[y], lengths


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--data-dir", type=Path, help="folder with protein-secondary-structure.*")
    parser.add_argument("--half-width", type=int, default=5, help="window of 2 w + 1 residues")
    args = parser.parse_args(argv)

    if args.data_dir is None:
        (X, y, lengths), (Xt, yt, lengths_t) = synthetic_proteins(60, 0), synthetic_proteins(30, 1)
    else:
        parts = []
        for name in ("train", "test"):
            residues, labels, lengths = read_protein_qs(
                args.data_dir / f"protein-secondary-structure.{name}")
            parts.append((one_hot_residues(residues), labels, lengths))
        (X, y, lengths), (Xt, yt, lengths_t) = parts

    # Each row sees its neighbours; zeros outside the protein (never the next protein).
    window = SlidingWindow(half_width=args.half_width, fill=0.0)
    X = window.fit_transform(X, lengths=lengths)
    Xt = window.transform(Xt, lengths=lengths_t)
    print(f"{len(lengths)} training chains, {X.shape[0]} residues, {X.shape[1]} features")

    # The same model, two decodings: the Viterbi path and the per-residue marginals.
    # Few leaves and strong shrinkage suit these small, noisy data.
    clf = sb.XGBCRFClassifier(
        n_estimators=60, learning_rate=0.3, max_depth=3, reg_lambda=10.0, n_jobs=1
    )
    start = time.perf_counter()
    clf.fit(X, y, lengths=lengths, verbose=False)  # above 10,000 rows: automatic early stopping
    print(f"trained {clf.best_iteration + 1} rounds in {time.perf_counter() - start:.1f} s")
    for decode in ("viterbi", "marginal"):
        pred = clf.predict(Xt, lengths=lengths_t, decode=decode)
        print(f"test accuracy, {decode:8s} decoding: {100 * np.mean(pred == yt):.2f}%")

    # decode="marginal" as a parameter (the "per-token" preset): score() agrees.
    clf.set_params(decode="marginal")
    print(f"score() with decode='marginal': {100 * clf.score(Xt, yt, lengths=lengths_t):.2f}%")

    # The marginals themselves: P(label at t | whole chain), columns in classes_ order.
    proba = clf.predict_proba(Xt[: lengths_t[0]], lengths=lengths_t[:1])
    print("first residues of the first test chain, P(" + ", ".join(clf.classes_) + "):")
    print(np.round(proba[:5], 2))


if __name__ == "__main__":
    main()
