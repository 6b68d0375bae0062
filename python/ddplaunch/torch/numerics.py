"""A rank's numeric identity: what decides the bits of a shard's gradient
beside the script and its data. The torch version and build (its BLAS,
the CPU kernels ATen dispatches to, OpenBLAS's core and threads where torch
uses OpenBLAS), the settings that change results (thread count,
deterministic algorithms, TF32, float32 matmul precision) and, on a GPU,
the device model and the CUDA, cuDNN and NCCL versions.

Elastic compares it over the group at the start and at every join
(compare): the same on every rank, or a NumericMismatch naming both sides
and what to set, unless the job accepts the mismatch (then it says so and
the promise of a 1-rank run's bits is dropped). identity() and differences()
are pure; compare() costs one all-reduce of two integers when the
identities agree.
"""
import ctypes
import hashlib
import json
import os
import re

import torch
import torch.distributed as dist

from .. import agent_wire
from . import replicas
from .errors import NumericMismatch

# what to set, per key: the tail of the refusal's sentence
HINTS = {
    "torch": "install the same torch on every node",
    "torch_build": "install the same torch build on every node",
    "threads": "pass the same threads= to Elastic on every rank (it sets "
               "torch.set_num_threads), or call torch.set_num_threads with one value",
    "deterministic": "call torch.use_deterministic_algorithms with the same value on every rank",
    "matmul_tf32": "set torch.backends.cuda.matmul.allow_tf32 to one value on every rank",
    "cudnn_tf32": "set torch.backends.cudnn.allow_tf32 to one value on every rank",
    "float32_matmul_precision": "call torch.set_float32_matmul_precision with one value on "
                                "every rank",
    "cpu_capability": "set ATEN_CPU_CAPABILITY to the lower of the two (e.g. avx2) on every node",
    "blas": "install the same torch build (and BLAS library) on every node",
    "openblas_core": "set OPENBLAS_CORETYPE to one core name (e.g. Haswell) on every node",
    "openblas_threads": "set OPENBLAS_NUM_THREADS=1 on every node",
    "gpu": "run every rank on one GPU model",
    "cuda": "install the same torch build (its CUDA) on every node",
    "cudnn": "install the same torch build (its cuDNN) on every node",
    "nccl": "install the same torch build (its NCCL) on every node",
    "cublas_workspace": "set CUBLAS_WORKSPACE_CONFIG=:4096:8 on every node",
    "replica_digest": "install libxxhash0 on every node (the replica check's digest must be "
                      "one kind)",
}


def _show_field(text, pattern):
    m = re.search(pattern, text)
    return m.group(1).strip() if m else ""


def _openblas_lib():
    """The OpenBLAS this process loaded as its BLAS (libopenblas*: numpy's
    own bundled copy is not torch's), or None."""
    try:
        with open("/proc/self/maps") as f:
            paths = {line.split()[-1] for line in f if "/" in line}
    except OSError:
        return None
    libs = sorted(p for p in paths if os.path.basename(p).startswith("libopenblas"))
    if not libs:
        return None
    try:
        return ctypes.CDLL(libs[0])
    except OSError:
        return None


def _openblas():
    """(core name, config, threads) of _openblas_lib(), or None."""
    lib = _openblas_lib()
    if lib is None:
        return None
    try:
        lib.openblas_get_corename.restype = ctypes.c_char_p
        lib.openblas_get_config.restype = ctypes.c_char_p
        return (lib.openblas_get_corename().decode(), lib.openblas_get_config().decode(),
                int(lib.openblas_get_num_threads()))
    except AttributeError:
        return None


def set_threads(n):
    """torch's intra-op threads, and OpenBLAS's where torch calls an
    OpenBLAS of its own (Debian's torch: torch.set_num_threads leaves
    OpenBLAS's pool as it is), to n."""
    torch.set_num_threads(int(n))
    lib = _openblas_lib()
    fn = getattr(lib, "openblas_set_num_threads", None) if lib is not None else None
    if fn is not None:
        fn(int(n))


def identity(device):
    """This process's numeric identity now, a dict of strings (device: the
    parameters' torch.device)."""
    show = torch.__config__.show()
    out = {
        "torch": torch.__version__,
        # the build's configuration, less the one runtime line in it
        "torch_build": hashlib.blake2b(re.sub(r"CPU capability usage: \S+", "", show).encode(),
                                       digest_size=6).hexdigest(),
        "threads": str(torch.get_num_threads()),
        "deterministic": str(torch.are_deterministic_algorithms_enabled()),
        "matmul_tf32": str(torch.backends.cuda.matmul.allow_tf32),
        "cudnn_tf32": str(torch.backends.cudnn.allow_tf32),
        "float32_matmul_precision": torch.get_float32_matmul_precision(),
        "cpu_capability": _show_field(show, r"CPU capability usage: (\S+)"),
        "blas": "%s %s" % (_show_field(show, r"BLAS_INFO=([^,]*)"),
                           _show_field(show, r"(Intel\(R\) [^\n]*Math Kernel Library[^\n]*)")),
    }
    out["replica_digest"] = replicas.ALGORITHM
    ob = _openblas()
    if ob is not None:
        out["openblas_core"] = ob[0]
        out["blas"] += " " + ob[1]
        out["openblas_threads"] = str(ob[2])
    if device.type == "cuda":
        idx = device.index if device.index is not None else torch.cuda.current_device()
        cap = torch.cuda.get_device_capability(idx)
        out["gpu"] = "%s (sm_%d%d)" % (torch.cuda.get_device_name(idx), cap[0], cap[1])
        out["cuda"] = str(torch.version.cuda)
        out["cudnn"] = str(torch.backends.cudnn.version())
        try:
            nccl = torch.cuda.nccl.version()
        except (AttributeError, RuntimeError):
            nccl = "none"
        out["nccl"] = ".".join(map(str, nccl)) if isinstance(nccl, tuple) else str(nccl)
        out["cublas_workspace"] = os.environ.get("CUBLAS_WORKSPACE_CONFIG", "")
    return out


def describe(ident):
    """The identity as one line for the launcher's summary ("kept": what
    every rank has): key=value pairs, sorted, printable ASCII, at most
    agent_wire.TEXT_MAX bytes."""
    return agent_wire.fit_text("; ".join("%s=%s" % (k, ident[k]) for k in sorted(ident)))


def fingerprint(ident):
    """A 62-bit integer of the identity (two equal identities, one value)."""
    data = json.dumps(ident, sort_keys=True).encode()
    return int.from_bytes(hashlib.blake2b(data, digest_size=8).digest(), "little") >> 2


def differences(a, b):
    """The keys whose values differ (one side may lack a key), in HINTS'
    order, then the others sorted."""
    keys = [k for k in set(a) | set(b) if a.get(k) != b.get(k)]
    order = list(HINTS)
    return sorted(keys, key=lambda k: (order.index(k) if k in order else len(order), k))


def message(ra, a, rb, b):
    """One line naming both sides of every difference and what to set."""
    diffs = differences(a, b)
    parts = ["rank %d has %s=%s, rank %d has %s=%s: %s" %
             (ra, k, a.get(k, "(none)"), rb, k, b.get(k, "(none)"),
              HINTS.get(k, "make it the same on every rank")) for k in diffs]
    return "numeric identity differs: " + "; ".join(parts)


def compare(group, mine, exchange):
    """None when every rank of the group has the identity `mine`, else
    (rank_a, ident_a, rank_b, ident_b): rank 0 and the lowest rank whose
    identity differs from rank 0's, and both identities (known on every
    rank). exchange(group, source, ident) -> the source's identity on every
    rank (the hand-over's transport). A collective: every rank calls it."""
    h = fingerprint(mine)
    t = torch.tensor([h, -h], dtype=torch.int64, device=group.device)
    group.allreduce(t, dist.ReduceOp.MAX)
    if int(t[0]) == -int(t[1]):
        return None
    first = exchange(group, 0, mine)
    r = torch.tensor([group.rank if first != mine else group.world], dtype=torch.int64,
                     device=group.device)
    group.allreduce(r, dist.ReduceOp.MIN)
    other = int(r[0])
    return 0, first, other, exchange(group, other, mine)


def refuse_or_accept(found, allow):
    """found: compare()'s answer. Raises NumericMismatch unless allow;
    returns the line that says what was accepted (None when nothing
    differed)."""
    if found is None:
        return None
    ra, a, rb, b = found
    line = message(ra, a, rb, b)
    if not allow:
        diffs = differences(a, b)
        raise NumericMismatch(
            line + " (or Elastic(..., allow_numeric_mismatch=True) to accept it and drop the "
            "promise of a 1-rank run's bits)", key=diffs[0] if diffs else None,
            ranks=(ra, rb), values=(a.get(diffs[0]), b.get(diffs[0])) if diffs else None)
    return line + "; accepted (allow_numeric_mismatch=True): the final weights need not be " \
                  "a 1-rank run's bits"
