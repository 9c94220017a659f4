"""A script whose import fails at start-up, before any handler could write an error file: what users see
when the interpreter that runs it lacks a package (torch under a pyenv or venv shim)."""
import ddprun_test_no_such_module  # noqa: F401

print("unreachable")
