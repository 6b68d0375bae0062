#!/usr/bin/python3
"""A process that joins a running ddp-train (--global_batch_size) takes the
training state from a peer's memory, reads no file, and the run ends with
the bits of an undisturbed 1-rank run.

This script plays ddplaunch's agent, with its real protocol: it hosts the
store (ddp-rdzvd, 127.0.0.1, port 0), starts two ranks of ddp-train, each
with a socketpair's end as its agent channel (DDP_AGENT_FD); one rank
SIGKILLs itself before step KILL (--fault_kill_step); the agent then sends
the survivor the next round ("round 2 ...") and starts one fresh process
for the dead rank in that round, as the agent does for a rank replaced
alone. Checks:

  - the survivor said "took 2" on its channel and kept its process;
  - the fresh process logged that it took the state from the survivor's
    memory (bytes, seconds, GB/s, from which rank);
  - joiner-1: the dead rank was 1 and the fresh process is rank 1; its
    checkpoint_dir lies under a regular file, so any attempt to read or
    list it fails (the test runs as root: permissions would not stop it);
    final.safetensors (written by the survivor) is byte-identical to the
    undisturbed run's;
  - joiner-0: the dead rank was 0; the survivor becomes rank 1 and sends,
    the fresh process is rank 0, and its checkpoint_dir holds a damaged
    latest.safetensors, which it must not read: final.safetensors, which
    the fresh process writes from the state it received (parameters,
    BatchNorm buffers, momentum), is byte-identical to the undisturbed
    run's.

  - the survivor says the replica check that the re-formation dropped
    (its digest of the step before the kill);

  - the progress pages (common/progress.h, one per process, named in
    DDP_PROGRESS_FILE as the agent names them, read through the Python
    mirror): the survivor's says REFORM once its collective failed (the
    round is sent only then), and at the end round 2, its new rank, the
    same pid, the last step and SHUTDOWN; the fresh process's says round 2,
    its rank and pid and the last step (the phases seen live are printed:
    a hand-over on one machine is too short to be caught every time).

Transports: shm (two local ranks) and ring (two simulated nodes,
127.0.0.2 and 127.0.0.3). Every process started here is ended by PID.

  handover_it.py --ddp-train PATH --rdzvd PATH --source DIR [--transport shm|ring]
Exit 0 pass, 1 fail.
"""
import argparse
import hashlib
import mmap
import os
import re
import select
import signal
import socket
import subprocess
import sys
import tempfile
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "..",
                                "python"))
from ddplaunch import agent_wire  # noqa: E402
import importlib.util  # noqa: E402

_spec = importlib.util.spec_from_file_location("ddp_progress_mirror", os.path.join(
    os.path.dirname(os.path.abspath(__file__)), "..", "..", "..", "python", "ddplaunch",
    "torch", "progress.py"))
progress = importlib.util.module_from_spec(_spec)  # torch-free: loaded from its file
_spec.loader.exec_module(progress)

STEPS, KILL = 60, 23
LIMIT = 120.0


class Fail(Exception):
    pass


def sha256(path):
    with open(path, "rb") as f:
        return hashlib.sha256(f.read()).hexdigest()


def job(args, ckdir):
    return [args.ddp_train, "--config", os.path.join(args.source, "configs", "digits.ini"),
            "--checkpoint_dir", ckdir, "--max_steps", str(STEPS), "--global_batch_size", "64",
            "--virtual_shards", "8", "--checkpoint_every", "10", "--device", "cpu"]


def start_store(rdzvd):
    proc = subprocess.Popen([rdzvd, "--host", "127.0.0.1", "--port", "0"],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    ready, _, _ = select.select([proc.stdout], [], [], 20)
    line = proc.stdout.readline() if ready else b""
    if line.strip().isdigit():
        return proc, int(line)
    proc.kill()
    proc.wait()
    raise Fail("ddp-rdzvd announced no port within 20 s")


class Rank:
    """One ddp-train process with its agent channel."""

    def __init__(self, args, env, rank, node, argv, out):
        self.ours, theirs = socket.socketpair()
        self.rank = rank
        self.page = out + ".progress"  # the agent's part: a fresh page
        with open(self.page, "wb") as f:
            f.write(b"\0" * progress.SIZE)
        self.phases = set()
        self.map = None
        local = {"shm": (rank, 2, 0, 1), "ring": (0, 1, rank, 2)}[args.transport]
        e = dict(env, RANK=str(rank), LOCAL_RANK=str(local[0]),
                 LOCAL_WORLD_SIZE=str(local[1]), GROUP_RANK=str(local[2]),
                 GROUP_WORLD_SIZE=str(local[3]), DDP_AGENT_FD=str(theirs.fileno()),
                 DDP_AGENT_PID=str(os.getpid()),  # the pair's creator, as ddplaunch
                 DDP_LOCAL_ADDR=node, DDP_PROGRESS_FILE=self.page)
        self.log = open(out, "w+")
        self.proc = subprocess.Popen(argv, env=e, stdout=self.log, stderr=subprocess.STDOUT,
                                     pass_fds=(theirs.fileno(),))
        theirs.close()
        self.heard = b""

    def send_round(self, rnd, rank, port, transport):
        local = {"shm": (rank, 2, 0, 1), "ring": (0, 1, rank, 2)}[transport]
        self.ours.sendall(agent_wire.format(agent_wire.Round(
            rnd, rank, 2, local[0], local[1], "127.0.0.1", port, local[2], local[3])))

    def progress(self):
        if self.map is None:
            with open(self.page, "rb") as f:
                self.map = mmap.mmap(f.fileno(), progress.SIZE, prot=mmap.PROT_READ)
        p = progress.read(self.map)
        if p is not None:
            self.phases.add(progress.PHASES[p["phase"]])
        return p

    def wait_phase(self, phase, deadline):
        """Until this process's page says `phase` (the agent's view)."""
        while time.monotonic() < deadline:
            p = self.progress()
            if p is not None and p["phase"] == phase:
                return p
            time.sleep(0.001)
        raise Fail("rank %d's progress page never said %s: %s" % (
            self.rank, progress.PHASES[phase], self.progress()))

    def read_channel(self):
        self.ours.setblocking(False)
        try:
            while True:
                b = self.ours.recv(4096)
                if not b:
                    break
                self.heard += b
        except BlockingIOError:
            pass
        return self.heard.decode()

    def output(self):
        self.log.seek(0)
        return self.log.read()

    def end(self):
        if self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait()
        self.ours.close()
        self.log.close()
        if self.map is not None:
            self.map.close()


def wait_exit(r, deadline):
    try:
        return r.proc.wait(timeout=max(1.0, deadline - time.monotonic()))
    except subprocess.TimeoutExpired:
        raise Fail("rank %d (pid %d) still running after %.0f s:\n%s" % (
            r.rank, r.proc.pid, LIMIT, r.output()[-3000:]))


def run_case(args, tmp, dead, reference):
    """Rank `dead` dies before step KILL; a fresh process replaces it."""
    name = "joiner-%d-%s" % (dead, args.transport)
    store, port = start_store(args.rdzvd)
    nodes = ["127.0.0.2", "127.0.0.3"] if args.transport == "ring" else ["127.0.0.1"] * 2
    env = dict(os.environ, WORLD_SIZE="2", MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port),
               TORCHELASTIC_RUN_ID="handover%d_%d" % (os.getpid(), dead), DDP_ROUND="1",
               TORCHELASTIC_RESTART_COUNT="0", DDP_BACKEND="cpu",
               DDP_CPU_TRANSPORT=args.transport, DDP_TIMEOUT_MS="30000",
               OPENBLAS_NUM_THREADS="1", OMP_NUM_THREADS="1")
    ck = [os.path.join(tmp, name + "-ck%d" % r) for r in (0, 1)]
    blocker = os.path.join(tmp, name + "-file")
    open(blocker, "w").close()
    if dead == 1:
        joiner_ck = os.path.join(blocker, "ck")  # under a file: unreadable
        final = os.path.join(ck[0], "final.safetensors")
    else:
        joiner_ck = os.path.join(tmp, name + "-joiner")
        os.mkdir(joiner_ck)
        with open(os.path.join(joiner_ck, "latest.safetensors"), "wb") as f:
            f.write(b"not a checkpoint: a joiner that reads it fails")
        final = os.path.join(joiner_ck, "final.safetensors")
    fault = ["--fault_kill_step", str(KILL), "--fault_rank", str(dead)]
    ranks = []
    t0 = time.monotonic()
    try:
        for r in (0, 1):
            ranks.append(Rank(args, env, r, nodes[r], job(args, ck[r]) + fault,
                              os.path.join(tmp, "%s-rank%d.log" % (name, r))))
        survivor = ranks[1 - dead]
        rc = wait_exit(ranks[dead], t0 + LIMIT)
        if rc != -signal.SIGKILL:
            raise Fail("%s: rank %d should have killed itself, exit %d:\n%s" % (
                name, dead, rc, ranks[dead].output()[-3000:]))
        # The survivor's collective failed: it waits for a round (its
        # page says so). The new round: it keeps its process; rank `dead`
        # is new.
        survivor.wait_phase(progress.PHASE_REFORM, t0 + LIMIT)
        survivor.send_round(2, 1 - dead, port, args.transport)
        joiner = Rank(args, dict(env, DDP_ROUND="2"), dead, nodes[dead],
                      job(args, joiner_ck), os.path.join(tmp, "%s-joiner.log" % name))
        ranks.append(joiner)
        while survivor.proc.poll() is None or joiner.proc.poll() is None:
            survivor.progress()
            joiner.progress()
            time.sleep(0.0005)
            if time.monotonic() > t0 + LIMIT:
                break
        for r in (survivor, joiner):
            if wait_exit(r, t0 + LIMIT) != 0:
                raise Fail("%s: rank %d failed:\n%s" % (name, r.rank, r.output()[-3000:]))
        check_pages(name, survivor, joiner, dead)
        return check_case(name, survivor, joiner, dead, final, reference)
    finally:
        for r in ranks:
            r.end()
        store.send_signal(signal.SIGTERM)
        try:
            store.wait(timeout=10)
        except subprocess.TimeoutExpired:
            store.kill()
            store.wait()


def check_pages(name, survivor, joiner, dead):
    s, j = survivor.progress(), joiner.progress()
    if s is None or j is None:
        raise Fail("%s: a progress page cannot be read (survivor %s, joiner %s)" % (name, s, j))
    if s["round"] != 2 or s["rank"] != 1 - dead or s["pid"] != survivor.proc.pid or \
            s["step"] != STEPS or s["phase"] != progress.PHASE_SHUTDOWN:
        raise Fail("%s: the survivor's last page: %s" % (name, s))
    if j["round"] != 2 or j["rank"] != dead or j["pid"] != joiner.proc.pid or \
            j["step"] != STEPS:
        raise Fail("%s: the fresh process's last page: %s" % (name, j))
    print("%s: progress pages: survivor %s, round 2 as rank %d" % (
        name, sorted(survivor.phases), 1 - dead))


def check_case(name, survivor, joiner, dead, final, reference):
    said, out, sout = survivor.read_channel(), joiner.output(), survivor.output()
    print("--- %s: survivor (rank %d -> %d)\n%s--- joiner (rank %d)\n%s" % (
        name, 1 - dead, 1 - dead, sout[-1500:], dead, out[-1500:]))
    if agent_wire.format(agent_wire.Took(2)).decode() not in said:
        raise Fail("%s: the survivor never said 'took 2' on its channel: %r" % (name, said))
    m = re.search(r"step (\d+): took the training state from rank (\d+)'s memory: (\d+) bytes "
                  r"in ([0-9.]+) s \(([0-9.]+) GB/s\)", out)
    if not m:
        raise Fail("%s: the fresh process never said it took the state from a peer" % name)
    step, root = int(m.group(1)), int(m.group(2))
    if root != 1 - dead or not KILL - 1 <= step <= KILL:
        raise Fail("%s: took step %d from rank %d; expected step %d from rank %d" % (
            name, step, root, KILL - 1, 1 - dead))
    for word in ("resumed from", "cannot", "checkpoint_dir"):
        if word in out:
            raise Fail("%s: the fresh process touched the checkpoints (%r):\n%s" % (
                name, word, out[-2000:]))
    # The survivor's digest of the step before the kill was dropped by the
    # re-formation: counted and said, not skipped without a word.
    if not re.search(r"replica check: rank \d+ skipped 1 check\(s\): a re-formation", sout):
        raise Fail("%s: the survivor did not say the replica check it skipped:\n%s" % (
            name, sout[-2000:]))
    if "re-forming for round" in sout:
        raise Fail("%s: the survivor logged a failed re-formation:\n%s" % (name, sout[-2000:]))
    got = sha256(final)
    print("%s: state of step %d from rank %d: %s bytes in %s s (%s GB/s); final SHA-256 %s, "
          "undisturbed 1 rank %s" % (name, step, root, m.group(3), m.group(4), m.group(5),
                                     got[:12], reference[:12]))
    if got != reference:
        raise Fail("%s: final.safetensors differs from the undisturbed run's" % name)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--ddp-train", required=True)
    ap.add_argument("--rdzvd", required=True)
    ap.add_argument("--source", required=True)
    ap.add_argument("--transport", choices=["shm", "ring"], default="shm")
    args = ap.parse_args()
    with tempfile.TemporaryDirectory(prefix="ddp-handover-") as tmp:
        try:
            ref_ck = os.path.join(tmp, "reference")
            env = {k: v for k, v in os.environ.items()
                   if k not in ("RANK", "WORLD_SIZE", "DDP_AGENT_FD", "DDP_AGENT_PID")}
            env["OPENBLAS_NUM_THREADS"] = "1"
            p = subprocess.run(job(args, ref_ck), env=env, stdout=subprocess.PIPE,
                               stderr=subprocess.STDOUT, text=True, timeout=LIMIT)
            if p.returncode != 0:
                raise Fail("the undisturbed 1-rank run failed:\n%s" % p.stdout[-3000:])
            reference = sha256(os.path.join(ref_ck, "final.safetensors"))
            for dead in (1, 0):
                run_case(args, tmp, dead, reference)
        except Fail as e:
            print("FAIL: %s" % e)
            return 1
    print("ok")
    return 0


if __name__ == "__main__":
    sys.exit(main())
