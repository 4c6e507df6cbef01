"""gpuhours: predict, check and track the compute budget of ML training projects.

The analytic path (`gpuhours.estimate`, `gpuhours.catalog`) never imports torch.
"""

__version__ = "0.1.0"
