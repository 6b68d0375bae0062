#!/usr/bin/env python3
"""GPU benchmark: ddp-train against PyTorch DDP, same model, same run.

Model: an MLP of 4 hidden layers of 4096 (Linear + BatchNorm + ReLU) on
synthetic data with 4096 features and 10 classes, batch 512 per rank, SGD
with momentum. For each (ranks, precision) both implementations train
WARMUP + STEPS steps under ddplaunch; the timed part excludes the warm-up.
Reported per run: samples/s (all ranks), the matrix products' achieved
TFLOP/s and their share of the GPU's dense peak for that precision, and for
ddp-train the share of step time spent waiting on the all-reduce (exposed,
non-overlapped communication, from the reducer's own clock).
Several ranks share one GPU (tests/gpu/rank_env.sh gives each its own
NCCL_HOSTID), so 2-rank figures measure the communication path, not
scaling.

  gpu_bench.py --ddp-train PATH --ddplaunch PATH --source DIR [--python PY]
               [--out FILE] [--runs 1:fp32,1:tf32,2:tf32,1:bf16]
Exit 0 when every run finished, 77 without a GPU, 1 otherwise.
"""
import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time

# Dense peaks of an H100/H200 SXM (NVIDIA datasheet), TFLOP/s.
PEAK = {"fp32": 67.0, "tf32": 494.7, "bf16": 989.4}


def flops_per_sample(features, hidden, classes):
    sizes = [features] + hidden + [classes]
    mac = sum(a * b for a, b in zip(sizes, sizes[1:]))
    # forward, weight gradients, input gradients (none for the first layer)
    return 2 * mac + 2 * mac + 2 * (mac - sizes[0] * sizes[1])


def gpu_name():
    try:
        out = subprocess.run(["nvidia-smi", "--query-gpu=name,driver_version",
                              "--format=csv,noheader"], stdout=subprocess.PIPE, text=True,
                             timeout=30).stdout.strip()
        return out.splitlines()[0] if out else "unknown GPU"
    except (OSError, subprocess.SubprocessError):
        return "unknown GPU"


def run(cmd, env, timeout):
    t0 = time.monotonic()
    p = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                       env=env, timeout=timeout)
    return p, time.monotonic() - t0


def ours(a, ranks, prec, tmp):
    metrics = os.path.join(tmp, "m-%d-%s.jsonl" % (ranks, prec))
    total = a.warmup + a.steps
    cmd = [a.ddplaunch, "--standalone", "--nproc_per_node=%d" % ranks, a.rank_env, a.ddp_train,
           "--data", "synthetic", "--synthetic_samples", str(a.samples),
           "--synthetic_features", str(a.features), "--synthetic_classes", str(a.classes),
           "--hidden", a.hidden, "--held_out", "0", "--batch_size", str(a.batch),
           "--max_steps", str(total), "--log_every", str(a.warmup), "--schedule", "constant",
           "--lr", "0.01", "--eval_every_epoch", "false", "--device", "cuda",
           "--progress_bar", "false", "--metrics", metrics]
    env = dict(os.environ, DDP_MATMUL_PRECISION=prec)
    p, wall = run(cmd, env, a.timeout)
    if p.returncode != 0 or not os.path.exists(metrics):
        return {"impl": "ddp-train", "ranks": ranks, "precision": prec,
                "error": p.stdout[-1500:]}
    recs = [json.loads(l) for l in open(metrics) if l.strip()]
    recs = [r for r in recs if r.get("kind") == "train" and r["step"] > a.warmup]
    # Each record covers `warmup` steps: total samples over total time.
    secs = sum(a.warmup * a.batch * ranks / r["samples_per_s"] for r in recs)
    sps = len(recs) * a.warmup * a.batch * ranks / secs if secs else 0.0
    share = sum(r["allreduce_share"] for r in recs) / len(recs) if recs else 0.0
    return {"impl": "ddp-train", "ranks": ranks, "precision": prec, "samples_per_s": sps,
            "exposed_comm_share": share, "wall_s": wall}


def theirs(a, ranks, prec):
    script = os.path.join(a.source, "tests", "bench", "gpu_torch_ddp.py")
    cmd = [a.ddplaunch, "--standalone", "--nproc_per_node=%d" % ranks, a.rank_env, a.python,
           "-u", script, "--features", str(a.features), "--hidden", a.hidden,
           "--classes", str(a.classes), "--samples", str(a.samples), "--batch", str(a.batch),
           "--steps", str(a.steps), "--warmup", str(a.warmup), "--precision", prec]
    p, wall = run(cmd, dict(os.environ), a.timeout)
    for line in p.stdout.splitlines():
        line = line.split("]: ", 1)[-1]
        if line.startswith("{") and "pytorch-ddp" in line:
            r = json.loads(line)
            r["wall_s"] = wall
            return r
    return {"impl": "pytorch-ddp", "ranks": ranks, "precision": prec, "error": p.stdout[-1500:]}


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--ddp-train", required=True)
    ap.add_argument("--ddplaunch", required=True)
    ap.add_argument("--source", required=True)
    ap.add_argument("--probe")
    ap.add_argument("--python", default=sys.executable)
    ap.add_argument("--out")
    ap.add_argument("--runs", default="1:fp32,1:tf32,2:tf32,1:bf16")
    ap.add_argument("--features", type=int, default=4096)
    ap.add_argument("--hidden", default="4096,4096,4096,4096")
    ap.add_argument("--classes", type=int, default=10)
    ap.add_argument("--samples", type=int, default=16384)
    ap.add_argument("--batch", type=int, default=512)
    ap.add_argument("--warmup", type=int, default=10)
    ap.add_argument("--steps", type=int, default=50)
    ap.add_argument("--timeout", type=int, default=180)
    a = ap.parse_args()
    a.rank_env = os.path.join(a.source, "tests", "gpu", "rank_env.sh")
    if a.probe and subprocess.run([a.probe]).returncode != 0:
        print("skip: no usable GPU")
        return 77
    hidden = [int(h) for h in a.hidden.split(",")]
    fps = flops_per_sample(a.features, hidden, a.classes)
    name = gpu_name()
    tmp = tempfile.mkdtemp(prefix="ddp-gpu-bench-")
    rows, ok = [], True
    # Rows are written as they come, so a run cut short keeps what it did.
    partial = open(a.out + ".partial", "w") if a.out else None
    try:
        for spec in a.runs.split(","):
            ranks, prec = int(spec.split(":")[0]), spec.split(":")[1]
            for r in (ours(a, ranks, prec, tmp), theirs(a, ranks, prec)):
                if "error" in r:
                    ok = False
                else:
                    r["tflops"] = r["samples_per_s"] * fps / 1e12
                    r["peak_share"] = r["tflops"] / PEAK[prec]
                rows.append(r)
                print(json.dumps(r), flush=True)
                if partial:
                    partial.write(json.dumps(r) + "\n")
                    partial.flush()
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
        if partial:
            partial.close()
    lines = ["GPU benchmark on %s" % name,
             "model: %d -> %s -> %d (BatchNorm + ReLU), batch %d per rank, %d timed steps "
             "after %d warm-up; %.3g GFLOP of matrix products per sample" % (
                 a.features, a.hidden, a.classes, a.batch, a.steps, a.warmup, fps / 1e9),
             "peaks (dense, datasheet): " + ", ".join("%s %g" % kv for kv in PEAK.items()),
             "",
             "%-12s %5s %5s %12s %9s %7s %10s %8s" % ("impl", "ranks", "prec", "samples/s",
                                                       "TFLOP/s", "% peak", "exposed", "vs DDP")]
    ref = {(r["ranks"], r["precision"]): r for r in rows
           if r["impl"] == "pytorch-ddp" and "error" not in r}
    for r in rows:
        if "error" in r:
            lines.append("%-12s %5d %5s FAILED: %s" % (r["impl"], r["ranks"], r["precision"],
                                                      r["error"][-300:].replace("\n", " | ")))
            continue
        base = ref.get((r["ranks"], r["precision"]))
        vs = "%.2fx" % (r["samples_per_s"] / base["samples_per_s"]) if base else "-"
        exp = "%.1f%%" % (100 * r["exposed_comm_share"]) if "exposed_comm_share" in r else "-"
        lines.append("%-12s %5d %5s %12.0f %9.1f %6.1f%% %10s %8s" % (
            r["impl"], r["ranks"], r["precision"], r["samples_per_s"], r["tflops"],
            100 * r["peak_share"], exp, vs))
    text = "\n".join(lines)
    print(text)
    if a.out:
        with open(a.out, "w") as f:
            f.write(text + "\n\n" + "\n".join(json.dumps(r) for r in rows) + "\n")
        os.unlink(a.out + ".partial")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
