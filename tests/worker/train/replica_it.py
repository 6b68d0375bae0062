#!/usr/bin/python3
"""Replicas checked every step (issue 25 part 2): the real ddp-train under
the real ddplaunch (--standalone, loopback, a free port), in --global_batch_size
mode, one rank's parameters corrupted by DDP_TEST_FLIP=RANK:STEP (one bit
flipped right after that step's update).

  replica_it.py --ddp-train PATH --ddplaunch PATH --source DIR CASE

Cases:
  heal3     3 ranks, rank 1 flipped after step FLIP: every rank names rank 1,
            step FLIP and the tensor flipped; the replica is healed from the
            majority's memory, training goes on and final.safetensors has
            the SHA-256 of an undisturbed 1-rank run; rank 0's metrics file
            records it. The same flip with --replica_check_every 0 changes
            the final weights (the flip matters, so the check can fail).
  stop2     2 ranks, rank 1 flipped: both ranks name the mismatch and stop;
            ddplaunch exits 1 (an ordinary failure, not 78: a restart from
            the last checkpoint recovers) with no final checkpoint;
            summary.json lists the replica as "stopped".
  restart2  the same with --max_restarts 1 and checkpoints every 5 steps:
            the group starts again from the last checkpoint (the test flip
            is on attempt 0 only) and ends with the 1-rank bits.
  clean     3 ranks, no flip: every step checked, no mismatch reported
            (summary.json's "replicas" empty), the 1-rank bits.
Exit 0 pass, 1 fail.
"""
import argparse
import glob
import hashlib
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile

STEPS, FLIP, TIMEOUT = 30, 7, 120
FLIPPED = "6.bias"  # the digits model's last parameter tensor (64-256-256-10)


class Fail(Exception):
    pass


def check(cond, msg):
    if not cond:
        raise Fail(msg)


def sha256(path):
    with open(path, "rb") as f:
        return hashlib.sha256(f.read()).hexdigest()


class Env:
    def __init__(self, args, tmp):
        self.args, self.tmp = args, tmp

    def job(self, name, extra=()):
        ck = os.path.join(self.tmp, name)
        return ck, ["--config", os.path.join(self.args.source, "configs", "digits.ini"),
                    "--max_steps", str(STEPS), "--global_batch_size", "64",
                    "--virtual_shards", "8", "--checkpoint_dir", ck, "--device", "cpu",
                    "--metrics", ck + ".jsonl", "--threads", "1"] + list(extra)

    def run(self, nproc, name, extra=(), flip=None, restarts=0):
        ck, job = self.job(name, extra)
        env = dict(os.environ, OPENBLAS_NUM_THREADS="1", DDP_TIMEOUT_MS="60000")
        env.pop("DDP_TEST_FLIP", None)
        if flip:
            env["DDP_TEST_FLIP"] = flip
        if nproc == 1:
            cmd = [self.args.ddp_train] + job
        else:
            cmd = [self.args.ddplaunch, "--standalone", "--nproc_per_node=%d" % nproc,
                   "--max_restarts=%d" % restarts, "--grace_period=5",
                   "--log_dir", ck + "-logs", self.args.ddp_train] + job
        p = subprocess.run(cmd, capture_output=True, text=True, timeout=TIMEOUT, env=env)
        p.out = p.stdout + p.stderr
        p.final = os.path.join(ck, "final.safetensors")
        p.records = []
        if os.path.exists(ck + ".jsonl"):
            p.records = [json.loads(x) for x in open(ck + ".jsonl")]
        p.summary = None
        for path in glob.glob(os.path.join(ck + "-logs", "*", "summary.json")):
            with open(path) as f:
                p.summary = json.load(f)
        return p

    def reference(self):
        p = self.run(1, "one")
        check(p.returncode == 0, "the 1-rank run failed:\n" + p.out[-3000:])
        return sha256(p.final)


def ok(p, what):
    check(p.returncode == 0, "%s failed (%d):\n%s" % (what, p.returncode, p.out[-3000:]))


def replica_records(p):
    return [r for r in p.records if r.get("kind") == "replica"]


def case_heal3(env):
    ref = env.reference()
    p = env.run(3, "heal", flip="1:%d" % FLIP)
    ok(p, "the 3-rank run with a flip")
    named = re.compile(r"\[rank (\d)\]: ddp-train(?:\[rank \d\])?: step %d: rank 1's replica "
                       r"differs from the majority's \(2 of 3 ranks agree\): first in '%s'; "
                       r"healing it from rank 0's memory" % (FLIP, re.escape(FLIPPED)))
    said = sorted({m.group(1) for m in named.finditer(p.out)})
    check(said == ["0", "1", "2"], "not every rank named rank 1, step %d and '%s' (%s):\n%s" % (
        FLIP, FLIPPED, said, p.out[-3000:]))
    check(re.search(r"step %d: healed 1 replica\(s\) from rank 0's memory in [0-9.]+ s; "
                    r"redoing step %d" % (FLIP, FLIP + 1), p.out), "no heal said:\n" + p.out)
    check("1 mismatch(es), 1 replica(s) healed" in p.out, "the closing line did not count it:\n"
          + p.out[-2000:])
    recs = replica_records(p)
    check(len(recs) == 1 and recs[0]["step"] == FLIP and recs[0]["rank"] == 1 and
          recs[0]["tensor"] == FLIPPED and recs[0]["action"] == "healed" and
          recs[0]["root"] == 0 and recs[0]["majority"] == 2,
          "rank 0's metrics file: %r" % recs)
    check(p.summary and p.summary.get("replicas") == [
        {"step": FLIP, "rank": 1, "tensor": FLIPPED, "action": "healed"}],
        "summary.json's replicas: %r" % (p.summary and p.summary.get("replicas")))
    check("ddplaunch: rank 1's replica differed from the majority's after step %d (first in "
          "'%s'): healed in place" % (FLIP, FLIPPED) in p.out, "ddplaunch did not say it:\n"
          + p.out[-2000:])
    got = sha256(p.final)
    check(got == ref, "the healed run's final.safetensors %s differs from the 1-rank run's %s"
          % (got[:12], ref[:12]))
    q = env.run(3, "unchecked", extra=["--replica_check_every", "0"], flip="1:%d" % FLIP)
    ok(q, "the unchecked 3-rank run with a flip")
    check("differs" not in q.out, "--replica_check_every 0 still checked:\n" + q.out[-2000:])
    check(sha256(q.final) != ref, "the flip left the final weights unchanged: the heal proves "
          "nothing")
    print("heal3: rank 1 flipped after step %d, named by every rank, healed; final %s == 1 rank "
          "%s; unchecked final %s" % (FLIP, got[:12], ref[:12], sha256(q.final)[:12]))


def case_stop2(env):
    p = env.run(2, "stop", flip="1:%d" % FLIP)
    check(p.returncode == 1, "ddplaunch exited %d, want 1 (an ordinary failure):\n%s" % (
        p.returncode, p.out[-3000:]))
    for r in (0, 1):
        check(re.search(r"\[rank %d\]: ddp-train(\[rank 1\])?: step %d: rank 1's replica differs "
                        r"from rank 0's: first in '%s'" % (r, FLIP, re.escape(FLIPPED)), p.out),
              "rank %d did not name the mismatch:\n%s" % (r, p.out[-3000:]))
        check(re.search(r"\[rank %d\]: .*step %d: the replicas differ and 2 ranks hold no "
                        r"majority to tell the good one: stopping" % (r, FLIP), p.out),
              "rank %d did not say it stops:\n%s" % (r, p.out[-3000:]))
    check(not os.path.exists(p.final), "a stopped run wrote final.safetensors")
    recs = replica_records(p)
    check(len(recs) == 1 and recs[0]["action"] == "stopped" and recs[0]["root"] == -1 and
          recs[0]["step"] == FLIP, "rank 0's metrics file: %r" % recs)
    check(p.summary and p.summary.get("replicas") == [
        {"step": FLIP, "rank": 1, "tensor": FLIPPED, "action": "stopped"}],
        "summary.json's replicas: %r" % (p.summary and p.summary.get("replicas")))
    print("stop2: both ranks named step %d, '%s', and stopped; ddplaunch exit 1" % (
        FLIP, FLIPPED))


def case_restart2(env):
    ref = env.reference()
    p = env.run(2, "restart", extra=["--checkpoint_every", "5"], flip="1:%d" % FLIP,
                restarts=1)
    ok(p, "the 2-rank run with a flip and a restart")
    check("restart 1: resumed from" in p.out and "at step 5" in p.out,
          "the group did not start again from the step-5 checkpoint:\n" + p.out[-3000:])
    got = sha256(p.final)
    check(got == ref, "final %s differs from the 1-rank run's %s" % (got[:12], ref[:12]))
    print("restart2: stopped at step %d, restarted from step 5, final %s == 1 rank" % (
        FLIP, got[:12]))


def case_clean(env):
    ref = env.reference()
    p = env.run(3, "clean")
    ok(p, "the undisturbed 3-rank run")
    m = re.search(r"replica check: (\d+) check\(s\) \(every 1 steps\), 0 mismatch\(es\), 0 "
                  r"replica\(s\) healed", p.out)
    check(m and int(m.group(1)) == STEPS, "not every step checked, or a mismatch:\n" +
          p.out[-2000:])
    check("differs" not in p.out and not replica_records(p), "a clean run reported a mismatch")
    check(p.summary and p.summary.get("replicas") == [], "summary.json's replicas: %r" % (
        p.summary and p.summary.get("replicas")))
    check(sha256(p.final) == ref, "the 3-rank final differs from the 1-rank run's")
    print("clean: %d checks, no mismatch, final == 1 rank" % STEPS)


CASES = {"heal3": case_heal3, "stop2": case_stop2, "restart2": case_restart2,
         "clean": case_clean}


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--ddp-train", required=True)
    ap.add_argument("--ddplaunch", required=True)
    ap.add_argument("--source", required=True)
    ap.add_argument("case", choices=sorted(CASES))
    args = ap.parse_args()
    tmp = tempfile.mkdtemp(prefix="ddp-replica-it-")
    try:
        CASES[args.case](Env(args, tmp))
    except (Fail, subprocess.TimeoutExpired) as e:
        print("FAIL: %s" % e)
        return 1
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
