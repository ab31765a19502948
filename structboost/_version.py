"""The package version (one place; pyproject.toml repeats it)."""

__version__ = "0.1.0.dev0"
#: The name to install from the package index (the import name is ``structboost``).
DISTRIBUTION = "structboost-crf"
