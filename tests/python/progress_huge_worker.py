"""A worker for test_progress.py's "huge" mode (run by ddplaunch, no torch).

argv: PROGRESS_PY SYNC_DIR. Maps its page (no step yet), makes
SYNC_DIR/page and waits for SYNC_DIR/scraped0; writes three steps of 10, 20 and 24 ms on its
progress page, makes SYNC_DIR/steps and waits (up to 60 s) for the test to
make SYNC_DIR/scraped; then writes what a buggy or hostile program could:
a step of 2^63, then raw stores of step 2^64-1 and a steps_total far ahead
of the steps it counted, and ends after the agent had time to read them
(its reads are every 0.2 s; nothing here waits on them, the exit is the
point). Prints "huge worker: done" last: ddplaunch must forward it.
"""
import importlib.util
import os
import sys
import time

spec = importlib.util.spec_from_file_location("ddp_progress_mirror", sys.argv[1])
pr = importlib.util.module_from_spec(spec)
spec.loader.exec_module(pr)
sync = sys.argv[2]
page = pr.shared()
if page is None:
    sys.exit("huge worker: no progress page (DDP_PROGRESS_FILE)")


def wait_file(name):
    end = time.monotonic() + 60
    while not os.path.exists(os.path.join(sync, name)):
        if time.monotonic() > end:
            sys.exit("huge worker: the test never made " + name)
        time.sleep(0.05)


# a page with no step yet: the test scrapes it (when it scrapes) first
open(os.path.join(sync, "page"), "w").close()
wait_file("scraped0")
for i, ms in enumerate((10, 20, 24), 1):
    page.step(i, ms * 1000000, ms * 1000000, 0, 0)
open(os.path.join(sync, "steps"), "w").close()
wait_file("scraped")
page.step(1 << 63, 1000000, 1000000, 0, 0)
time.sleep(0.5)
with page._lock:
    page._store(time.monotonic_ns(), step=(1 << 64) - 1, steps_total=1 << 62,
                step_ns_sum=(1 << 64) - 1)
time.sleep(0.5)
print("huge worker: done", flush=True)
