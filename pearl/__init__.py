"""PEARL: adaptive prefill-decode execution with elasticity for agentic RL."""

__version__ = "0.1.0"
