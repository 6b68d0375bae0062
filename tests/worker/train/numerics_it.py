#!/usr/bin/python3
"""The numeric identity of ddp-train's ranks (worker/train/numerics.h), with
the real binaries: ddp-train, alone and under the real ddplaunch on
loopback (--standalone picks a free port), in a temporary directory.

  numerics_it.py --ddp-train PATH --ddplaunch PATH CASE

Cases:
  refuse   two ranks whose OpenBLAS kernels differ (OPENBLAS_CORETYPE
           Haswell and Sandybridge, set per rank by a wrapper) are refused
           with --global_batch_size before any step: exit 78, one line
           naming both ranks, both kernels and what to set; with
           --allow_numeric_mismatch the job runs and its end (the log line
           and the metrics file's "numerics" record) says the promise was
           dropped and why; ddplaunch's summary.json says "numerics":
           refused, dropped (with why) or kept (with the identity); without
           a fixed global batch it is a warning (and "numerics": null)
  threads  with --global_batch_size and the default --threads, a 1-rank run
           started by hand and one under ddplaunch --nproc_per_node=1, on a
           shell where OpenBLAS would take 2 threads (OMP_NUM_THREADS=2, as
           on any machine of 2 cores or more), give the SHA-256 of a 3-rank
           ddplaunch run (whose workers ddplaunch gives OMP_NUM_THREADS=1)
Both run every process with OPENBLAS_CORETYPE set to a kernel whose bits
depend on the split (Haswell), and skip (77) when this CPU cannot run it.
Exit 0 pass, 1 fail, 77 skip.
"""
import argparse
import hashlib
import json
import os
import shutil
import subprocess
import sys
import tempfile

TIMEOUT = 120
LAUNCHER_VARS = ("RANK", "WORLD_SIZE", "LOCAL_RANK", "LOCAL_WORLD_SIZE", "MASTER_ADDR",
                 "MASTER_PORT", "GROUP_RANK", "TORCHELASTIC_RUN_ID", "DDP_AGENT_FD")
# Variables that pick OpenBLAS's threads: every run of this test sets its own.
THREAD_VARS = ("OPENBLAS_NUM_THREADS", "GOTO_NUM_THREADS", "OMP_NUM_THREADS")


class Fail(Exception):
    pass


class Skip(Exception):
    pass


def check(cond, msg):
    if not cond:
        raise Fail(msg)


def base_env(**extra):
    env = {k: v for k, v in os.environ.items() if k not in LAUNCHER_VARS + THREAD_VARS}
    env.update(DDP_TIMEOUT_MS="60000", **extra)
    return env


def run(cmd, env, expect=0):
    p = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                       timeout=TIMEOUT, env=env)
    p.out = p.stdout + p.stderr
    if expect is not None and p.returncode != expect:
        raise Fail("exit %d, expected %d: %s\n%s" % (p.returncode, expect, " ".join(cmd),
                                                     p.out[-4000:]))
    return p


def core_of(trainer, core):
    """The kernel OpenBLAS takes when asked for `core` on this CPU."""
    p = run([trainer, "--help"], base_env(OPENBLAS_VERBOSE="2", OPENBLAS_CORETYPE=core))
    for line in p.out.splitlines():
        if line.startswith("Core: "):
            return line[6:].strip()
    raise Skip("OpenBLAS does not say its kernel (not a DYNAMIC_ARCH build?)")


def need_cores(args, *cores):
    for c in cores:
        got = core_of(args.ddp_train, c)
        if got != c:
            raise Skip("this CPU runs OpenBLAS kernel %s when asked for %s" % (got, c))


def job(tmp, name, shards=True, extra=()):
    ck = os.path.join(tmp, name)
    a = ["--data", "synthetic", "--synthetic_samples", "1024", "--synthetic_features", "32",
         "--hidden", "256,256", "--held_out", "0", "--eval_every_epoch", "false",
         "--max_steps", "8", "--seed", "5", "--device", "cpu", "--progress_bar", "false",
         "--checkpoint_dir", ck, "--metrics", ck + ".jsonl"]
    if shards:
        a += ["--global_batch_size", "96", "--virtual_shards", "3"]
    return ck, a + list(extra)


def launch(args, nproc, worker, log_dir=None):
    return [args.ddplaunch, "--standalone", "--nproc_per_node=%d" % nproc, "--max_restarts=0",
            "--grace_period=5"] + (["--log_dir=" + log_dir] if log_dir else []) + worker


def summary_numerics(log_dir):
    """summary.json's "numerics" of the one run under log_dir."""
    found = [os.path.join(d, "summary.json") for d, _, files in os.walk(log_dir)
             if "summary.json" in files]
    check(len(found) == 1, "summary.json under %s: %r" % (log_dir, found))
    with open(found[0]) as f:
        s = json.load(f)
    check("numerics" in s, "summary.json has no \"numerics\": %r" % s)
    return s["numerics"]


def records(ck, kind):
    path = ck + ".jsonl"
    if not os.path.exists(path):
        return []
    return [r for r in map(json.loads, open(path)) if r["kind"] == kind]


def sha256(path):
    with open(path, "rb") as f:
        return hashlib.sha256(f.read()).hexdigest()


def case_refuse(args, tmp):
    need_cores(args, "Haswell", "Sandybridge")
    wrapper = os.path.join(tmp, "per_rank_core.sh")
    with open(wrapper, "w") as f:
        f.write('#!/bin/sh\nif [ "$LOCAL_RANK" = 1 ]; then OPENBLAS_CORETYPE=Sandybridge; '
                'else OPENBLAS_CORETYPE=Haswell; fi\nexport OPENBLAS_CORETYPE\n'
                'exec "%s" "$@"\n' % args.ddp_train)
    os.chmod(wrapper, 0o755)
    env = base_env()

    ck, a = job(tmp, "refused")
    p = run(launch(args, 2, [wrapper] + a, ck + ".logs"), env, expect=78)
    want = ("rank 1 (host %s, node 0) uses OpenBLAS kernel Sandybridge, rank 0 (host %s, "
            "node 0) Haswell: set OPENBLAS_CORETYPE=Haswell on every node, or "
            "--allow_numeric_mismatch to drop the bit-identity promise") % (
                os.uname().nodename, os.uname().nodename)
    check(want in p.out, "the refusal does not say\n  %s\n%s" % (want, p.out[-3000:]))
    check(not records(ck, "train") and not os.path.exists(os.path.join(ck, "final.safetensors")),
          "the refused job took steps")
    check("not restarting" in p.out, "ddplaunch did not take the refusal as permanent")
    n = summary_numerics(ck + ".logs")
    check(n and n["promise"] == "refused" and n["why"] == want.split(", or --allow")[0],
          "summary.json of the refused job: %r" % n)

    ck, a = job(tmp, "accepted", extra=["--allow_numeric_mismatch"])
    p = run(launch(args, 2, [wrapper] + a, ck + ".logs"), env)
    check(os.path.exists(os.path.join(ck, "final.safetensors")), "the accepted job did not end")
    check("numerics: the promise of a 1-rank run's bits was dropped at step 0 "
          "(--allow_numeric_mismatch): rank 1" in p.out and "Sandybridge" in p.out,
          "the accepted job's end does not say the promise was dropped:\n" + p.out[-3000:])
    rec = records(ck, "numerics")
    check(len(rec) == 1 and rec[0]["promise"] == "dropped" and
          "OpenBLAS kernel Sandybridge" in rec[0]["why"] and
          "OpenBLAS kernel Haswell" in rec[0]["identity"],
          "metrics record of the accepted job: %r" % rec)
    n = summary_numerics(ck + ".logs")
    check(n and n["promise"] == "dropped" and "OpenBLAS kernel Sandybridge" in n["why"],
          "summary.json of the accepted job: %r" % n)

    ck, a = job(tmp, "warned", shards=False, extra=["--batch_size", "32"])
    p = run(launch(args, 2, [wrapper] + a, ck + ".logs"), env)
    check("uses OpenBLAS kernel Sandybridge" in p.out and "without --global_batch_size" in p.out,
          "no warning without a fixed global batch:\n" + p.out[-3000:])
    rec = records(ck, "numerics")
    check(not rec, "a numerics record without a promise: %r" % rec)
    check(summary_numerics(ck + ".logs") is None, "summary.json: a promise without one")

    ck, a = job(tmp, "same")
    p = run(launch(args, 2, [args.ddp_train] + a, ck + ".logs"),
            base_env(OPENBLAS_CORETYPE="Haswell"))
    rec = records(ck, "numerics")
    check(len(rec) == 1 and rec[0]["promise"] == "kept" and "BLAS threads 1" in
          rec[0]["identity"] and "numerics: the bits of a 1-rank run, promised" in p.out,
          "the job of one identity does not say it kept the promise: %r\n%s" % (
              rec, p.out[-2000:]))
    n = summary_numerics(ck + ".logs")
    check(n and n["promise"] == "kept" and n["identity"] == rec[0]["identity"],
          "summary.json of the job of one identity: %r" % n)
    print("refuse: refused (exit 78) naming both kernels; accepted with "
          "--allow_numeric_mismatch, promise dropped; a warning without a global batch")


def case_threads(args, tmp):
    need_cores(args, "Haswell")
    env = base_env(OPENBLAS_CORETYPE="Haswell")
    # OpenBLAS's own choice on a machine of 2 cores or more.
    many = base_env(OPENBLAS_CORETYPE="Haswell", OMP_NUM_THREADS="2")
    ck3, a = job(tmp, "three")
    run(launch(args, 3, [args.ddp_train] + a), env)
    ref = sha256(os.path.join(ck3, "final.safetensors"))
    # The comparison can fail: 2 BLAS threads give other bits here.
    ck2, a = job(tmp, "two-threads", extra=["--threads", "2"])
    run([args.ddp_train] + a, many)
    if sha256(os.path.join(ck2, "final.safetensors")) == ref:
        raise Skip("2 OpenBLAS threads give the bits of 1 on this machine: nothing to test")
    got = {}
    ck, a = job(tmp, "by-hand")
    run([args.ddp_train] + a, many)
    got["by hand"] = sha256(os.path.join(ck, "final.safetensors"))
    ck, a = job(tmp, "launched-1")
    run(launch(args, 1, [args.ddp_train] + a), many)
    got["ddplaunch --nproc_per_node=1"] = sha256(os.path.join(ck, "final.safetensors"))
    for name, d in got.items():
        check(d == ref, "%s: final.safetensors %s, the 3-rank run's %s" % (name, d[:16],
                                                                        ref[:16]))
    print("threads: 3 ranks, by hand and ddplaunch --nproc_per_node=1 all %s (2 threads: "
          "another)" % ref[:16])


CASES = {"refuse": case_refuse, "threads": case_threads}


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--ddp-train", required=True)
    ap.add_argument("--ddplaunch", required=True)
    ap.add_argument("case", choices=sorted(CASES))
    args = ap.parse_args()
    tmp = tempfile.mkdtemp(prefix="ddp-numerics-it-")
    try:
        CASES[args.case](args, tmp)
    except Skip as e:
        print("SKIP: %s" % e)
        return 77
    except Fail as e:
        print("FAIL: %s" % e)
        return 1
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
