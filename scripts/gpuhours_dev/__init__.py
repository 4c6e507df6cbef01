"""Development-only tooling for gpuhours, kept out of the installed package.

Importable by `scripts/*.py` (their directory is on sys.path when run) and by the tests
(`pythonpath = ["scripts"]` in pyproject's pytest settings):

- `gpuhours_dev.trace_matrix`: the trace-vs-analytic matrix behind docs/trace_accuracy.md
- `gpuhours_dev.validation`: the estimator against published measurements (docs/validation.md)
"""
