"""jobkit's benchmark harness: `python -m bench` (see docs/BENCHMARKS.md and bench/__main__.py)."""
