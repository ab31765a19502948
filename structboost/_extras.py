"""Optional dependencies (the package's extras), checked before any work starts."""

import importlib.util

from ._version import DISTRIBUTION


def require(module, extra, what):
    """Raise ``ImportError`` with the install command when ``module`` is missing.

    Parameters
    ----------
    module : str
        Import name, e.g. ``"lightgbm"``.
    extra : str
        The structboost extra that installs it, e.g. ``"lightgbm"``.
    what : str
        What needs it, for the message (``"LGBMCRFClassifier"``, ``"structboost demo"``).
    """
    if importlib.util.find_spec(module) is None:
        raise ImportError(
            f"{what} needs {module}, which is not installed: "
            f'pip install "{DISTRIBUTION}[{extra}]"'
        )


def installed(module):
    """Whether ``module`` can be imported (an import hook that refuses it counts as not)."""
    try:
        return importlib.util.find_spec(module) is not None
    except ImportError:
        return False


def require_xgboost():
    """Raise ``ImportError`` naming both XGBoost extras when XGBoost is missing.

    XGBoost is not a hard dependency, so that the CPU-only wheel
    (``xgboost-cpu``, without NCCL) can stand in for the full one; either
    provides ``import xgboost``.
    """
    if not installed("xgboost"):
        raise ImportError(
            f'structboost needs XGBoost, which is not installed: pip install "{DISTRIBUTION}'
            f'[xgboost]", or "{DISTRIBUTION}[xgboost-cpu]" for the CPU-only wheel (no GPU '
            "training, ~470 MB smaller)"
        )


def require_gpu(what):
    """Raise ``ValueError`` saying what to install when numba has no usable CUDA GPU.

    Called before any work starts, so that a GPU request fails at once, not
    inside a kernel launch after XGBoost fell back to the CPU. numba's CUDA
    simulator (``NUMBA_ENABLE_CUDASIM=1``) counts as a GPU.

    Parameters
    ----------
    what : str
        What asked for the GPU, for the message (``'crf_objective(device="cuda")'``).
    """
    from numba import config, cuda

    if config.ENABLE_CUDASIM or cuda.is_available():
        return
    missing = [
        name
        for module, name in (("numba_cuda", "numba-cuda"), ("cupy", "CuPy"))
        if importlib.util.find_spec(module) is None
    ]
    found = f"{' and '.join(missing)} not installed" if missing else "no CUDA driver or GPU found"
    raise ValueError(
        f"{what} needs a CUDA GPU that numba can use ({found}). Install the GPU extra, "
        f'pip install "{DISTRIBUTION}[gpu]" (numba-cuda and CuPy for CUDA 13; for CUDA 12: '
        '"numba-cuda[cu12]" and cupy-cuda12x), an NVIDIA driver, and an XGBoost built with '
        'CUDA (the xgboost wheel, not xgboost-cpu); or use device="cpu".'
    )
