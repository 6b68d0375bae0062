#!/usr/bin/python3
"""ddp-train's progress pages, read while it trains, as the agent reads them.

  progress_it.py --ddp-train PATH --ddplaunch PATH [--pages test|agent]

Two ranks under ddplaunch --standalone, fixed global batch (4 virtual
shards), checkpoints every 4 steps, an evaluation each epoch (rank 0), the
final save. Each worker's page is a file of this test's (--pages test:
DDP_PROGRESS_FILE set by a shell wrapper, as the agent sets it) or the one
ddplaunch's agent made for it (--pages agent: the file named in the
worker's environment as ddplaunch started it, /proc/PID/environ), mapped
once found (the mapping outlives the file's removal at the end) and read
through the Python mirror
(python/ddplaunch/torch/progress.py, loaded from its file: no torch) every
half millisecond until the job ends. Passes when, for each rank: the
collectives' numbers never go backwards in a round, the phases seen include
STARTUP or HANDOVER, COMPUTE, COLLECTIVE, CHECKPOINT and FINAL (rank 0 also
EVAL), the step count rises to the last step with each committed step's
duration = compute + wait and 1 to 3 of the 4 shards (2 each, or a
weighted plan's share when a rank was named slow), and the last page says SHUTDOWN.
With --pages test the job runs again with --replica_check_every 0, and the
check (on by default, every step) must add exactly one collective: the last
step's all-gather (the others' digests ride in the step's all-reduce).
Exit 0 pass, 1 fail.
"""
import argparse
import importlib.util
import mmap
import os
import shutil
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
MIRROR = os.path.join(HERE, "..", "..", "..", "python", "ddplaunch", "torch", "progress.py")
STEPS = 24

WRAPPER = 'f="$PROGRESS_DIR/rank-$RANK"; truncate -s 4096 "$f" && ' \
          'DDP_PROGRESS_FILE="$f" exec "$0" "$@"'


def load_mirror():
    spec = importlib.util.spec_from_file_location("ddp_progress_mirror", MIRROR)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def fail(msg):
    sys.exit("progress_it: " + msg)


class Seen:
    def __init__(self):
        self.phases, self.steps, self.backwards = set(), [], []
        self.last = None
        self.seq = (None, 0)

    def add(self, pr, p):
        self.last = p
        self.phases.add(pr.PHASES[p["phase"]])
        rnd, seq = self.seq
        if rnd == p["round"] and p["seq"] < seq:
            self.backwards.append((rnd, seq, p["seq"]))
        self.seq = (p["round"], p["seq"])
        if p["step"] and (not self.steps or self.steps[-1][0] != p["step"]):
            self.steps.append((p["step"], p["step_ns"], p["compute_ns"], p["wait_ns"],
                               p["shards"]))


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--ddp-train", required=True)
    ap.add_argument("--ddplaunch", required=True)
    ap.add_argument("--pages", choices=["test", "agent"], default="test")
    args = ap.parse_args()
    pr = load_mirror()
    tmp = tempfile.mkdtemp(prefix="ddp-progress-it-")
    try:
        on = run(args, pr, os.path.join(tmp, "on"))
        if args.pages == "test":
            off = run(args, pr, os.path.join(tmp, "off"), ["--replica_check_every", "0"])
            for r in (0, 1):
                if on[r] - off[r] != 1:
                    fail("rank %d: %d collectives with the replica check, %d without: the "
                         "check must add only the last step's all-gather" % (r, on[r], off[r]))
            print("replica check: %d collectives on, %d off (rank 0)" % (on[0], off[0]))
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


def run(args, pr, tmp, extra=()):
    """One job; returns each rank's collectives (its last page's seq)."""
    os.makedirs(tmp)
    wrap = ["/bin/sh", "-c", WRAPPER] if args.pages == "test" else []
    cmd = [args.ddplaunch, "--standalone", "--nproc_per_node=2", "--max_restarts=0"] + wrap + [
           args.ddp_train, "--device", "cpu", "--data", "synthetic",
           "--synthetic_samples", "1536", "--hidden", "1024,1024", "--global_batch_size", "64",
           "--virtual_shards", "4", "--max_steps", str(STEPS), "--epochs", "3",
           "--checkpoint_dir", os.path.join(tmp, "ckpt"), "--checkpoint_every", "4",
           "--threads", "1", "--progress_bar", "false"] + list(extra)
    env = dict(os.environ, PROGRESS_DIR=tmp, OMP_NUM_THREADS="1")
    proc = subprocess.Popen(cmd, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                            text=True)
    seen = {0: Seen(), 1: Seen()}
    maps = {}
    end = time.monotonic() + 240
    while proc.poll() is None:
        if time.monotonic() > end:
            proc.kill()
            fail("the job did not end within 240 s")
        if len(maps) < 2:
            find_pages(args, tmp, proc.pid, maps)
        for r, m in maps.items():
            p = pr.read(m)
            if p is not None:
                seen[r].add(pr, p)
        time.sleep(0.0005)
    out = proc.communicate()[0]
    sys.stdout.write(out)
    if proc.returncode != 0:
        fail("the job failed (%d)" % proc.returncode)
    if len(maps) < 2:
        fail("found the pages of ranks %s only" % sorted(maps))
    seqs = {}
    for r in (0, 1):
        p = pr.read(maps[r])
        if p is None:
            fail("rank %d's page cannot be read after the job" % r)
        seen[r].add(pr, p)
        check_rank(pr, r, seen[r])
        seqs[r] = p["seq"]
        print("rank %d: phases seen %s, %d collectives, %d steps seen" %
              (r, sorted(seen[r].phases), p["seq"], len(seen[r].steps)))
    return seqs


def map_page(path):
    try:
        with open(path, "rb") as f:
            return mmap.mmap(f.fileno(), 4096, prot=mmap.PROT_READ)
    except (OSError, ValueError):
        return None


def environ(pid):
    try:
        with open("/proc/%d/environ" % pid, "rb") as f:
            return dict(kv.split(b"=", 1) for kv in f.read().split(b"\0") if b"=" in kv)
    except OSError:
        return {}


def descendants(pid):
    kids = {}
    for d in os.listdir("/proc"):
        if d.isdigit():
            try:
                with open("/proc/%s/stat" % d) as f:
                    ppid = int(f.read().rsplit(")", 1)[1].split()[1])
            except (OSError, ValueError, IndexError):
                continue
            kids.setdefault(ppid, []).append(int(d))
    out, todo = [], [pid]
    while todo:
        for k in kids.get(todo.pop(), []):
            out.append(k)
            todo.append(k)
    return out


def find_pages(args, tmp, launcher, maps):
    """Maps the pages found so far into maps[rank]."""
    for r in (0, 1):
        if r in maps or args.pages != "test":
            continue
        m = map_page(os.path.join(tmp, "rank-%d" % r))
        if m is not None:
            maps[r] = m
    if args.pages != "agent":
        return
    for pid in descendants(launcher):
        env = environ(pid)
        path, rank = env.get(b"DDP_PROGRESS_FILE"), env.get(b"RANK")
        if path and rank is not None and int(rank) not in maps and \
                os.path.basename(args.ddp_train).encode() in open(
                    "/proc/%d/cmdline" % pid, "rb").read().split(b"\0")[0]:
            m = map_page(path.decode())
            if m is not None:
                maps[int(rank)] = m


def check_rank(pr, r, s):
    want = {"compute", "collective", "checkpoint", "final", "shutdown"}
    if r == 0:
        want.add("eval")
    if not want <= s.phases or not s.phases & {"startup", "handover"}:
        fail("rank %d: phases seen %s, want %s and startup or handover"
             % (r, sorted(s.phases), sorted(want)))
    if s.backwards:
        fail("rank %d: seq went backwards within a round: %s" % (r, s.backwards))
    last = s.last
    if last["phase"] != pr.PHASE_SHUTDOWN or last["step"] != STEPS or last["rank"] != r or \
            last["world"] != 2 or last["round"] < 1 or last["seq"] < 2 * STEPS:
        fail("rank %d's last page: %s" % (r, last))
    if len(s.steps) < STEPS // 4 or [x[0] for x in s.steps] != sorted(x[0] for x in s.steps):
        fail("rank %d: steps seen %s" % (r, [x[0] for x in s.steps]))
    for step, step_ns, compute_ns, wait_ns, shards in s.steps:
        if step_ns <= 0 or compute_ns + wait_ns != step_ns or not 1 <= shards <= 3:
            fail("rank %d step %d: step_ns %d compute %d wait %d shards %d"
                 % (r, step, step_ns, compute_ns, wait_ns, shards))


if __name__ == "__main__":
    main()
