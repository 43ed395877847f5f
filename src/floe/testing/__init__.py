"""Throwaway servers for Floe's tests and benchmarks (never used by ``floe up``).

They live in the package, not under ``tests/``, because both the test suite and the
``benchmarks`` harness start them, and only ``src/`` is on both of their import paths.
Each module imports its heavy tool lazily and says how to install it when it is missing.
"""
