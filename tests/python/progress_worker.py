"""A ddplaunch.torch worker for test_progress.py: a small MLP trained with
Elastic for --steps steps, its progress page at $PROGRESS_DIR/rank-RANK
(DDP_PROGRESS_FILE, set here as the agent would set it), or without
PROGRESS_DIR the one ddplaunch's agent made (DDP_PROGRESS_FILE as given).

--late_rank R --late_step S: in step S, rank R enters its all-reduce only
once the other rank's page has shown it inside that all-reduce for 300 ms,
beating meanwhile (written_ns a beat or more after it entered): the others'
pages name the collective a late rank has not entered.
At the end each rank checks its own page (the step count, the collectives'
numbers, the step's timings and shards, the phase) and prints
"ELASTIC progress ok rank=R".
"""
import argparse
import os
import sys
import time

import torch

from ddplaunch.torch import Elastic
from ddplaunch.torch import progress as pr


MINE = None  # this rank's page, as the agent named it


def page_path(rank):
    if "PROGRESS_DIR" not in os.environ:
        return MINE
    return os.path.join(os.environ["PROGRESS_DIR"], "rank-%d" % rank)


def wait_peer_blocked(peer, seq, limit=30.0):
    """Until the peer's page says it has been inside collective #seq (an
    all-reduce) for 300 ms, beating."""
    end = time.monotonic() + limit
    while time.monotonic() < end:
        p = pr.read_file(page_path(peer))
        if p and p["seq"] == seq and p["op"] == pr.OP_ALLREDUCE and \
                p["phase"] == pr.PHASE_COLLECTIVE and p["left_ns"] < p["entered_ns"] and \
                time.monotonic_ns() - p["entered_ns"] > 300_000_000 and \
                p["written_ns"] - p["entered_ns"] >= 100_000_000:
            return p
        time.sleep(0.001)
    sys.exit("rank %s: the peer's page never showed all-reduce #%d blocked: %s"
             % (os.environ["RANK"], seq, pr.read_file(page_path(peer))))


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--steps", type=int, default=10)
    ap.add_argument("--late_rank", type=int, default=-1)
    ap.add_argument("--late_step", type=int, default=-1)
    args = ap.parse_args()
    torch.set_num_threads(1)
    rank, world = int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"])
    global MINE
    if "PROGRESS_DIR" in os.environ:
        with open(page_path(rank), "wb") as f:
            f.write(b"\0" * pr.SIZE)
        os.environ[pr.ENV] = page_path(rank)
    elif args.late_rank >= 0:
        sys.exit("--late_rank needs PROGRESS_DIR (the peer's page)")
    MINE = os.environ.get(pr.ENV)
    if not MINE:
        sys.exit("no DDP_PROGRESS_FILE from the agent")

    g = torch.Generator()
    g.manual_seed(1)
    x = torch.randn(480, 16, generator=g)
    y = (x @ torch.randn(16, 4, generator=g)).argmax(dim=1)
    torch.manual_seed(2)
    model = torch.nn.Sequential(torch.nn.Linear(16, 32), torch.nn.ReLU(), torch.nn.Linear(32, 4))
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    el = Elastic(model, opt, dataset_size=480, global_batch_size=48, virtual_shards=4, seed=3)
    if pr.ENV in os.environ:
        sys.exit("DDP_PROGRESS_FILE still in the environment")
    p = pr.read_file(page_path(rank))
    if not p or p["pid"] != os.getpid() or p["rank"] != rank or p["world"] != world or \
            p["round"] < 1 or p["seq"] != 0:
        sys.exit("rank %d: page after the group formed: %s" % (rank, p))

    def closure(idx):
        if el.ledger.step == args.late_step and rank == args.late_rank:
            wait_peer_blocked(1 - rank, seq_before + 1)
        loss = torch.nn.functional.cross_entropy(model(x[idx]), y[idx])
        loss.backward()
        return loss

    per_step = 2  # the shard slots and the quantized gradients
    seq_before = 0
    for step in el.steps(epochs=100):
        if step >= args.steps:
            break
        seq_before = pr.read_file(page_path(rank))["seq"]
        el.step(closure)
        p = pr.read_file(page_path(rank))
        if p["seq"] != seq_before + per_step or p["step"] != step + 1:
            sys.exit("rank %d step %d: seq %d -> %d, step %d" % (rank, step, seq_before,
                                                                  p["seq"], p["step"]))
    with el.phase("checkpoint"):
        p = pr.read_file(page_path(rank))
        if p["phase"] != pr.PHASE_CHECKPOINT:
            sys.exit("rank %d: phase %s in el.phase('checkpoint')" % (rank, p["phase"]))
    p = pr.read_file(page_path(rank))
    mine = len(el.ledger.plan(el.rank, el.world_size))
    if p["phase"] != pr.PHASE_COMPUTE or p["op"] != pr.OP_ALLREDUCE or \
            p["left_ns"] < p["entered_ns"] or p["waiting_on"] != -1 or p["shards"] != mine or \
            p["compute_ns"] + p["wait_ns"] != p["step_ns"] or p["step_ns"] <= 0 or \
            p["bytes"] <= 0:
        sys.exit("rank %d: page at the end: %s" % (rank, p))
    el.close()
    if pr.read_file(page_path(rank))["phase"] != pr.PHASE_SHUTDOWN:
        sys.exit("rank %d: no SHUTDOWN after close()" % rank)
    print("ELASTIC progress ok rank=%d seq=%d steps=%d" % (rank, p["seq"], p["step"]))


if __name__ == "__main__":
    main()
