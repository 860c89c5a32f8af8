"""harnevo: find agent harnesses by evolution."""

__version__ = "0.1.0"
