#!/usr/bin/python3
"""Integration tests of ddp-train: the real binary, under the real ddplaunch,
on loopback (ddplaunch --standalone picks a free port), in a temporary
directory that is removed afterwards.

  train_it.py --ddp-train PATH --ddplaunch PATH --source DIR CASE

Cases:
  digits        the README's main job reaches >= 95% held-out accuracy in
                under a minute; its metrics file plots to a PNG
  equivalence   N ranks x batch B == 1 rank x batch N*B after 100 steps
                (SyncBatchNorm), N given by --ranks
  resume        a rank SIGKILLs itself at a random step (--fault_kill_step),
                ddplaunch restarts the group, it resumes and ends with a final
                checkpoint byte-identical to an uninterrupted run
  resume_external  the same with the SIGKILL sent by this test to the
                rank's pid at a random moment
  shards        --global_batch_size G --virtual_shards V: final.safetensors
                byte-identical (SHA-256) for 1, 2, 3 and 4 ranks (3 does not
                divide V), on digits and synthetic, BatchNorm on; metrics
                lines carry "time" and "world"
  shards_resume the same job stopped at a step by a SIGKILL with 2 ranks and
                run again with 3 resumes from its checkpoint into the same
                bits as an undisturbed 1-rank run
  pitfalls      a 'module.'-prefixed checkpoint loads strictly; one missing a
                tensor (or with an extra one) is refused, naming it
  real_client   the checkpoint read by the 'safetensors' package from PyPI
                (in a venv in the build directory) and by PyTorch; a file
                PyTorch's safetensors writes (no checksums) resumes, saying
                it is not verified
  ckpt_verify   bit flips in tensor data, NaN/Inf values, a step past the
                run, a non-hex rng_state, trailing bytes: each refused by
                name before any step; a file without checksums loads
  ckpt_fallback latest.safetensors damaged before the restart: the group
                falls back to previous.safetensors, says so, and ends with
                the uninterrupted run's final checkpoint
  no_strict     --no-strict into a deeper model: the tensors not in the
                checkpoint keep their fresh initialisation (the model
                trains), and the run lists what was loaded and what not
  outputs       a checkpoint_dir that is a file is refused before training;
                a metrics file on /dev/full or on a full tmpfs, and a
                checkpoint on a full tmpfs, are reported and fail the run
  bad_inputs    a directory, FIFO or /dev/zero as --config, --data_path or
                --resume is refused by kind; an empty CSV says so; a model
                too large says how much memory it needs
Exit 0 pass, 1 fail, 77 skip.
"""
import argparse
import json
import os
import random
import shutil
import struct
import subprocess
import sys
import tempfile
import time

import numpy as np

RUN_TIMEOUT = 120


class Fail(Exception):
    pass


def check(cond, msg):
    if not cond:
        raise Fail(msg)


# ---- safetensors, read and written by hand (numpy only) -------------------

DTYPES = {"F32": np.float32, "F64": np.float64}


def read_st(path):
    with open(path, "rb") as f:
        raw = f.read()
    (n,) = struct.unpack("<Q", raw[:8])
    header = json.loads(raw[8:8 + n])
    meta = header.pop("__metadata__", {})
    base = 8 + n
    tensors = {}
    for name, h in header.items():
        a, b = h["data_offsets"]
        arr = np.frombuffer(raw[base + a:base + b], dtype=DTYPES[h["dtype"]])
        tensors[name] = arr.reshape(h["shape"])
    return tensors, meta


def write_st(path, tensors, meta):
    header, blobs, off = {}, [], 0
    for name, arr in tensors.items():
        data = np.ascontiguousarray(arr, dtype=np.float32).tobytes()
        header[name] = {"dtype": "F32", "shape": list(arr.shape),
                        "data_offsets": [off, off + len(data)]}
        blobs.append(data)
        off += len(data)
    header["__metadata__"] = meta
    hb = json.dumps(header).encode()
    hb += b" " * (-len(hb) % 8)
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(hb)) + hb + b"".join(blobs))


# ---- running the binaries --------------------------------------------------

class Env:
    def __init__(self, args, tmp):
        self.trainer = args.ddp_train
        self.launcher = args.ddplaunch
        self.source = args.source
        self.tmp = tmp
        self.build = args.build_dir
        self.device = args.device

    def launch(self, nproc, train_args, max_restarts=0, expect_ok=True, timeout=RUN_TIMEOUT,
               worker=None):
        cmd = [self.launcher, "--standalone", "--nproc_per_node=%d" % nproc,
               "--max_restarts=%d" % max_restarts, "--grace_period=5"] + (
                   worker or [self.trainer]) + train_args + ["--device", self.device]
        return self._run(cmd, expect_ok, timeout)

    def _run(self, cmd, expect_ok, timeout=RUN_TIMEOUT):
        env = dict(os.environ, OPENBLAS_NUM_THREADS="1", DDP_TIMEOUT_MS="60000")
        t0 = time.monotonic()
        p = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                           timeout=timeout, env=env)
        p.wall = time.monotonic() - t0
        if expect_ok and p.returncode != 0:
            raise Fail("command failed (%d): %s\nstdout:\n%s\nstderr:\n%s" % (
                p.returncode, " ".join(cmd), p.stdout[-3000:], p.stderr[-3000:]))
        return p


def synthetic_args(ckdir, batch, steps=100):
    return ["--data", "synthetic", "--synthetic_samples", "2048", "--synthetic_features", "16",
            "--synthetic_classes", "4", "--hidden", "32,32", "--held_out", "0",
            "--max_steps", str(steps), "--batch_size", str(batch), "--sync_bn",
            "--eval_every_epoch", "false", "--lr", "0.02", "--seed", "3", "--threads", "1",
            "--checkpoint_dir", ckdir]


def digits_args(env, ckdir, extra=()):
    return ["--config", os.path.join(env.source, "configs", "digits.ini"),
            "--checkpoint_dir", ckdir] + list(extra)


# ---- cases -----------------------------------------------------------------

def case_digits(env, args):
    metrics = os.path.join(env.tmp, "metrics.jsonl")
    p = env.launch(2, ["--config", os.path.join(env.source, "configs", "digits.ini"),
                       "--metrics", metrics])
    check(p.wall < 60, "the main job took %.1f s (limit 60 s)" % p.wall)
    recs = [json.loads(line) for line in open(metrics)]
    evals = [r for r in recs if r["kind"] == "eval"]
    trains = [r for r in recs if r["kind"] == "train"]
    check(evals and trains, "metrics file lacks train or eval records")
    acc = evals[-1]["accuracy"]
    check(acc >= 0.95, "held-out accuracy %.4f < 0.95" % acc)
    check(trains[-1]["loss"] < trains[0]["loss"], "training loss did not fall")
    check("samples/s" in p.stdout and "allreduce" in p.stdout, "no progress line on stdout")
    png = os.path.join(env.tmp, "curves.png")
    subprocess.run([os.path.join(env.source, "scripts", "plot_metrics.sh"), metrics, png],
                   check=True, timeout=60, stdout=subprocess.DEVNULL)
    with open(png, "rb") as f:
        check(f.read(8) == b"\x89PNG\r\n\x1a\n", "plot_metrics.sh did not write a PNG")
    check(all(k in trains[-1] for k in ("epoch", "step", "lr", "samples_per_s",
                                        "allreduce_share")), "train record lacks fields")
    # Without a launcher (no RANK / WORLD_SIZE): one process, same program.
    env_solo = {k: v for k, v in os.environ.items()
                if k not in ("RANK", "WORLD_SIZE", "LOCAL_RANK", "MASTER_ADDR", "MASTER_PORT")}
    solo = subprocess.run([env.trainer, "--config",
                           os.path.join(env.source, "configs", "digits.ini"), "--epochs", "3",
                           "--device", env.device],
                          capture_output=True, text=True, timeout=RUN_TIMEOUT, env=env_solo)
    check(solo.returncode == 0 and "1 rank(s)" in solo.stderr and "accuracy" in solo.stdout,
          "ddp-train without a launcher failed:\n" + solo.stdout[-1000:] + solo.stderr[-1000:])
    print("digits: held-out accuracy %.2f%% in %.1f s with 2 ranks" % (100 * acc, p.wall))


def max_rel_diff(a, b, skip_prefix=None):
    worst = ("", 0.0)
    for name in b:
        if skip_prefix and name.startswith(skip_prefix):
            continue
        den = float(np.linalg.norm(b[name].astype(np.float64)))
        num = float(np.linalg.norm(a[name].astype(np.float64) - b[name]))
        rel = num / den if den > 0 else num
        if rel > worst[1]:
            worst = (name, rel)
    return worst


def case_equivalence(env, args):
    n, b = args.ranks, 8
    one, many = os.path.join(env.tmp, "one"), os.path.join(env.tmp, "many")
    env.launch(1, synthetic_args(one, n * b))
    env.launch(n, synthetic_args(many, b))
    ta, ma = read_st(os.path.join(many, "final.safetensors"))
    tb, mb = read_st(os.path.join(one, "final.safetensors"))
    check(set(ta) == set(tb), "tensor names differ: %s" % (set(ta) ^ set(tb)))
    check(ma["step"] == mb["step"] == "100", "steps %s / %s, want 100" % (ma["step"], mb["step"]))
    name, rel = max_rel_diff(ta, tb, "optimizer.")
    # Momentum buffers as one vector: the Linear biases before a BatchNorm
    # have a gradient that is zero up to rounding, so their buffers alone are
    # noise; the optimizer state as a whole is compared instead.
    keys = sorted(k for k in tb if k.startswith("optimizer."))
    ma_all = np.concatenate([ta[k].ravel().astype(np.float64) for k in keys])
    mb_all = np.concatenate([tb[k].ravel().astype(np.float64) for k in keys])
    mom_rel = float(np.linalg.norm(ma_all - mb_all) / np.linalg.norm(mb_all))
    print("equivalence: %d ranks x %d vs 1 rank x %d after 100 steps: max relative "
          "difference %.3g (%s), momentum state %.3g" % (n, b, n * b, rel, name, mom_rel))
    check(rel <= 1e-5, "relative difference %.3g in %s exceeds 1e-5" % (rel, name))
    check(mom_rel <= 1e-5, "momentum state relative difference %.3g exceeds 1e-5" % mom_rel)
    # The comparison must be able to fail: training moved the weights far.
    moved = np.linalg.norm(ta["0.weight"] - read_first_weight(env, n, b))
    check(moved > 1e-2, "weights barely moved (%.3g): the test would not see a bug" % moved)


def read_first_weight(env, n, b):
    """0.weight after zero steps (same seed): the starting point."""
    d = os.path.join(env.tmp, "zero")
    env.launch(1, synthetic_args(d, b, steps=1) + ["--lr", "0"])
    return read_st(os.path.join(d, "final.safetensors"))[0]["0.weight"]


def case_resume(env, args):
    seed = args.seed if args.seed is not None else time.time_ns() % 1000000
    rng = random.Random(seed)
    steps, every = 150, 10
    # Any step: before the first checkpoint the restart starts from step 0.
    kill_step = rng.randint(1, steps - 1)
    kill_rank = rng.randint(0, 1)
    base, faulty = os.path.join(env.tmp, "base"), os.path.join(env.tmp, "faulty")
    extra = ["--max_steps", str(steps), "--checkpoint_every", str(every)]
    env.launch(2, digits_args(env, base, extra))
    p = env.launch(2, digits_args(env, faulty, extra + [
        "--fault_kill_step", str(kill_step), "--fault_rank", str(kill_rank)]), max_restarts=1)
    out = p.stdout + p.stderr
    check("fault_kill_step" in out, "the fault was not injected:\n" + out[-2000:])
    resumed = "no checkpoint" if kill_step < every else "resumed from"
    check(resumed in out, "the restarted group did not say '%s' (--seed %d):\n%s"
          % (resumed, seed, out[-2000:]))
    a = open(os.path.join(base, "final.safetensors"), "rb").read()
    b = open(os.path.join(faulty, "final.safetensors"), "rb").read()
    print("resume: rank %d killed before step %d (checkpoint every %d, --seed %d), final "
          "checkpoints %d and %d bytes" % (kill_rank, kill_step, every, seed, len(a), len(b)))
    if a != b:
        ta, _ = read_st(os.path.join(base, "final.safetensors"))
        tb, _ = read_st(os.path.join(faulty, "final.safetensors"))
        raise Fail("final checkpoints differ; worst tensor %s (%.3g)" % max_rel_diff(tb, ta))


SHARD_WORLDS = (1, 2, 3, 4)


def shard_jobs(env, ckdir, steps):
    """(name, args) of the digits and synthetic jobs with a fixed global
    batch of 8 virtual shards (BatchNorm on, ghost batches)."""
    synthetic = [a for a in synthetic_args(ckdir, 8, steps) if a != "--sync_bn"]
    return [("digits", digits_args(env, ckdir, ["--max_steps", str(steps), "--global_batch_size",
                                                "64", "--virtual_shards", "8"])),
            ("synthetic", synthetic + ["--held_out", "0.1", "--global_batch_size", "48",
                                       "--virtual_shards", "8"])]


def sha256(path):
    import hashlib
    with open(path, "rb") as f:
        return hashlib.sha256(f.read()).hexdigest()


def check_time_world(metrics, world, t0, t1):
    trains = [json.loads(line) for line in open(metrics)]
    trains = [r for r in trains if r["kind"] == "train"]
    check(trains, "no train record in %s" % metrics)
    for r in trains:
        check(r.get("world") == world, "record %s: world %r, want %d" % (r, r.get("world"), world))
        check(t0 <= r.get("time", 0) <= t1, "record %s: time not within the run (%.3f..%.3f)"
              % (r, t0, t1))
        check(isinstance(r["time"], float), "time %r is not a number with a sub-second part"
              % r["time"])


def case_shards(env, args):
    steps = 60
    for name, _ in shard_jobs(env, "", steps):
        digests = {}
        for w in SHARD_WORLDS:
            ck = os.path.join(env.tmp, "%s-%d" % (name, w))
            metrics = os.path.join(env.tmp, "%s-%d.jsonl" % (name, w))
            job = dict(shard_jobs(env, ck, steps))[name]
            t0 = time.time()
            env.launch(w, job + ["--metrics", metrics, "--log_every", "10"])
            check_time_world(metrics, w, t0, time.time())
            digests[w] = sha256(os.path.join(ck, "final.safetensors"))
        print("shards: %s, %d steps, final.safetensors SHA-256 per rank count: %s" % (
            name, steps, " ".join("%d:%s" % (w, d[:12]) for w, d in digests.items())))
        first = os.path.join(env.tmp, "%s-1" % name, "final.safetensors")
        for w, d in digests.items():
            if d != digests[1]:
                ta, _ = read_st(os.path.join(env.tmp, "%s-%d" % (name, w), "final.safetensors"))
                tb, _ = read_st(first)
                raise Fail("%s: %d ranks' final checkpoint differs from 1 rank's; worst "
                           "tensor %s (%.3g)" % ((name, w) + max_rel_diff(ta, tb)))
        # The comparison must be able to fail: training moved the weights.
        zero = os.path.join(env.tmp, "%s-zero" % name)
        env.launch(1, dict(shard_jobs(env, zero, 1))[name] + ["--lr", "0"])
        moved = np.linalg.norm(read_st(first)[0]["0.weight"] -
                               read_st(os.path.join(zero, "final.safetensors"))[0]["0.weight"])
        check(moved > 1e-2, "%s: weights barely moved (%.3g)" % (name, moved))


def case_shards_resume(env, args):
    steps, every, kill = 60, 10, 27
    for name, _ in shard_jobs(env, "", steps):
        base, faulty = os.path.join(env.tmp, name + "-base"), os.path.join(env.tmp, name + "-f")
        env.launch(1, dict(shard_jobs(env, base, steps))[name])
        job = dict(shard_jobs(env, faulty, steps))[name] + ["--checkpoint_every", str(every)]
        p = env.launch(2, job + ["--fault_kill_step", str(kill), "--fault_rank", "1"],
                       expect_ok=False)
        check(p.returncode != 0 and "fault_kill_step" in p.stdout + p.stderr,
              "%s: the 2-rank run was not stopped by the fault:\n%s" % (name, p.stderr[-2000:]))
        p = env.launch(3, job)
        check("resumed from" in p.stderr and "at step 20" in p.stderr,
              "%s: the 3-rank run did not resume at step 20:\n%s" % (name, p.stderr[-2000:]))
        check("changes the data order" not in p.stderr,
              "%s: resuming with another rank count warned of another data order" % name)
        a = sha256(os.path.join(base, "final.safetensors"))
        b = sha256(os.path.join(faulty, "final.safetensors"))
        print("shards_resume: %s, 2 ranks killed before step %d, resumed by 3 ranks from step "
              "20: final SHA-256 %s, 1 rank undisturbed %s" % (name, kill, b[:12], a[:12]))
        check(a == b, "%s: the resumed run's final checkpoint differs from the undisturbed "
              "1-rank run's" % name)


def find_worker(marker, rank):
    """PID of our ddp-train worker of `rank` on attempt 0: its command line
    holds this test's private directory, so only our own process matches."""
    for pid in filter(str.isdigit, os.listdir("/proc")):
        try:
            with open("/proc/%s/cmdline" % pid, "rb") as f:
                argv = f.read().split(b"\0")
            with open("/proc/%s/environ" % pid, "rb") as f:
                envs = set(f.read().split(b"\0"))
        except OSError:
            continue
        if (os.path.basename(argv[0]) == b"ddp-train" and marker.encode() in b" ".join(argv)
                and b"RANK=%d" % rank in envs and b"TORCHELASTIC_RESTART_COUNT=0" in envs):
            return int(pid)
    return None


def last_step(metrics):
    try:
        with open(metrics) as f:
            lines = f.read().splitlines()
        return max((json.loads(l)["step"] for l in lines if l.endswith("}")), default=0)
    except (OSError, ValueError):
        return 0


def case_resume_external(env, args):
    """The same, but the SIGKILL comes from outside, at whatever point of the
    step (or of a checkpoint write) the chosen step's rank happens to be."""
    seed = args.seed if args.seed is not None else time.time_ns() % 1000000
    rng = random.Random(seed)
    steps, every = 1500, 50
    target, kill_rank = rng.randint(20, 900), rng.randint(0, 1)
    base, faulty = os.path.join(env.tmp, "base"), os.path.join(env.tmp, "faulty")
    metrics = os.path.join(env.tmp, "faulty.jsonl")
    extra = ["--max_steps", str(steps), "--checkpoint_every", str(every), "--log_every", "1",
             "--eval_every_epoch", "false"]
    env.launch(2, digits_args(env, base, extra))
    cmd = [env.launcher, "--standalone", "--nproc_per_node=2", "--max_restarts=1",
           "--grace_period=5", env.trainer] + digits_args(env, faulty, extra + [
               "--metrics", metrics, "--device", env.device])
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            env=dict(os.environ, OPENBLAS_NUM_THREADS="1"))
    killed, deadline = None, time.monotonic() + 60
    try:
        while killed is None and time.monotonic() < deadline and proc.poll() is None:
            if last_step(metrics) >= target:
                pid = find_worker(faulty, kill_rank)
                check(pid is not None, "rank %d's process was not found" % kill_rank)
                os.kill(pid, 9)
                killed = last_step(metrics)
            else:
                time.sleep(0.002)
        out, err = proc.communicate(timeout=RUN_TIMEOUT)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    check(killed is not None, "the run ended (or timed out) before step %d (--seed %d)"
          % (target, seed))
    check(proc.returncode == 0, "the restarted run failed (%d):\n%s" % (proc.returncode,
                                                                        err[-2000:]))
    check("ddp-train: restart 1:" in out + err,
          "the restarted group did not report its restart:\n" + (out + err)[-2000:])
    a = open(os.path.join(base, "final.safetensors"), "rb").read()
    b = open(os.path.join(faulty, "final.safetensors"), "rb").read()
    print("resume_external: rank %d SIGKILLed from outside near step %d (--seed %d); final "
          "checkpoints identical: %s" % (kill_rank, killed, seed, a == b))
    check(a == b, "final checkpoints differ after an external SIGKILL")


def case_pitfalls(env, args):
    base = os.path.join(env.tmp, "base")
    extra = ["--max_steps", "40"]
    env.launch(2, digits_args(env, base, extra))
    final = os.path.join(base, "final.safetensors")
    tensors, meta = read_st(final)

    # 1. Saved from a DDP-wrapped model: every model name carries 'module.'.
    pref = os.path.join(env.tmp, "prefixed.safetensors")
    write_st(pref, {("module." + k if not k.startswith("optimizer.") else k): v
                    for k, v in tensors.items()}, meta)
    out = os.path.join(env.tmp, "from_prefixed")
    p = env.launch(2, digits_args(env, out, extra + ["--resume", pref]))
    check("module." in p.stdout + p.stderr, "the prefix strip was not reported")
    check(open(os.path.join(out, "final.safetensors"), "rb").read() == open(final, "rb").read(),
          "a strict load of the 'module.'-prefixed checkpoint did not restore the state")

    # 2. A tensor missing: refused, naming it; nothing trains.
    miss = os.path.join(env.tmp, "missing.safetensors")
    write_st(miss, {k: v for k, v in tensors.items() if k != "3.weight"}, meta)
    p = env.launch(2, digits_args(env, os.path.join(env.tmp, "m"), extra + ["--resume", miss]),
                   expect_ok=False)
    check(p.returncode != 0, "a checkpoint missing '3.weight' was accepted")
    check("3.weight" in p.stderr and "missing" in p.stderr,
          "the refusal does not name '3.weight':\n" + p.stderr[-2000:])

    # 3. An unexpected tensor: refused strictly, accepted with --no-strict.
    extra_t = dict(tensors)
    extra_t["7.weight"] = np.zeros((2, 2), np.float32)
    unexp = os.path.join(env.tmp, "unexpected.safetensors")
    write_st(unexp, extra_t, meta)
    p = env.launch(2, digits_args(env, os.path.join(env.tmp, "u"), extra + ["--resume", unexp]),
                   expect_ok=False)
    check(p.returncode != 0 and "7.weight" in p.stderr,
          "an unexpected '7.weight' was not refused by name:\n" + p.stderr[-2000:])
    p = env.launch(2, digits_args(env, os.path.join(env.tmp, "u2"),
                                  extra + ["--resume", unexp, "--no-strict"]))
    check("7.weight" in p.stdout + p.stderr, "--no-strict did not list the unexpected tensor")
    print("pitfalls: 'module.' prefix loaded strictly; missing and unexpected tensors named")


VENV_CHECK = r"""
import sys, json
import numpy as np
from safetensors import safe_open
from safetensors.numpy import load_file
import torch
from safetensors.torch import load_file as torch_load

path, digits, expect = sys.argv[1], sys.argv[2], json.loads(sys.argv[3])
arrays = load_file(path)
assert sorted(arrays) == sorted(expect), (sorted(arrays), sorted(expect))
for k, shape in expect.items():
    assert list(arrays[k].shape) == shape and arrays[k].dtype == np.float32, k
with safe_open(path, framework="np") as f:
    meta = f.metadata()
assert meta["format"] == "pt" and int(meta["step"]) > 0, meta

net = torch.nn.Sequential(
    torch.nn.Linear(64, 256), torch.nn.BatchNorm1d(256), torch.nn.ReLU(),
    torch.nn.Linear(256, 256), torch.nn.BatchNorm1d(256), torch.nn.ReLU(),
    torch.nn.Linear(256, 10))
res = net.load_state_dict(torch_load(path), strict=False)
assert all(k.endswith("num_batches_tracked") for k in res.missing_keys), res.missing_keys
assert all(k.startswith("optimizer.") for k in res.unexpected_keys), res.unexpected_keys
data = np.loadtxt(digits, delimiter=",", dtype=np.float32)
net.eval()
with torch.no_grad():
    pred = net(torch.from_numpy(data[:, :64] / 16.0)).argmax(1).numpy()
acc = float((pred == data[:, 64]).mean())
print("torch accuracy on all digits: %.4f" % acc)
assert acc >= 0.95, acc
"""


VENV_RESAVE = r"""
import sys
from safetensors import safe_open
from safetensors.torch import load_file, save_file
with safe_open(sys.argv[1], framework="pt") as f:
    meta = {k: v for k, v in f.metadata().items() if not k.startswith("xxh3_64:")}
save_file(load_file(sys.argv[1]), sys.argv[2], metadata=meta)
"""


def ensure_venv(env):
    venv = os.path.join(env.build, "safetensors-venv")
    py = os.path.join(venv, "bin", "python")
    if os.path.exists(py) and subprocess.run([py, "-c", "import safetensors"]).returncode == 0:
        return py
    shutil.rmtree(venv, ignore_errors=True)
    r = subprocess.run(["/usr/bin/python3", "-m", "venv", "--system-site-packages", venv],
                       capture_output=True, text=True, timeout=120)
    if r.returncode == 0:
        r = subprocess.run([py, "-m", "pip", "install", "--quiet", "safetensors"],
                           capture_output=True, text=True, timeout=300)
    if r.returncode != 0:
        print("skip: cannot install safetensors from PyPI into %s:\n%s" % (venv, r.stderr[-1500:]))
        shutil.rmtree(venv, ignore_errors=True)
        sys.exit(77)
    return py


def case_real_client(env, args):
    py = ensure_venv(env)
    ck = os.path.join(env.tmp, "ck")
    env.launch(2, digits_args(env, ck))
    final = os.path.join(ck, "final.safetensors")
    mine, _ = read_st(final)
    expect = {k: list(v.shape) for k, v in mine.items()}
    check(len(expect) == 14 + 10, "expected 14 model tensors + 10 momentum buffers, got %d"
          % len(expect))
    digits = os.path.join(env.tmp, "digits.csv")
    subprocess.run("gzip -dc '%s' > '%s'" % (os.path.join(env.source, "data", "digits.csv.gz"),
                                               digits), shell=True, check=True)
    r = subprocess.run([py, "-c", VENV_CHECK, final, digits, json.dumps(expect)],
                       capture_output=True, text=True, timeout=120)
    check(r.returncode == 0, "the safetensors/torch reader failed:\n" + r.stdout + r.stderr)
    torch_said = r.stdout.strip()
    # Written back by PyTorch's safetensors (its own layout, no checksums):
    # ddp-train resumes from it and says it could not verify it.
    resaved = os.path.join(env.tmp, "resaved.safetensors")
    r = subprocess.run([py, "-c", VENV_RESAVE, final, resaved], capture_output=True, text=True,
                       timeout=120)
    check(r.returncode == 0, "safetensors.torch could not re-save:\n" + r.stdout + r.stderr)
    step = int(read_st(final)[1]["step"])
    p = env.launch(2, digits_args(env, os.path.join(env.tmp, "again"), [
        "--resume", resaved, "--max_steps", str(step + 20)]))
    check("no checksums" in p.stderr and "not verified" in p.stderr and
          "done: 20 steps" in p.stderr,
          "a file PyTorch wrote did not resume as unverified:\n" + p.stderr[-2000:])
    print("real_client: safetensors and torch read %d tensors; %s; the file safetensors.torch "
          "wrote back resumes, unverified" % (len(expect), torch_said))


def no_sums(meta):
    """The metadata without the per-tensor checksums (as a file another tool
    wrote would have it)."""
    return {k: v for k, v in meta.items() if not k.startswith("xxh3_64:")}


def refused(env, ckpt, args, *words, extra=("--max_steps", "80")):
    """--resume ckpt must fail before the first step, with every word in
    the message."""
    p = env.launch(1, digits_args(env, os.path.join(env.tmp, "r"), list(extra) + [
        "--resume", ckpt]), expect_ok=False, timeout=60)
    check(p.returncode != 0, "'%s' was accepted:\n%s" % (ckpt, p.stderr[-2000:]))
    check("done:" not in p.stderr and "epoch " not in p.stdout,
          "training ran on '%s':\n%s" % (ckpt, (p.stdout + p.stderr)[-2000:]))
    for w in words:
        check(w in p.stderr, "the refusal of '%s' lacks %r:\n%s" % (ckpt, w, p.stderr[-2000:]))
    return p


def case_ckpt_verify(env, args):
    seed = args.seed if args.seed is not None else time.time_ns() % 1000000
    rng = random.Random(seed)
    base = os.path.join(env.tmp, "base")
    extra = ["--max_steps", "40"]
    env.launch(1, digits_args(env, base, extra))
    final = os.path.join(base, "final.safetensors")
    raw = open(final, "rb").read()
    (hlen,) = struct.unpack("<Q", raw[:8])
    tensors, meta = read_st(final)
    offsets = json.loads(raw[8:8 + hlen])
    # 1. Bit flips anywhere in the tensors' bytes: refused naming the tensor.
    for i in range(15):
        pos = rng.randrange(8 + hlen, len(raw))
        name = next(k for k, h in offsets.items() if k != "__metadata__"
                    and h["data_offsets"][0] <= pos - 8 - hlen < h["data_offsets"][1])
        flipped = bytearray(raw)
        flipped[pos] ^= 1 << rng.randrange(8)
        bad = os.path.join(env.tmp, "flip%d.safetensors" % i)
        open(bad, "wb").write(flipped)
        refused(env, bad, args, "'%s'" % name, "checksum", "corrupt")
    # 2. NaN / Inf values, in a file whose checksums match (rewritten by a
    # tool): refused naming the tensor.
    for value, name in ((np.nan, "3.weight"), (np.inf, "optimizer.0.bias.momentum_buffer")):
        t = dict(tensors)
        t[name] = np.array(t[name], copy=True)
        t[name].flat[7] = value
        bad = os.path.join(env.tmp, "nonfinite.safetensors")
        write_st(bad, t, no_sums(meta))
        refused(env, bad, args, "'%s'" % name, "NaN or infinite")
    bad = os.path.join(env.tmp, "allnan.safetensors")
    write_st(bad, {k: np.full(v.shape, np.nan, np.float32) for k, v in tensors.items()},
             no_sums(meta))
    refused(env, bad, args, "'0.weight'", "NaN or infinite")
    # 3. Metadata out of range: a step past the run, a non-hex rng_state.
    for key, value, words in (("step", "1000", ("step 1000", "past this run's 80 steps")),
                              ("step", "-5", ("'step' = '-5'",)),
                              ("rng_state", "zz" * 32, ("rng_state",)),
                              ("rng_state", "0" * 64, ("rng_state",))):
        bad = os.path.join(env.tmp, "meta.safetensors")
        write_st(bad, tensors, dict(meta, **{key: value}))
        refused(env, bad, args, *words)
    # 4. Trailing bytes after the last tensor.
    bad = os.path.join(env.tmp, "junk.safetensors")
    open(bad, "wb").write(raw + b"trailing junk")
    refused(env, bad, args, "after the last tensor", "trailing")
    # 5. Without checksums the file loads (not verified, and it says so).
    plain = os.path.join(env.tmp, "plain.safetensors")
    write_st(plain, tensors, no_sums(meta))
    p = env.launch(1, digits_args(env, os.path.join(env.tmp, "p"), ["--max_steps", "60",
                                                                    "--resume", plain]))
    check("no checksums" in p.stderr and "not verified" in p.stderr,
          "a file without checksums loaded without saying so:\n" + p.stderr[-2000:])
    print("ckpt_verify: 15 bit flips, NaN/Inf, step/rng_state out of range and trailing "
          "bytes refused by name (--seed %d); a file without checksums loads, unverified"
          % seed)


CORRUPT_THEN_EXEC = r"""
import os, sys
ck = sys.argv[1]
if os.environ.get("TORCHELASTIC_RESTART_COUNT") == "1" and os.environ.get("RANK") == "0":
    with open(ck, "r+b") as f:
        f.seek(-1, 2)
        last = f.read(1)
        f.seek(-1, 2)
        f.write(bytes([last[0] ^ 0x10]))
    print("test: flipped a bit of %s" % ck, flush=True)
os.execv(sys.argv[2], sys.argv[2:])
"""


def case_ckpt_fallback(env, args):
    steps, every, kill = 150, 10, 55
    base, faulty = os.path.join(env.tmp, "base"), os.path.join(env.tmp, "faulty")
    extra = ["--max_steps", str(steps), "--checkpoint_every", str(every)]
    env.launch(2, digits_args(env, base, extra))
    check(os.path.exists(os.path.join(base, "previous.safetensors")),
          "no previous.safetensors kept beside latest")
    latest = os.path.join(faulty, "latest.safetensors")
    wrapper = ["/usr/bin/python3", "-c", CORRUPT_THEN_EXEC, latest, env.trainer]
    p = env.launch(2, digits_args(env, faulty, extra + [
        "--fault_kill_step", str(kill), "--fault_rank", "1"]), max_restarts=1, worker=wrapper)
    out = p.stdout + p.stderr
    check("test: flipped a bit" in out, "the checkpoint was not damaged:\n" + out[-2000:])
    check("checksum" in out and "falling back" in out and
          "resumed from '%s' at step 40" % os.path.join(faulty, "previous.safetensors") in out,
          "the restart did not fall back to previous.safetensors:\n" + out[-3000:])
    a = open(os.path.join(base, "final.safetensors"), "rb").read()
    b = open(os.path.join(faulty, "final.safetensors"), "rb").read()
    check(a == b, "the final checkpoint after the fallback differs from the uninterrupted run's")
    print("ckpt_fallback: latest damaged before the restart; resumed from previous at step "
          "40; final checkpoint identical")


def held_out_accuracy(metrics):
    return [json.loads(line) for line in open(metrics) if '"eval"' in line][-1]["accuracy"]


def case_no_strict(env, args):
    base = os.path.join(env.tmp, "base")
    env.launch(1, digits_args(env, base, ["--max_steps", "200"]))
    metrics = os.path.join(env.tmp, "deeper.jsonl")
    p = env.launch(1, digits_args(env, os.path.join(env.tmp, "deeper"), [
        "--hidden", "256,256,64", "--resume", os.path.join(base, "final.safetensors"),
        "--no-strict", "--max_steps", "400", "--metrics", metrics]))
    acc = held_out_accuracy(metrics)
    out = p.stdout + p.stderr
    for w in ("loaded: 0.weight, 0.bias", "missing from the checkpoint: 7.weight",
              "dtype/shape mismatch: 6.weight", "keep their values"):
        check(w in out, "the non-strict load does not say %r:\n%s" % (w, out[-3000:]))
    check(acc >= 0.8, "held-out accuracy %.4f after a non-strict resume into a deeper model "
          "(the tensors not loaded must keep their initialisation)" % acc)
    print("no_strict: 256,256 -> 256,256,64, held-out accuracy %.2f%%" % (100 * acc))


def case_outputs(env, args):
    afile = os.path.join(env.tmp, "afile")
    open(afile, "w").close()
    p = env.launch(1, digits_args(env, afile, ["--max_steps", "2000", "--checkpoint_every", "0"]),
                   expect_ok=False, timeout=60)
    check(p.returncode != 0 and "checkpoint_dir '%s' is a regular file" % afile in p.stderr
          and "epoch " not in p.stdout,
          "a checkpoint_dir that is a file was not refused before training:\n" + p.stderr[-2000:])
    # A partial checkpoint a killed run left is removed at start, and said so.
    ckdir = os.path.join(env.tmp, "partial")
    os.mkdir(ckdir)
    with open(os.path.join(ckdir, "latest.safetensors.tmp"), "wb") as f:
        f.write(b"half a checkpoint")
    p = env.launch(1, digits_args(env, ckdir, ["--max_steps", "2", "--checkpoint_every", "0"]))
    check(not os.path.exists(os.path.join(ckdir, "latest.safetensors.tmp"))
          and "a partial checkpoint an interrupted run left" in p.stderr,
          "a dead run's latest.safetensors.tmp was not removed at start:\n" + p.stderr[-2000:])
    p = env.launch(1, digits_args(env, os.path.join(env.tmp, "full"), [
        "--max_steps", "40", "--log_every", "10", "--metrics", "/dev/full"]), expect_ok=False)
    check(p.returncode != 0 and "metrics file '/dev/full': 5 of 5 record(s) lost" in p.stderr
          and "No space left on device" in p.stderr,
          "lost metrics records on /dev/full were not reported:\n" + p.stderr[-2000:])
    if os.geteuid() != 0:
        print("outputs: not root, the tmpfs part is skipped")
        return
    mnt = os.path.join(env.tmp, "tmpfs")
    os.mkdir(mnt)
    subprocess.run(["mount", "-t", "tmpfs", "-o", "size=64k", "tmpfs", mnt], check=True)
    try:
        # Fill the file system, then write the metrics file there.
        fd = os.open(os.path.join(mnt, "filler"), os.O_WRONLY | os.O_CREAT, 0o600)
        try:
            while os.write(fd, b"x" * 512) > 0:
                pass
        except OSError:
            pass
        os.close(fd)
        metrics = os.path.join(mnt, "metrics.jsonl")
        p = env.launch(1, digits_args(env, os.path.join(env.tmp, "ok"), [
            "--max_steps", "40", "--log_every", "1", "--metrics", metrics]), expect_ok=False)
        check(p.returncode != 0 and "metrics file '%s':" % metrics in p.stderr
              and "record(s) lost" in p.stderr,
              "a metrics file on a full disk did not fail the run:\n" + p.stderr[-2000:])
        os.unlink(os.path.join(mnt, "filler"))
        # A checkpoint larger than the file system (1.3 MB in 64 KiB).
        p = env.launch(1, digits_args(env, os.path.join(mnt, "ck"), ["--max_steps", "20"]),
                       expect_ok=False)
        check(p.returncode != 0 and "cannot write checkpoint" in p.stderr
              and "No space left on device" in p.stderr,
              "a checkpoint on a full disk did not fail the run:\n" + p.stderr[-2000:])
        check(not os.path.exists(os.path.join(mnt, "ck", "final.safetensors.tmp")),
              "a failed checkpoint write left its temporary file")
    finally:
        subprocess.run(["umount", mnt], check=False)
    print("outputs: checkpoint_dir as a file refused at start; lost metrics records and a "
          "checkpoint on a full disk fail the run")


def case_bad_inputs(env, args):
    d = os.path.join(env.tmp, "adir")
    os.mkdir(d)
    fifo = os.path.join(env.tmp, "fifo")
    os.mkfifo(fifo)
    empty = os.path.join(env.tmp, "empty.csv")
    open(empty, "w").close()
    kinds = ((d, "a directory"), (fifo, "a FIFO"), ("/dev/zero", "a device"))
    cases = []
    for path, kind in kinds:
        cases += [(["--config", path], "'%s' is %s" % (path, kind)),
                  (["--data_path", path], "'%s' is %s" % (path, kind)),
                  (["--resume", path], "'%s': %s, not a safetensors file" % (path, kind))]
    cases += [(["--data_path", empty], "holds no samples"),
              (["--hidden", "100000,100000"], "the model is too large")]
    for extra, want in cases:
        argv = (extra if extra[0] == "--config" else
                ["--config", os.path.join(env.source, "configs", "digits.ini")] + extra)
        t0 = time.monotonic()
        p = env.launch(1, argv + ["--max_steps", "10"], expect_ok=False, timeout=30)
        wall = time.monotonic() - t0
        check(p.returncode != 0 and want in p.stderr and "epoch " not in p.stdout,
              "%s was not refused with %r (%.1f s):\n%s" % (" ".join(extra), want, wall,
                                                          p.stderr[-2000:]))
    check("GiB" in p.stderr, "the too-large model does not say how much it asked for")
    print("bad_inputs: %d refusals, each naming the path and what it is" % len(cases))


def case_rerun(env, args):
    """The same command line run again after the job died resumes its
    checkpoints; another job's are refused (exit 78) until --fresh; a full
    /dev/shm or disk exits 78 at once, restarts unspent."""
    ck = os.path.join(env.tmp, "ck")
    extra = ["--max_steps", "60", "--checkpoint_every", "10"]
    p = env.launch(2, digits_args(env, ck, extra + ["--fault_kill_step", "25",
                                                     "--fault_rank", "1"]), expect_ok=False)
    check(p.returncode != 0, "the fault did not end the first run")
    p = env.launch(2, digits_args(env, ck, extra))
    check("resumed from '%s' at step 20" % os.path.join(ck, "latest.safetensors") in p.stderr,
          "the re-run did not resume at step 20:\n" + p.stderr[-2000:])
    base = os.path.join(env.tmp, "base")
    env.launch(2, digits_args(env, base, extra))
    check(open(os.path.join(base, "final.safetensors"), "rb").read() ==
          open(os.path.join(ck, "final.safetensors"), "rb").read(),
          "the resumed re-run's final checkpoint differs from an undisturbed run's")
    before = open(os.path.join(ck, "final.safetensors"), "rb").read()
    p = env.launch(2, digits_args(env, ck, extra + ["--hidden", "128"]), max_restarts=2,
                   expect_ok=False)
    check(p.returncode == 78 and "its hidden is '256,256', this run's '128'" in p.stderr
          and "--fresh" in p.stderr and "restarting the worker group" not in p.stderr,
          "another job's checkpoints were not refused (78, once):\n" + p.stderr[-2000:])
    check(open(os.path.join(ck, "final.safetensors"), "rb").read() == before,
          "the refused run changed the checkpoints")
    env.launch(2, digits_args(env, ck, extra + ["--hidden", "128", "--fresh"]))
    if os.geteuid() != 0:
        print("rerun: not root, the full /dev/shm and disk parts are skipped")
        return
    full_shm = ("mount -t tmpfs -o size=8k tmpfs /dev/shm && exec \"$@\"")
    cmd = ["unshare", "-m", "--propagation", "private", "sh", "-c", full_shm, "sh",
           env.launcher, "--standalone", "--nproc_per_node=2", "--max_restarts=2",
           env.trainer, "--config", os.path.join(env.source, "configs", "digits.ini"),
           "--max_steps", "5", "--device", "cpu"]
    p = env._run(cmd, expect_ok=False)
    check(p.returncode == 78 and "/dev/shm" in p.stderr
          and "restarting the worker group" not in p.stderr,
          "a full /dev/shm did not stop at once with 78:\n" + p.stderr[-2000:])
    mnt = os.path.join(env.tmp, "small")
    os.mkdir(mnt)
    full_disk = ("mount -t tmpfs -o size=64k tmpfs \"$0\" && exec \"$@\"")
    cmd = ["unshare", "-m", "--propagation", "private", "sh", "-c", full_disk, mnt,
           env.launcher, "--standalone", "--nproc_per_node=2", "--max_restarts=2",
           env.trainer] + digits_args(env, os.path.join(mnt, "ck"), ["--max_steps", "5"])
    p = env._run(cmd, expect_ok=False)
    check(p.returncode == 78 and "no space left on the file system of checkpoint_dir"
          in p.stderr and "writable" not in p.stderr
          and "restarting the worker group" not in p.stderr,
          "a full disk did not stop at once with 78:\n" + p.stderr[-2000:])
    print("rerun: resumed at step 20 (final identical), another job refused with 78, "
          "--fresh replaced it; full /dev/shm and disk exit 78 unrestarted")


CASES = {"digits": case_digits, "equivalence": case_equivalence, "resume": case_resume,
         "resume_external": case_resume_external,
         "pitfalls": case_pitfalls, "real_client": case_real_client,
         "ckpt_verify": case_ckpt_verify, "ckpt_fallback": case_ckpt_fallback,
         "shards": case_shards, "shards_resume": case_shards_resume,
         "no_strict": case_no_strict, "outputs": case_outputs, "rerun": case_rerun, "bad_inputs": case_bad_inputs}


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--ddp-train", required=True)
    ap.add_argument("--ddplaunch", required=True)
    ap.add_argument("--source", required=True)
    ap.add_argument("--build-dir", default=tempfile.gettempdir())
    ap.add_argument("--ranks", type=int, default=2)
    ap.add_argument("--seed", type=int)
    ap.add_argument("--device", default="cpu",
                    help="ddp-train --device for every run (the gpu suite passes cuda)")
    ap.add_argument("case", choices=sorted(CASES))
    args = ap.parse_args()
    tmp = tempfile.mkdtemp(prefix="ddp-train-it-")
    try:
        CASES[args.case](Env(args, tmp), args)
    except Fail as e:
        print("FAIL: %s" % e)
        return 1
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
