"""Puts tests/support, the one home of the test fixtures, first on sys.path. Each test module imports this before
any fixture, so ctest and a direct run (cd tests/slurm && python3 -m unittest test_x) find them alike. Not
PYTHONPATH: that would reach the workers' environments, which the tests read. A path, nothing else."""
import os
import sys

SUPPORT = os.path.normpath(os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "support"))
if SUPPORT not in sys.path:
    sys.path.insert(0, SUPPORT)
