#!/usr/bin/env python3
"""Start N ranks of a libddp program without ddplaunch, so a test can let a
rank die and watch what the survivors do (ddplaunch would stop them).

The store is ddp-rdzvd on 127.0.0.1 port 0 (the port it prints), reached through
MASTER_ADDR/MASTER_PORT (--store tcp, env://) or a tcp://HOST:PORT init
method (--store tcp-url), or a file store (--store file, file://). Every process started here is killed by PID at the end.

Checks (exit 0 when all hold):
  --expect ok        every rank exits 0; with --same-digest K, the "digest"
                     line of rank 0 is the same in K consecutive runs
  --expect missing:TEXT  only --start ranks are started; each must exit non-zero
                     within --within seconds with TEXT (e.g. "rank 2 never
                     arrived") in its output
  --expect stall:R   rank R never calls a collective (the program pauses);
                     the others exit 3 within --within seconds saying they
                     timed out, at least one naming rank R; R is then killed
  --expect die:R     rank R is killed by SIGKILL (the program kills itself);
                     every other rank exits with code 3 (its "failed as
                     expected" path) within --within seconds, and its output
                     names a rank and says what happened
  --expect reform:R  rank R is killed by SIGKILL (the program kills itself);
                     every other rank exits 0 (the program checks itself how
                     fast it failed and that it re-formed without R)
"""
import argparse
import os
import re
import select
import signal
import subprocess
import sys
import tempfile
import time


def start_store(rdzvd):
    """ddp-rdzvd on 127.0.0.1, port 0; the port it announces on its standard
    output (a pipe), read as one line within 20 s."""
    proc = subprocess.Popen([rdzvd, "--host", "127.0.0.1", "--port", "0"],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    ready, _, _ = select.select([proc.stdout], [], [], 20)
    line = proc.stdout.readline() if ready else b""
    if line.strip().isdigit():
        return proc, int(line)
    proc.kill()
    sys.exit("ddp-rdzvd announced no port within 20 s: " + proc.stderr.read().decode())


def run_once(args, tmp, run_no):
    store = None
    env = dict(os.environ)
    local = args.local_world or args.nranks
    env.update({"WORLD_SIZE": str(args.nranks), "LOCAL_WORLD_SIZE": str(local),
                "TORCHELASTIC_RUN_ID": "test%d_%d" % (os.getpid(), run_no),
                "DDP_CPU_TRANSPORT": args.transport, "DDP_TIMEOUT_MS": str(args.timeout_ms),
                "DDP_BACKEND": "cpu",
                "OMP_NUM_THREADS": "1"})
    if args.store in ("tcp", "tcp-url"):
        store, port = start_store(args.rdzvd)
        if args.store == "tcp":
            env.update({"MASTER_ADDR": "127.0.0.1", "MASTER_PORT": str(port)})
        else:
            env.pop("MASTER_ADDR", None)
            env.pop("MASTER_PORT", None)
            env["DDP_TEST_INIT_METHOD"] = "tcp://127.0.0.1:%d" % port
    else:
        env["DDP_TEST_INIT_METHOD"] = "file://" + os.path.join(tmp, "store%d" % run_no)
    procs = []
    t0 = time.monotonic()
    try:
        for r in range(args.start if args.start else args.nranks):
            e = dict(env, RANK=str(r), LOCAL_RANK=str(r % local), GROUP_RANK=str(r // local))
            procs.append(subprocess.Popen(args.program, env=e, stdout=subprocess.PIPE,
                                          stderr=subprocess.STDOUT, text=True))
        outs = []
        stalled = procs[args.stalled] if args.stalled >= 0 else None
        for p in procs:
            if p is stalled:
                continue
            left = max(1.0, args.limit - (time.monotonic() - t0))
            try:
                out, _ = p.communicate(timeout=left)
            except subprocess.TimeoutExpired:
                for q in procs:
                    if q.poll() is None:
                        q.kill()
                sys.exit("ranks still running after %.0f s (hang)" % args.limit)
            outs.append((p.returncode, out, time.monotonic() - t0))
        if stalled:
            stalled.kill()
            out, _ = stalled.communicate()
            outs.insert(args.stalled, (stalled.returncode, out, time.monotonic() - t0))
        # Rank 0 names its shared segment /ddp-<pid>-...: it must be gone.
        left = [f for f in os.listdir("/dev/shm") if f.startswith("ddp-%d-" % procs[0].pid)]
        if left:
            sys.exit("shared-memory segment left behind: %s" % left)
        return outs
    finally:
        for p in procs:
            if p.poll() is None:
                p.kill()
                p.wait()
        if store:
            store.send_signal(signal.SIGTERM)
            try:
                store.wait(timeout=10)
            except subprocess.TimeoutExpired:
                store.kill()
                store.wait()


def check_ok(outs):
    digest = None
    for r, (rc, out, _) in enumerate(outs):
        sys.stdout.write("--- rank %d (exit %d)\n%s" % (r, rc, out))
        if rc != 0:
            sys.exit("rank %d exited with %d" % (r, rc))
        m = re.search(r"digest ([0-9a-f]+)", out)
        if m:
            digest = m.group(1)
    return digest


def check_die(outs, dead, within):
    for r, (rc, out, t) in enumerate(outs):
        sys.stdout.write("--- rank %d (exit %d after %.2f s)\n%s" % (r, rc, t, out))
        if r == dead:
            if rc != -signal.SIGKILL:
                sys.exit("rank %d should have been killed by SIGKILL, got %d" % (r, rc))
            continue
        if rc != 3:
            sys.exit("rank %d should have failed cleanly (exit 3), got %d" % (r, rc))
        if t > within:
            sys.exit("rank %d took %.1f s to notice (limit %.1f s)" % (r, t, within))
        if ("rank %d did not report" % dead) not in out:
            sys.exit("rank %d's error does not name the dead rank %d: %r" % (r, dead, out))


def check_reform(outs, dead):
    for r, (rc, out, t) in enumerate(outs):
        sys.stdout.write("--- rank %d (exit %d after %.2f s)\n%s" % (r, rc, t, out))
    for r, (rc, out, t) in enumerate(outs):
        if r == dead and rc != -signal.SIGKILL:
            sys.exit("rank %d should have been killed by SIGKILL, got %d" % (r, rc))
        if r != dead and rc != 0:
            sys.exit("rank %d exited with %d" % (r, rc))


def check_stall(outs, stalled, within):
    for r, (rc, out, t) in enumerate(outs):
        sys.stdout.write("--- rank %d (exit %d after %.2f s)\n%s" % (r, rc, t, out))
        if r == stalled:
            continue
        if rc != 3 or t > within:
            sys.exit("rank %d: expected a clean failure (exit 3) within %.0f s, got %d after"
                     " %.1f s" % (r, within, rc, t))
        if ("rank %d did not report" % stalled) not in out:
            sys.exit("rank %d's error does not name the stalled rank %d" % (r, stalled))
    if not any("timed out" in out for r, (rc, out, t) in enumerate(outs) if r != stalled):
        sys.exit("no survivor says it timed out")


def check_missing(outs, text, within):
    for r, (rc, out, t) in enumerate(outs):
        sys.stdout.write("--- rank %d (exit %d after %.2f s)\n%s" % (r, rc, t, out))
        if rc == 0 or text not in out or t > within:
            sys.exit("rank %d: expected a failure within %.0f s saying %r" % (r, within, text))


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--rdzvd", required=True)
    ap.add_argument("--nranks", type=int, default=2)
    ap.add_argument("--store", choices=["tcp", "tcp-url", "file"], default="tcp")
    ap.add_argument("--transport", choices=["shm", "ring", "hier", "auto"], default="auto")
    ap.add_argument("--timeout-ms", type=int, default=60000)
    ap.add_argument("--limit", type=float, default=120.0)
    ap.add_argument("--expect", default="ok")
    ap.add_argument("--within", type=float, default=20.0)
    ap.add_argument("--same-digest", type=int, default=1)
    ap.add_argument("--start", type=int, default=0)
    ap.add_argument("--local-world", type=int, default=0,
                    help="ranks per simulated node (default: all on one node)")
    ap.add_argument("program", nargs=argparse.REMAINDER)
    args = ap.parse_args()
    args.stalled = -1
    if args.program and args.program[0] == "--":
        args.program = args.program[1:]
    with tempfile.TemporaryDirectory() as tmp:
        if args.expect.startswith("stall:"):
            args.stalled = int(args.expect[6:])
            check_stall(run_once(args, tmp, 0), args.stalled, args.within)
        elif args.expect.startswith("missing:"):
            check_missing(run_once(args, tmp, 0), args.expect[8:], args.within)
        elif args.expect.startswith("reform:"):
            check_reform(run_once(args, tmp, 0), int(args.expect[7:]))
        elif args.expect.startswith("die:"):
            check_die(run_once(args, tmp, 0), int(args.expect[4:]), args.within)
        else:
            digests = {check_ok(run_once(args, tmp, k)) for k in range(args.same_digest)}
            if len(digests) != 1 or None in digests:
                sys.exit("digests differ between runs (or none printed): %s" % digests)
            # A file store is removed by its last user.
            if args.store == "file" and os.listdir(tmp):
                sys.exit("file store left behind: %s" % os.listdir(tmp))
    print("ok")


main()
