"""Distributed training on Dask: ``DaskXGBCRFClassifier`` on a local cluster.

Each Dask worker holds whole sequences (partitions must not split one; a split
sequence raises, naming it). Every round each worker runs forward-backward on
its own sequences and the workers sum their transition statistics in one
allreduce, so the model is the one a single process would train. The same code
runs on any cluster Dask deploys on: only the ``Client`` address changes.

Needs the ``dask`` extra (``pip install "structboost-crf[dask]"``); without it
the script says so and exits cleanly::

    python examples/dask_training.py
"""

import logging
import sys
import time


def main():
    try:
        import dask.dataframe as dd
        from distributed import Client, LocalCluster
    except ImportError:
        print("dask and distributed are not installed: skipping "
              '(pip install "structboost-crf[dask]")')
        return

    import numpy as np
    import pandas as pd

    from structboost.datasets import make_hmm_sequences
    from structboost.estimators.dask import DaskXGBCRFClassifier

    # One row per token with a "sentence_id" column; 10 partitions of whole sentences.
    X, y, lengths = make_hmm_sequences(
        n_sequences=400, length=(10, 30), stay=0.85, emission=0.6, random_state=0
    )
    tokens = pd.DataFrame(X, columns=[f"x{i}" for i in range(X.shape[1])])
    tokens["sentence_id"] = np.repeat(np.arange(len(lengths)), lengths)
    tokens["label"] = np.array(["B", "I", "O"])[y]
    first_rows = np.searchsorted(tokens["sentence_id"].to_numpy(), np.arange(0, 400, 40))
    parts = [tokens.iloc[a:b] for a, b in zip(first_rows, list(first_rows[1:]) + [len(tokens)])]

    # Two single-threaded worker processes on this machine; Dask's own notices hidden.
    logging.getLogger("distributed").setLevel(logging.ERROR)
    with LocalCluster(n_workers=2, threads_per_worker=1, dashboard_address=":0",
                      silence_logs=logging.ERROR) as cluster, \
            Client(cluster) as client:
        frame = dd.concat([dd.from_pandas(p, npartitions=1) for p in parts]).persist()
        train, valid, test = frame.partitions[:6], frame.partitions[6:8], frame.partitions[8:]

        clf = DaskXGBCRFClassifier(n_estimators=40, max_depth=4, early_stopping_rounds=5)
        start = time.perf_counter()
        clf.fit(train.drop(columns="label"), train["label"], groups="sentence_id",
                eval_set=[(valid.drop(columns="label"), valid["label"], "sentence_id")],
                verbose=False)
        print(f"trained on {len(client.scheduler_info()['workers'])} workers: "
              f"{clf.best_iteration + 1} rounds kept, {time.perf_counter() - start:.1f} s")

        features = test.drop(columns="label")
        labels = clf.predict(features, groups="sentence_id")  # a dask Series, partitioned as test
        accuracy = (labels.compute().to_numpy() == test["label"].compute().to_numpy()).mean()
        print(f"test token accuracy: {accuracy:.3f}")
        print("transition scores (row label followed by column label):")
        print(clf.transitions_.round(2).to_string())
    return 0


if __name__ == "__main__":
    sys.exit(main())
