"""The one version of liger_cpp (pyproject.toml reads it from here)."""

__version__ = "0.2.0"
