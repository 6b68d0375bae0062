"""The Python tests' one wait for a condition that no line or event
announces (a file appears, a process is gone): checks `predicate` every
20 ms until it returns something true, which is returned, or the deadline
passes, which fails the test naming `what`. Waits that a line announces
use the line instead (mnlib.Proc.wait_line)."""
import time


def wait_for(predicate, timeout=20.0, what="condition"):
    deadline = time.monotonic() + timeout
    while True:
        value = predicate()
        if value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError("timed out after %.0f s waiting for %s" % (timeout, what))
        time.sleep(0.02)
