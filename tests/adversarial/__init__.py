"""Regression tests for the adversarial probe of issue 15, one module per heading of the issue."""
