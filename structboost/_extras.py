"""Optional dependencies (the package's extras), checked before any work starts."""

import importlib.util


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
            f'pip install "structboost[{extra}]"'
        )
