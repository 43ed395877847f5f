"""Floe benchmarks (not tests): ``python -m benchmarks broker [--quick]``."""
