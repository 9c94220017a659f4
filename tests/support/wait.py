"""The one way a test waits for something to happen: wait_until(predicate, what, timeout).

A test names what it waits for and the bound it gives it; the bound is the program's own (a timeout it was
given, plus the capture and teardown bounds of common/timeouts.hpp), with room for a loaded machine. A hand loop
on time.monotonic() or a "by now" sleep before an assertion becomes a call to this (docs/LAYOUT.md, "The suite
under load"). No side effect on import."""
import time


def wait_until(predicate, what, timeout, interval=0.01):
    """Calls `predicate()` until it returns something true, `interval` s apart, and returns that value. After
    `timeout` s (and one last call) fails the test: AssertionError "timed out after TIMEOUT s waiting for WHAT".
    `what`: the words, or a function that returns them, called only then, so that they can show the state at
    the end (output, events, the processes still alive). An exception from `predicate` goes to the caller."""
    deadline = time.monotonic() + timeout
    while True:
        value = predicate()
        if value:
            return value
        if time.monotonic() >= deadline:
            said = what() if callable(what) else what
            raise AssertionError(f"timed out after {timeout:g} s waiting for {said}")
        time.sleep(interval)
