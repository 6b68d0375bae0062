#!/usr/bin/env python3
"""Runs tests of a meson build directory without meson: for a machine whose
meson cannot read the build (another version) or lacks it. Reads
BUILD/meson-info/intro-tests.json, runs the chosen suites one test at a time
(each in its own process group, killed at its meson timeout), with the plain
exit-code protocol (0 pass, 77 skip, else fail).

  run_meson_tests.py --build DIR --suite gpu [--suite torch ...]
                     [--match REGEX] [--max-timeout S]
                     [--python PY] [--log FILE] [--json FILE]

Python interpreters in test commands are replaced by --python (default: this
interpreter), so tests written for Debian's python3 run with the machine's
own (e.g. PyTorch 2.x). Exit 0 when nothing failed.
"""
import argparse
import json
import os
import re
import signal
import subprocess
import sys
import time

PYTHON_RE = re.compile(r"python3(\.\d+)?$")
RUNNING = []  # the test process running now, killed if this runner is


def on_term(signum, frame):
    for p in RUNNING:
        try:
            os.killpg(p.pid, signal.SIGKILL)
        except OSError:
            pass
    sys.exit(128 + signum)


def suites_of(t):
    return {s.split(":", 1)[-1] for s in t.get("suite", [])}


def run_one(t, a, log):
    cmd = list(t["cmd"])
    if PYTHON_RE.search(os.path.basename(cmd[0])):
        cmd[0] = a.python
    env = dict(os.environ)
    env.update(t.get("env") or {})
    libdir = os.path.join(a.build, "worker")
    env["LD_LIBRARY_PATH"] = libdir + ":" + env.get("LD_LIBRARY_PATH", "")
    timeout = (t.get("timeout") or 30) * a.timeout_scale
    if a.max_timeout:
        timeout = min(timeout, a.max_timeout)
    t0 = time.monotonic()
    try:
        p = subprocess.Popen(cmd, cwd=t.get("workdir") or a.build, env=env,
                             stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                             stdin=subprocess.DEVNULL, start_new_session=True)
    except OSError as e:
        return "FAIL", 0.0, "cannot start %s: %s" % (cmd[0], e)
    RUNNING.append(p)
    try:
        out, _ = p.communicate(timeout=timeout)
        rc = p.returncode
    except subprocess.TimeoutExpired:
        os.killpg(p.pid, signal.SIGKILL)
        out, _ = p.communicate()
        rc = None
    finally:
        RUNNING.remove(p)
    try:  # whatever the test left in its process group
        os.killpg(p.pid, signal.SIGKILL)
    except OSError:
        pass
    dt = time.monotonic() - t0
    out = out.decode(errors="replace")
    if rc is None:
        res = "TIMEOUT"
    elif rc == 0:
        res = "OK"
    elif rc == 77:
        res = "SKIP"
    else:
        res = "FAIL"
    log.write("=" * 78 + "\n%s %s (%.1f s, exit %s)\ncommand: %s\n%s\n" % (
        res, t["name"], dt, rc, " ".join(cmd), out))
    log.flush()
    return res, dt, out


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--build", required=True)
    ap.add_argument("--suite", action="append", required=True)
    ap.add_argument("--python", default=sys.executable)
    ap.add_argument("--log", default="/dev/stdout")
    ap.add_argument("--json")
    ap.add_argument("--timeout-scale", type=float, default=1.0)
    ap.add_argument("--max-timeout", type=float)
    ap.add_argument("--match", help="only tests whose name matches this regex")
    a = ap.parse_args()
    a.build = os.path.abspath(a.build)
    with open(os.path.join(a.build, "meson-info", "intro-tests.json")) as f:
        tests = [t for t in json.load(f) if suites_of(t) & set(a.suite)
                 and (not a.match or re.search(a.match, t["name"]))]
    signal.signal(signal.SIGTERM, on_term)
    signal.signal(signal.SIGINT, on_term)
    results, counts = [], {}
    with open(a.log, "a") as log:
        for t in tests:
            res, dt, out = run_one(t, a, log)
            tail = out.strip().splitlines()[-1:] if out.strip() else [""]
            results.append({"name": t["name"], "suite": sorted(suites_of(t)), "result": res,
                            "seconds": round(dt, 2), "last_line": tail[0][:300]})
            counts[res] = counts.get(res, 0) + 1
            print("%-8s %-32s %7.1f s  %s" % (res, t["name"], dt, tail[0][:100]), flush=True)
            if a.json:  # after every test, so a runner cut short leaves its results
                with open(a.json, "w") as f:
                    json.dump({"suites": a.suite, "counts": counts, "tests": results,
                               "complete": len(results) == len(tests)}, f, indent=1)
    print("suites %s: %s" % (",".join(a.suite), ", ".join(
        "%d %s" % (n, k) for k, n in sorted(counts.items())) or "no tests"))
    return 1 if counts.get("FAIL") or counts.get("TIMEOUT") else 0


if __name__ == "__main__":
    sys.exit(main())
