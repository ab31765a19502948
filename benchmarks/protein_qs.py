"""Protein secondary structure (Qian & Sejnowski 1988), Dietterich et al. (2008) Table 5.

Every residue is 20 one-hot indicators (the reader gives the 20 standard
amino acids and nothing else), windowed over 11 residues (half width 5;
positions outside a protein are all zeros). Compared on the same features:

- LogitBoost, TreeCRF and GBCRF: ``structboost.crf_objective`` modes trained
  with ``xgboost.train``;
- a linear CRF: sklearn-crfsuite (L-BFGS, elastic net), whose attributes are
  the names of the window's non-zero indicators plus a bias.

Hyper-parameters (a small grid per method, and the number of rounds) are
chosen by internal cross-validation over the 111 training proteins only
(``--folds`` folds of whole proteins): every grid entry is trained on each
fold's complement, its accuracy curve (per round, both decodings) on the
held-out fold is averaged over folds, and the best entry and round count are
taken from the mean curve. Each decoding ("viterbi", Dietterich's -V, and
"marginal", -FB) gets its own choice; the chosen setting is then refit on
all 111 proteins for the chosen number of rounds and scored once on the 17
test proteins. Train seconds are those of that final fit. The 95% interval
of the test accuracy comes from resampling the 17 test proteins (bootstrap):
with so few proteins, differences of a point or two are within noise. For
comparison with the paper, which reports each method at its peak over
training rounds on the test set, the boosted rows also give that peak (the
chosen setting trained for ``--max-rounds``): a choice made on the test set,
so not an honest estimate.

The folds keep homologous proteins together. Qian & Sejnowski picked test
proteins unrelated to the training ones, and it shows: no test protein
shares more than 7% of its 4-mers with any training protein, while 30 of
the 111 training proteins share more than 20% with another training protein
(13 more than 50%, one pair is identical). Folds of random proteins would
leak those homologs into validation, overrate models that memorise them (big
trees, many rounds) and so pick settings that lose 2-3 points on the test
set. Proteins linked by more than ``--homology`` shared 4-mers (single
linkage) therefore share a fold.

Usage::

    python benchmarks/protein_qs.py --data-dir ../shared/data/protein-qs [--threads 2]

Writes ``benchmarks/results/protein_qs.csv`` (keeping the rows of methods this run does
not redo, so methods can run one at a time) and prints a Markdown table.
"""

import argparse
import csv
import itertools
import json
import os
import platform
import time
from pathlib import Path

import numba
import numpy as np
import xgboost as xgb

import structboost as sb
from structboost.datasets import AMINO_ACIDS, PROTEIN_LABELS, read_protein_qs
from structboost.features import SlidingWindow

DECODES = ("viterbi", "marginal")
RESULTS = Path(__file__).resolve().parent / "results"
PUBLISHED = (
    ("TreeCRF, Dietterich et al. 2008 (-FB)", 64.52),
    ("Mallet with feature induction", 64.43),
    ("baseline CRF (Mallet)", 62.44),
)

# Small grids (the machine is small): every entry is one xgboost parameter set
# (plus objective options under a "crf" key). Trees are grown best-first with
# at most L leaves, as in the paper; reg_lambda is the paper's shrinkage
# lambda in the leaf values (TreeCRF's unit Hessian makes it a count of rows).
# GBCRF's adaptive step (the default) keeps its steps at most LogitBoost's at
# the same eta, so it gets LogitBoost's eta (the bound, step="bound", needed
# eta = 2: gamma is about 9 here).
def best_first(leaves, **options):
    """Best-first trees of at most ``leaves`` leaves (the paper's CART variant)."""
    return {"grow_policy": "lossguide", "max_depth": 0, "max_leaves": leaves, **options}


# Four tree shapes for every booster: small, medium, medium with row and
# column subsampling, and large with big minimum leaves.
SHAPES = (
    best_first(8, min_child_weight=5.0),
    best_first(30, min_child_weight=5.0),
    best_first(30, min_child_weight=5.0, subsample=0.5, colsample_bynode=0.5),
    best_first(100, min_child_weight=20.0),
)
GRIDS = {
    "logitboost": [{**shape, "eta": 0.5} for shape in SHAPES],
    "treecrf": [{**shape, "eta": 1.0, "reg_lambda": lam}
                for shape, lam in itertools.product(SHAPES, (10.0, 100.0))],
    "gbcrf": [{**shape, "eta": 0.5, "reg_lambda": lam, "crf": {"transition_solver": solver}}
              for shape, lam, solver in itertools.product(SHAPES, (10.0, 100.0), ("lbfgs", "newton"))],
}
CRFSUITE_GRID = [
    {"c1": c1, "c2": c2} for c1, c2 in itertools.product((0.0, 0.1), (0.1, 1.0, 10.0, 30.0))
]


def machine_line():
    """Machine and library versions, for the tables."""
    return (
        f"machine: {platform.processor() or platform.machine()}, {os.cpu_count()} cores; "
        f"python {platform.python_version()}, xgboost {xgb.__version__}, numba "
        f"{numba.__version__}, numpy {np.__version__}, structboost {sb.__version__}"
    )


def one_hot_residues(residues):
    """``(n, 20)`` float32 indicators of the residues in ``AMINO_ACIDS`` order."""
    return (np.asarray(residues)[:, None] == np.array(list(AMINO_ACIDS))[None, :]).astype(
        np.float32
    )


def load_part(data_dir, part, with_residues=False):
    """One-hot residues ``(n, 20)``, labels ``(n,)`` (``PROTEIN_LABELS`` order), lengths.

    With ``with_residues``, the one-letter codes ``(n,)`` come fourth.
    """
    residues, labels, lengths = read_protein_qs(
        Path(data_dir) / f"protein-secondary-structure.{part}"
    )
    y = np.searchsorted(np.array(PROTEIN_LABELS), labels).astype(np.int64)
    out = (one_hot_residues(residues), y, lengths)
    return out + (residues,) if with_residues else out


def windowed(X, lengths, half_width):
    """The window of ``2 half_width + 1`` residues, zeros outside the protein."""
    return SlidingWindow(half_width=half_width, fill=0).fit_transform(X, lengths=lengths)


def homology_clusters(residues, lengths, threshold, k=4):
    """Cluster id ``(m,)`` of every protein: single linkage over shared k-mers.

    Two proteins are linked when the k-mers they share exceed ``threshold``
    times the k-mer count of the shorter one.
    """
    offsets = np.concatenate(([0], np.cumsum(lengths)))
    text = "".join(residues)
    kmers = [{text[i:i + k] for i in range(a, b - k + 1)}
             for a, b in zip(offsets[:-1], offsets[1:])]
    parent = list(range(len(kmers)))

    def root(i):
        while parent[i] != i:
            parent[i] = parent[parent[i]]
            i = parent[i]
        return i

    for i, j in itertools.combinations(range(len(kmers)), 2):
        shared = len(kmers[i] & kmers[j]) / max(1, min(len(kmers[i]), len(kmers[j])))
        if shared > threshold:
            parent[root(i)] = root(j)
    return np.unique([root(i) for i in range(len(kmers))], return_inverse=True)[1]


def protein_folds(clusters, lengths, n_folds, seed):
    """Fold ``0..n_folds-1`` of every protein; a cluster stays in one fold.

    Clusters, in a seeded random order, go one by one to the fold with the
    fewest residues so far.
    """
    order = np.random.default_rng(seed).permutation(clusters.max() + 1)
    size = np.bincount(clusters, weights=lengths)
    fold_of_cluster = np.empty(order.size, dtype=np.int64)
    load = np.zeros(n_folds)
    for c in order:
        fold_of_cluster[c] = int(np.argmin(load))
        load[fold_of_cluster[c]] += size[c]
    return fold_of_cluster[clusters]


def subset(X, y, lengths, mask):
    """Rows of the proteins selected by ``mask``."""
    rows = np.repeat(mask, lengths)
    return X[rows], y[rows], lengths[mask]


def decoded(margins, lengths, params, decode):
    """Labels from raw margins and transitions, by Viterbi or by marginals."""
    args = (margins, lengths, params.transitions, params.start, params.end)
    if decode == "viterbi":
        return sb.inference.viterbi(*args)
    return sb.inference.forward_backward(*args)[1].argmax(axis=1)


class Accuracies:
    """Custom metric: token accuracy with both decodings, under the current transitions."""

    def __init__(self, obj):
        self.obj = obj

    def __call__(self, predt, dmat):
        batch = self.obj.batch(dmat)
        margins = np.asarray(predt, dtype=np.float64).reshape(batch.labels.size, -1)
        return [
            (f"acc-{d}", float(np.mean(decoded(margins, batch.lengths, self.obj.params, d)
                                       == batch.labels)))
            for d in DECODES
        ]


def make_objective(mode, config, threads):
    """xgboost parameters and the CRF objective of one grid entry."""
    tree = {k: v for k, v in config.items() if k != "crf"}
    params = sb.xgb_params(len(PROTEIN_LABELS), nthread=threads, **tree)
    return params, sb.crf_objective(len(PROTEIN_LABELS), mode=mode, **config.get("crf", {}))


def train(mode, config, dtrain, rounds, threads):
    """Train one booster; returns it and the seconds of the training call."""
    params, obj = make_objective(mode, config, threads)
    t0 = time.perf_counter()
    booster = xgb.train(params, dtrain, num_boost_round=rounds, obj=obj,
                        callbacks=[obj.callback()])
    return booster, time.perf_counter() - t0


def hits(booster, dtest, y):
    """Whether each residue of ``dtest`` is labelled right, ``{decode: (n,) bool}``."""
    return {d: sb.predict(booster, dtest, decode=d) == y for d in DECODES}


def protein_bootstrap(correct, lengths, seed=0, n_boot=2000):
    """95% interval of the accuracy over test sets of resampled whole proteins."""
    starts = np.concatenate(([0], np.cumsum(lengths)[:-1]))
    per_protein = np.add.reduceat(correct.astype(np.float64), starts)
    rng = np.random.default_rng(seed)
    pick = rng.integers(0, lengths.size, size=(n_boot, lengths.size))
    acc = per_protein[pick].sum(axis=1) / lengths[pick].sum(axis=1)
    return np.percentile(acc, [2.5, 97.5])


def crfsuite_sequences(W, lengths, names):
    """sklearn-crfsuite input: per protein, per residue, its non-zero window indicators."""
    rows = [{"bias": 1.0, **{names[j]: 1.0 for j in np.flatnonzero(r)}} for r in W]
    offsets = np.concatenate(([0], np.cumsum(lengths)))
    return [rows[a:b] for a, b in zip(offsets[:-1], offsets[1:])]


def crfsuite_labels(y, lengths):
    names = np.array(PROTEIN_LABELS)[y]
    offsets = np.concatenate(([0], np.cumsum(lengths)))
    return [list(names[a:b]) for a, b in zip(offsets[:-1], offsets[1:])]


def crfsuite_predict(crf, sequences, decode):
    """Flat label indices from crfsuite's Viterbi or its marginals."""
    if decode == "viterbi":
        labels = np.concatenate(crf.predict(sequences))
    else:
        marg = crf.predict_marginals(sequences)
        labels = np.array([max(m, key=m.get) for seq in marg for m in seq])
    return np.searchsorted(np.array(PROTEIN_LABELS), labels)


def crfsuite_fit(config, sequences, labels, max_iterations):
    import sklearn_crfsuite

    crf = sklearn_crfsuite.CRF(
        algorithm="lbfgs", max_iterations=max_iterations, all_possible_transitions=True, **config
    )
    t0 = time.perf_counter()
    crf.fit(sequences, labels)
    return crf, time.perf_counter() - t0


def run_crfsuite(data, names, args):
    """Cross-validated grid over (c1, c2), then a refit on all training proteins."""
    (W, y, lengths), (Wt, yt, lt), folds = data
    scores = []
    for config in CRFSUITE_GRID:
        acc = {d: 0.0 for d in DECODES}
        for f in range(args.folds):
            sub = subset(W, y, lengths, folds != f)
            held = subset(W, y, lengths, folds == f)
            crf, _ = crfsuite_fit(config, crfsuite_sequences(sub[0], sub[2], names),
                                  crfsuite_labels(sub[1], sub[2]), args.crfsuite_iterations)
            seq_held = crfsuite_sequences(held[0], held[2], names)
            for d in DECODES:
                acc[d] += np.mean(crfsuite_predict(crf, seq_held, d) == held[1]) / args.folds
        print(f"  crfsuite {config}: CV {acc}", flush=True)
        scores.append((config, acc))
    seq_all, lab_all = crfsuite_sequences(W, lengths, names), crfsuite_labels(y, lengths)
    seq_test = crfsuite_sequences(Wt, lt, names)
    rows = []
    for d in DECODES:
        config, acc = max(scores, key=lambda s: s[1][d])
        crf, seconds = crfsuite_fit(config, seq_all, lab_all, args.crfsuite_iterations)
        correct = crfsuite_predict(crf, seq_test, d) == yt
        rows.append(result_row(CRFSUITE_NAME, d, config,
                               args.crfsuite_iterations, acc[d], correct, lt, seconds))
    return rows


def result_row(method, decode, config, rounds, cv, correct, lengths, seconds):
    low, high = protein_bootstrap(correct, lengths)
    return {
        "method": method,
        "decode": decode,
        "params": json.dumps(config, sort_keys=True),
        "rounds": int(rounds),
        "cv_accuracy": round(100 * cv, 2),
        "test_accuracy": round(100 * float(correct.mean()), 2),
        "test_ci_low": round(100 * low, 1),
        "test_ci_high": round(100 * high, 1),
        "train_seconds": round(seconds, 1),
    }


def cross_validate(mode, config, data, args):
    """Mean held-out accuracy per round over the folds, ``{decode: (rounds,) array}``.

    The folds' boosters advance in lockstep, one round each, so the mean
    curve is known every round; training stops once neither decoding's mean
    has improved for ``--patience`` rounds.
    """
    (W, y, lengths), _, folds = data
    runs = []
    for f in range(args.folds):
        sub = subset(W, y, lengths, folds != f)
        held = subset(W, y, lengths, folds == f)
        dsub = xgb.DMatrix(sub[0], label=sub[1], group=sub[2])
        dheld = xgb.DMatrix(held[0], label=held[1], group=held[2])
        params, obj = make_objective(mode, config, args.threads)
        runs.append((xgb.Booster(params, [dsub, dheld]), obj, dsub, dheld))
    curves = {d: [] for d in DECODES}
    for i in range(args.max_rounds):
        mean = dict.fromkeys(DECODES, 0.0)
        for booster, obj, dsub, dheld in runs:
            booster.update(dsub, i, fobj=obj)
            for name, acc in Accuracies(obj)(booster.predict(dheld, output_margin=True), dheld):
                mean[name.removeprefix("acc-")] += acc / len(runs)
        for d in DECODES:
            curves[d].append(mean[d])
        if all(i - int(np.argmax(c)) >= args.patience for c in curves.values()):
            break
    return {d: np.asarray(c) for d, c in curves.items()}


def run_mode(mode, data, args):
    """Cross-validated grid search, then one final fit per decoding."""
    (W, y, lengths), (Wt, yt, lt), _ = data
    choices = []
    for config in GRIDS[mode]:
        t0 = time.perf_counter()
        curves = cross_validate(mode, config, data, args)
        summary = {d: (int(np.argmax(c)) + 1, float(c.max())) for d, c in curves.items()}
        print(f"  {mode} {config}: {len(curves['viterbi'])} rounds, {time.perf_counter() - t0:.0f} "
              f"s; best (rounds, CV acc) {summary}", flush=True)
        choices.append((config, summary))
    dtrain = xgb.DMatrix(W, label=y, group=lengths)
    dtest = xgb.DMatrix(Wt, label=yt, group=lt)
    rows, fitted = [], {}
    for d in DECODES:
        config, summary = max(choices, key=lambda c: c[1][d][1])
        rounds, cv_acc = summary[d]
        key = (json.dumps(config, sort_keys=True), rounds)
        if key not in fitted:
            booster, seconds = train(mode, config, dtrain, rounds, args.threads)
            fitted[key] = (hits(booster, dtest, yt), seconds)
        correct, seconds = fitted[key]
        row = result_row(mode, d, config, rounds, cv_acc, correct[d], lt, seconds)
        peak_round, peak = test_peak(mode, config, dtrain, dtest, d, args)
        rows.append({**row, "test_peak": round(100 * peak, 2), "peak_round": peak_round})
    return rows


def test_peak(mode, config, dtrain, dtest, decode, args):
    """The paper's figure: the chosen setting trained on all training proteins for
    ``--max-rounds``, its best test accuracy over the rounds (a choice made on the test set).

    Returns
    -------
    (int, float)
        The round (1-based) and the accuracy.
    """
    params, obj = make_objective(mode, config, args.threads)
    curve = {}
    xgb.train({**params, "disable_default_eval_metric": 1}, dtrain,
              num_boost_round=args.max_rounds, obj=obj, evals=[(dtest, "test")],
              custom_metric=Accuracies(obj), evals_result=curve, verbose_eval=False,
              callbacks=[obj.callback()])  # fmt: skip
    acc = np.asarray(curve["test"][f"acc-{decode}"])
    return int(np.argmax(acc)) + 1, float(acc.max())


def markdown(rows):
    lines = [
        "| method | decode | chosen parameters | rounds | CV acc. (%) | test acc. (%) | "
        "95% interval | train s | peak test acc. over rounds (round) |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    for r in rows:
        peak = f"{float(r['test_peak']):.2f} ({r['peak_round']})" if r.get("test_peak") else ""
        lines.append(
            f"| {r['method']} | {r['decode']} | `{r['params']}` | {r['rounds']} | "
            f"{r['cv_accuracy']:.2f} | {r['test_accuracy']:.2f} | "
            f"{r['test_ci_low']:.1f}-{r['test_ci_high']:.1f} | {r['train_seconds']:.1f} | {peak} |"
        )
    for name, acc in PUBLISHED:
        lines.append(f"| {name} | published | | | | | | | {acc:.2f} |")
    return "\n".join(lines)


def write_csv(rows, path):
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "w", newline="") as handle:
        writer = csv.DictWriter(handle, fieldnames=list(dict.fromkeys(k for r in rows for k in r)))
        writer.writeheader()
        writer.writerows(rows)


CRFSUITE_NAME = "linear CRF (sklearn-crfsuite)"


def earlier_rows(path, methods):
    """Rows of ``path`` (if it exists) for the methods this run does not redo."""
    if not path.exists():
        return []
    redo = {CRFSUITE_NAME if m == "crfsuite" else m for m in methods}
    with open(path, newline="") as handle:
        rows = [r for r in csv.DictReader(handle) if r["method"] not in redo]
    numeric = ("cv_accuracy", "test_accuracy", "test_ci_low", "test_ci_high", "train_seconds")
    for r in rows:
        r.update({k: float(r[k]) for k in numeric}, rounds=int(r["rounds"]))
    return rows


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--data-dir", required=True, help="folder with protein-secondary-structure.*")
    ap.add_argument("--half-width", type=int, default=5)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--max-rounds", type=int, default=600)
    ap.add_argument("--patience", type=int, default=100,
                    help="stop a CV run once no mean held-out accuracy improved for this many "
                    "rounds")
    ap.add_argument("--folds", type=int, default=3)
    ap.add_argument("--homology", type=float, default=0.1,
                    help="share of 4-mers above which two training proteins share a CV fold")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--methods", nargs="+", default=["logitboost", "treecrf", "gbcrf", "crfsuite"],
                    choices=["logitboost", "treecrf", "gbcrf", "crfsuite"])
    ap.add_argument("--crfsuite-iterations", type=int, default=300)
    ap.add_argument("--out", type=Path, default=RESULTS / "protein_qs.csv")
    args = ap.parse_args()

    X, y, lengths, residues = load_part(args.data_dir, "train", with_residues=True)
    Xt, yt, lt = load_part(args.data_dir, "test")
    W, Wt = windowed(X, lengths, args.half_width), windowed(Xt, lt, args.half_width)
    clusters = homology_clusters(residues, lengths, args.homology)
    folds = protein_folds(clusters, lengths, args.folds, args.seed)
    data = ((W, y, lengths), (Wt, yt, lt), folds)
    print(
        f"data: {lengths.size} training proteins ({y.size} residues; {args.folds}-fold internal "
        f"CV for selection over {clusters.max() + 1} homology clusters, fold sizes "
        f"{np.bincount(folds, weights=lengths).astype(int).tolist()} residues), {lt.size} test "
        f"proteins ({yt.size} residues); window "
        f"{2 * args.half_width + 1}, {W.shape[1]} features; nthread={args.threads}"
    )
    print(machine_line(), flush=True)

    rows = earlier_rows(args.out, args.methods)
    for method in args.methods:
        if method == "crfsuite":
            names = SlidingWindow(args.half_width).fit(X).get_feature_names_out(list(AMINO_ACIDS))
            rows += run_crfsuite(data, names, args)
        else:
            rows += run_mode(method, data, args)
        write_csv(rows, args.out)
    print()
    print(markdown(rows))


if __name__ == "__main__":
    main()
