"""warploom's version, in a module of its own: the package's `__version__`, and part of every autotune cache key
(tune/key.py), which must not import the package's API to read it."""

__version__ = "0.1.0"
