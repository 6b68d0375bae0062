#!/usr/bin/env python3
"""DDP_TIMEOUT_MS as ddp_init reads it, under the real ddplaunch: with a unit
it means what it says ("2s": a stalled rank is reported after 2000 ms, not
2 ms; "5min" is accepted), and a value that is not a duration ("-5", "abc",
"1.5s") makes every rank refuse at once, naming the variable, instead of
being read as 30 days or as the default.

  timeout_env.py --ddplaunch PATH --coll-check PATH
Exit 0 pass, 1 fail.
"""
import argparse
import os
import subprocess
import sys
import time


def launch(args, value, mode, timeout=60):
    env = dict(os.environ, DDP_BACKEND="cpu", DDP_TIMEOUT_MS=value)
    cmd = [args.ddplaunch, "--standalone", "--nproc_per_node=2", args.coll_check] + mode
    t0 = time.monotonic()
    try:
        p = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                           env=env, timeout=timeout)
    except subprocess.TimeoutExpired as e:
        out = e.stdout.decode() if isinstance(e.stdout, bytes) else (e.stdout or "")
        raise SystemExit("FAIL: DDP_TIMEOUT_MS=%s: still running after %d s:\n%s"
                         % (value, timeout, out[-2000:]))
    return p.returncode, p.stdout, time.monotonic() - t0


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--ddplaunch", required=True)
    ap.add_argument("--coll-check", required=True)
    args = ap.parse_args()
    fails = []

    rc, out, wall = launch(args, "2s", ["stall", "1"])
    if "timed out after 2000 ms" not in out or wall < 1.9:
        fails.append("DDP_TIMEOUT_MS=2s: no 2000 ms timeout (%.2f s):\n%s" % (wall, out[-2000:]))
    print("2s: the stalled rank was reported after %.2f s" % wall)

    rc, out, wall = launch(args, "5min", [])
    if rc != 0:
        fails.append("DDP_TIMEOUT_MS=5min: the collectives failed (%d):\n%s" % (rc, out[-2000:]))

    for value in ("-5", "abc", "1.5s", "0", "5 s"):
        rc, out, wall = launch(args, value, ["stall", "1"], timeout=30)
        said = "DDP_TIMEOUT_MS='%s' is not a duration" % value
        if rc == 0 or said not in out or wall > 20:
            fails.append("DDP_TIMEOUT_MS=%s was not refused at once (rc %d, %.2f s):\n%s"
                         % (value, rc, wall, out[-2000:]))
        else:
            print("%r: refused in %.2f s" % (value, wall))
    for f in fails:
        print("FAIL: " + f)
    return 1 if fails else 0


if __name__ == "__main__":
    sys.exit(main())
