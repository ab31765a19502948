"""Optional dependencies (the package's extras), checked before any work starts."""

import importlib.util

from ._version import DISTRIBUTION


def require(module, extra, what):
    """Raise ``ImportError`` with the install command (the ``extra``) when ``module`` is missing.

    ``what`` names what needs it in the message (``"LGBMCRFClassifier"``).
    """
    if importlib.util.find_spec(module) is None:
        raise ImportError(f"{what} needs {module}, which is not installed: "
                          f'pip install "{DISTRIBUTION}[{extra}]"')


def installed(module):
    """Whether ``module`` can be imported (an import hook that refuses it counts as not)."""
    try:
        return importlib.util.find_spec(module) is not None
    except ImportError:
        return False


def require_xgboost():
    """Raise ``ImportError`` naming both XGBoost extras (full and CPU-only) when it is missing."""
    if not installed("xgboost"):
        raise ImportError(
            f'structboost needs XGBoost, which is not installed: pip install "{DISTRIBUTION}'
            f'[xgboost]", or "{DISTRIBUTION}[xgboost-cpu]" for the CPU-only wheel (no GPU '
            "training, ~470 MB smaller)"
        )


def require_gpu(what):
    """Raise ``ValueError`` saying what to install when numba has no usable CUDA GPU.

    ``what`` names what asked for it in the message; numba's CUDA simulator counts as a GPU.
    """
    from numba import config, cuda

    if config.ENABLE_CUDASIM or cuda.is_available():
        return
    missing = [name for module, name in (("numba_cuda", "numba-cuda"), ("cupy", "CuPy"))
               if importlib.util.find_spec(module) is None]
    found = f"{' and '.join(missing)} not installed" if missing else "no CUDA driver or GPU found"
    raise ValueError(
        f"{what} needs a CUDA GPU that numba can use ({found}). Install the GPU extra, "
        f'pip install "{DISTRIBUTION}[gpu]" (numba-cuda and CuPy for CUDA 13; for CUDA 12: '
        '"numba-cuda[cu12]" and cupy-cuda12x), an NVIDIA driver, and an XGBoost built with '
        'CUDA (the xgboost wheel, not xgboost-cpu); or use device="cpu".'
    )
