"""A ddplaunch.torch worker for the tests: an MLP on synthetic data (or the
digits set with --digits), trained with Elastic; one thread, so that a
shard's bits do not depend on the machine's load.

  elastic_worker.py --epochs E [--n N --g G --v V --seed S --pace_ms MS]
                    [--features F --hidden H --every K]
                    [--out FILE] [--digits PATH]
                    [--save FILE --stop_after S] [--resume FILE] [--report_res]
                    [--sched_step K] [--check_every P] [--allow_mismatch]

Lines: "ELASTIC start ...", "ELASTIC step step=S world=W rank=R pid=P
t=UNIX loss=L cw=C" after every step whose world (or C: the world the
step was computed at here, "-" when rolled forward past it) differs from
the last one printed (and every 25 steps), "ELASTIC done ... sha=HEX" at the end; --out: rank 0
writes the digest there. --save: rank 0 writes el.state_dict() there (torch.save)
once step S is committed, and every rank stops there (a whole job that ends
after its last disk checkpoint); --resume: every rank loads that file first.
--report_res: 5 steps after each re-formation, "ELASTIC res reforms=K
fds=F tasks=T threads=P pid=P": the process's open fds, its threads (the
kernel's count, C++ ones included) and its Python threads.
--sched_step K: a StepLR (every K steps, gamma 0.5) that Elastic steps and
carries. --check_every P: Elastic's replica check period (0: off).
ELASTIC_SKEW=RANK:WHAT (tests of the numeric identity): that rank alone
(RANK "*": this process, whatever its rank) runs with 2 threads
(WHAT=threads) or with TF32 matmuls allowed (WHAT=tf32); --allow_mismatch
accepts it. A ReformError ends the worker
with "ELASTIC error kind=CLASS rank=R: MESSAGE" and exit status 3.
"""
import argparse
import gzip
import os
import sys
import threading
import time

import torch

from ddplaunch.torch import Elastic, ReformError, state_digest


def data(args):
    if args.digits:
        with gzip.open(args.digits, "rt") as f:
            rows = [[int(v) for v in line.split(",")] for line in f if line.strip()]
        t = torch.tensor(rows, dtype=torch.float32)
        return t[:, :64] / 16.0, t[:, 64].long()
    g = torch.Generator()
    g.manual_seed(1234)
    x = torch.randn(args.n, args.features, generator=g)
    w = torch.randn(args.features, 4, generator=g)
    return x, (x @ w).argmax(dim=1)


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--epochs", type=int, default=2)
    p.add_argument("--n", type=int, default=960)
    p.add_argument("--g", type=int, default=48)
    p.add_argument("--v", type=int, default=8)
    p.add_argument("--seed", type=int, default=7)
    p.add_argument("--pace_ms", type=float, default=0.0)
    p.add_argument("--features", type=int, default=16)
    p.add_argument("--hidden", type=int, default=32)
    p.add_argument("--every", type=int, default=25,
                   help="a step line every this many steps (and at each new world)")
    p.add_argument("--out")
    p.add_argument("--digits")
    p.add_argument("--save")
    p.add_argument("--stop_after", type=int, default=-1)
    p.add_argument("--resume")
    p.add_argument("--report_res", action="store_true")
    p.add_argument("--init_by_rank", action="store_true",
                   help="each rank's own initial weights (rank 0's must win)")
    p.add_argument("--sched_step", type=int, default=0)
    p.add_argument("--check_every", type=int, default=1)
    p.add_argument("--allow_mismatch", action="store_true")
    args = p.parse_args()
    try:
        train(args)
    except ReformError as e:
        print("ELASTIC error kind=%s rank=%s: %s" % (type(e).__name__,
                                                     os.environ.get("RANK", "0"), e), flush=True)
        sys.stdout.flush()
        os._exit(3)


def skew():
    """ELASTIC_SKEW=RANK:WHAT: this rank's numeric setting made to differ."""
    rank, _, what = os.environ.get("ELASTIC_SKEW", "").partition(":")
    if not rank or (rank != "*" and int(rank) != int(os.environ.get("RANK", "0"))):
        return 1
    if what == "tf32":
        torch.backends.cuda.matmul.allow_tf32 = True
        return 1
    return 2  # threads


def train(args):
    torch.set_num_threads(1)
    torch.manual_seed(int(os.environ.get("RANK", "0")) if args.init_by_rank else 0)
    x, y = data(args)
    model = torch.nn.Sequential(torch.nn.Linear(x.shape[1], args.hidden), torch.nn.Tanh(),
                                torch.nn.Linear(args.hidden, 10))
    opt = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)
    sched = (torch.optim.lr_scheduler.StepLR(opt, args.sched_step, 0.5)
             if args.sched_step else None)
    el = Elastic(model, opt, dataset_size=len(x), global_batch_size=args.g,
                 virtual_shards=args.v, seed=args.seed, scheduler=sched, threads=skew(),
                 check_every=args.check_every, allow_numeric_mismatch=args.allow_mismatch)
    if args.resume:
        el.load_state_dict(torch.load(args.resume))

    def closure(idx):
        loss = torch.nn.functional.cross_entropy(model(x[idx]), y[idx])
        loss.backward()
        if args.pace_ms:
            time.sleep(args.pace_ms / 1000.0 / max(1, len(el.ledger.plan(el.rank,
                                                                        el.world_size))))
        return loss

    pid = os.getpid()
    print("ELASTIC start rank=%d world=%d pid=%d" % (el.rank, el.world_size, pid), flush=True)
    shown = None
    reforms, since = 0, None
    for step in el.steps(epochs=args.epochs):
        loss = el.step(closure)
        if args.report_res:
            if el.reformations != reforms:
                reforms, since = el.reformations, step
            if since is not None and step - since == 5:
                since = None
                print("ELASTIC res reforms=%d fds=%d tasks=%d threads=%d pid=%d" %
                      (reforms, len(os.listdir("/proc/self/fd")),
                       len(os.listdir("/proc/self/task")), threading.active_count(), pid),
                      flush=True)
        if (el.world_size, el.step_world) != shown or step % args.every == 0:
            shown = (el.world_size, el.step_world)
            print("ELASTIC step step=%d world=%d rank=%d pid=%d t=%.6f loss=%.5f cw=%s" %
                  (step, el.world_size, el.rank, pid, time.time(), loss,
                   el.step_world if el.step_world is not None else "-"), flush=True)
        if step == args.stop_after:
            if args.save and el.rank == 0:
                torch.save(el.state_dict(), args.save + ".tmp")
                os.replace(args.save + ".tmp", args.save)
            break
    sha = state_digest(el.state_dict())
    print("ELASTIC done steps=%d world=%d rank=%d pid=%d reforms=%d stragglers=%d healed=%d "
          "promise=%d lr=%r sha=%s" % (el.ledger.step, el.world_size, el.rank, pid,
                                       el.reformations, len(el.stragglers),
                                       sum(e["healed"] for e in el.replica_events),
                                       el.numerics["promise"], opt.param_groups[0]["lr"], sha),
          flush=True)
    if args.out and el.rank == 0:
        with open(args.out + ".tmp", "w") as f:
            f.write(sha + "\n")
        os.replace(args.out + ".tmp", args.out)


if __name__ == "__main__":
    main()
    if os.environ.get("ELASTIC_PLAIN_EXIT"):
        sys.exit(0)  # the interpreter's own exit: a retired group must not hang it
    # past torch 2.15's C++ teardown at exit (tests/launcher/ddp_gloo.py)
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(0)
