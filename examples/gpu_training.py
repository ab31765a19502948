"""Training on an NVIDIA GPU: the CRF objective next to XGBoost's GPU trees.

With ``device="cuda"`` XGBoost grows its trees on the GPU and the CRF objective
runs its round there too (forward-backward, the Hessian bound, gradients and the
transition step as CUDA kernels), handing XGBoost device gradients. The result
is the model the CPU would train, up to floating-point rounding: the GPU tags
are compared with the CPU's below.

Needs a CUDA GPU and the ``gpu`` extra (``pip install "structboost-crf[gpu]"``);
without them the script says so and exits cleanly::

    python examples/gpu_training.py
"""

import time


def gpu_available():
    """True when numba can reach a CUDA device (never raises)."""
    try:
        from numba import cuda

        return bool(cuda.is_available())
    except Exception:  # numba-cuda missing or a broken driver: no GPU for us
        return False


def main():
    if not gpu_available():
        print('no usable CUDA GPU: skipping (needs a GPU and pip install "structboost-crf[gpu]")')
        return

    import numpy as np
    import xgboost as xgb

    import structboost as sb
    from structboost.datasets import make_hmm_sequences

    K = 5
    X, y, lengths = make_hmm_sequences(
        n_sequences=5000, length=(10, 30), n_labels=K, n_observations=25, stay=0.85,
        emission=0.6, random_state=0,
    )
    Xt, yt, lengths_t = make_hmm_sequences(
        n_sequences=500, length=(10, 30), n_labels=K, n_observations=25, stay=0.85,
        emission=0.6, random_state=1,
    )
    print(f"{X.shape[0]} training rows in {len(lengths)} sequences")

    # The estimator: one keyword moves trees and objective to the GPU.
    for device in ("cpu", "cuda"):
        clf = sb.XGBCRFClassifier(n_estimators=30, max_depth=6, device=device)
        start = time.perf_counter()
        clf.fit(X, y, lengths=lengths, verbose=False)
        seconds = time.perf_counter() - start
        pred = clf.predict(Xt, lengths=lengths_t)
        print(f"XGBCRFClassifier(device={device!r}): {seconds:.1f} s, "
              f"test accuracy {np.mean(pred == yt):.3f}")

    # The functional API: the objective's round on the GPU inside xgboost.train.
    dtrain = xgb.DMatrix(X, label=y, group=lengths)
    obj = sb.crf_objective(num_labels=K, device="cuda")
    booster = xgb.train({**sb.xgb_params(K), "device": "cuda", "max_depth": 6}, dtrain,
                        num_boost_round=30, obj=obj, callbacks=[obj.callback()])
    dtest = xgb.DMatrix(Xt, group=lengths_t)
    accuracy = np.mean(sb.predict(booster, dtest) == yt)
    print(f"xgboost.train on the GPU: test accuracy {accuracy:.3f}")


if __name__ == "__main__":
    main()
