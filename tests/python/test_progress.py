#!/usr/bin/python3
"""The progress page from Python (python/ddplaunch/torch/progress.py).

  test_progress.py layout LAYOUT_PROG SOURCE_DIR
      the mirror against the C header as the compiler lays it out (LAYOUT_PROG
      is tests/python/progress_layout.c built by meson): every field's offset
      and size, the struct's size, the constants and both enums' values; the
      phase enum that worker/ddp.h repeats is the header's, name for name; a
      page written by progress.Page reads back through the C reader
      (ddp_progress_read) field for field, and one caught mid-write does not.
      No torch: the module is loaded from its file.
  test_progress.py job DDPLAUNCH [agent]
      a real 2-rank ddplaunch.torch job (progress_worker.py, gloo): this test
      reads both workers' pages while they train, as the agent would, and
      sees every step's all-reduces numbered in order, a rank blocked in its
      all-reduce while its peer is late, the steps committed and the phases;
      each worker checks its own page at the end. "agent": the pages
      ddplaunch's agent made (named in each worker's environment as it
      started, /proc/PID/environ), no late rank.
  test_progress.py huge DDPLAUNCH [metrics]
      a 1-rank ddplaunch job whose worker (progress_huge_worker.py) writes a
      step of 2^63, then a step of 2^64-1 and a steps_total far ahead: the
      agent must not loop on them, so ddplaunch forwards the worker's last
      line and ends, within 60 s. "metrics": with --metrics_port=0, the
      step histogram's _count and _sum after three steps of 10, 20 and 24
      ms are exactly 3 and 0.054, and before its first step the page
      shows its phase but no ddp_worker_step, scraped while the worker waits.
Exit 0 pass, 1 fail.
"""
import importlib.util
import mmap
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
PKG = os.path.join(HERE, "..", "..", "python", "ddplaunch", "torch", "progress.py")


def load_progress():
    spec = importlib.util.spec_from_file_location("ddp_progress_mirror", PKG)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def fail(msg):
    sys.exit("test_progress: " + msg)


def c_enum(text, name):
    """The member names of `enum name { ... }` in a C header's text."""
    m = re.search(r"enum %s \{(.*?)\};" % name, text, re.S)
    if not m:
        fail("no enum %s" % name)
    body = re.sub(r"/\*.*?\*/", "", m.group(1), flags=re.S)
    return [re.split(r"[\s=]", x.strip())[0] for x in body.split(",") if x.strip()]


def check_layout(prog, src):
    pr = load_progress()
    out = subprocess.run([prog], check=True, capture_output=True, text=True).stdout
    fields, phases, ops, consts = [], {}, {}, {}
    size = None
    for line in out.splitlines():
        w = line.split()
        if w[0] == "field":
            fields.append((w[1], int(w[2]), int(w[3])))
        elif w[0] == "size":
            size = int(w[1])
        elif w[0] == "const":
            consts[w[1]] = int(w[2])
        elif w[0] == "env":
            consts["ENV"] = w[1]
        elif w[0] == "phase":
            phases[w[1]] = int(w[2])
        elif w[0] == "op":
            ops[w[1]] = int(w[2])
    mine = [(n, pr.OFFSETS[n], len(pr.struct.pack("<" + f, 0))) for n, f in pr.LAYOUT]
    if mine != fields:
        fail("layout differs from common/progress.h:\n  C:      %s\n  Python: %s" % (fields, mine))
    last = fields[-1]
    if size != pr.STRUCT_SIZE or last[1] + last[2] != size:
        fail("struct size: C %s, Python %d (a field the mirror lacks?)" % (size, pr.STRUCT_SIZE))
    for k, v in (("MAGIC", pr.MAGIC), ("VERSION", pr.VERSION), ("SIZE", pr.SIZE),
                 ("ENV", pr.ENV)):
        if consts.get(k) != v:
            fail("%s: C %r, Python %r" % (k, consts.get(k), v))
    for cname, v in phases.items():
        if getattr(pr, cname[len("DDP_"):]) != v:
            fail("%s: C %d, Python %d" % (cname, v, getattr(pr, cname[len("DDP_"):])))
    for cname, v in ops.items():
        if getattr(pr, cname[len("DDP_"):]) != v:
            fail("%s: C %d, Python %d" % (cname, v, getattr(pr, cname[len("DDP_"):])))
    if [pr.PHASES[v] for v in range(pr.PHASE_COUNT)] != \
            [n[len("DDP_PHASE_"):].lower() for n in list(phases)[:-1]]:
        fail("PHASES names out of order")
    with open(os.path.join(src, "common", "progress.h")) as f:
        header = f.read()
    with open(os.path.join(src, "worker", "ddp.h")) as f:
        api = f.read()
    if c_enum(header, "ddp_progress_phase") != c_enum(api, "ddp_progress_phase"):
        fail("worker/ddp.h's enum ddp_progress_phase is not common/progress.h's:\n  %s\n  %s"
             % (c_enum(api, "ddp_progress_phase"), c_enum(header, "ddp_progress_phase")))
    check_round_trip(pr, prog)
    print("progress.py mirrors common/progress.h: %d fields, %d bytes" % (len(fields), size))


def c_read(prog, path):
    out = subprocess.run([prog, "read", path], check=True, capture_output=True,
                         text=True).stdout.split()
    return None if out == ["unread"] else {out[i]: int(out[i + 1])
                                           for i in range(0, len(out), 2)}


def check_round_trip(pr, prog):
    import mmap
    tmp = tempfile.mkdtemp(prefix="ddp-progress-layout-")
    try:
        path = os.path.join(tmp, "page")
        with open(path, "wb") as f:
            f.write(b"\0" * pr.SIZE)
        with open(path, "r+b") as f:
            m = mmap.mmap(f.fileno(), pr.SIZE)
        page = pr.Page(m)
        page.round(3, 1, 4)
        page.enter(pr.OP_BROADCAST, 4096)
        page.leave()
        page.enter(pr.OP_ALLREDUCE, 1 << 40, bucket=7)
        page.step(12, 5000, 3000, 2000, 2)
        got, mine = c_read(prog, path), pr.read(m)
        want = {"magic": pr.MAGIC, "version": pr.VERSION, "pid": os.getpid(), "round": 3,
                "rank": 1, "world": 4, "phase": pr.PHASE_COLLECTIVE, "op": pr.OP_ALLREDUCE,
                "seq": 2, "bytes": 1 << 40, "bucket": 7, "waiting_on": -1, "step": 12,
                "step_ns": 5000, "compute_ns": 3000, "wait_ns": 2000, "shards": 2}
        if got is None or mine is None:
            fail("a page written by progress.Page does not read back (C %r, Python %r)"
                 % (got, mine))
        for k, v in want.items():
            if got[k] != v or mine[k] != v:
                fail("%s: C reads %s, Python reads %s, written %s" % (k, got[k], mine[k], v))
        if got != mine:
            fail("C and Python read the page differently:\n  %s\n  %s" % (got, mine))
        if not got["left_ns"] < got["entered_ns"] <= got["written_ns"] or got["gen"] % 2:
            fail("times or gen wrong inside a collective: %s" % got)
        pr._GEN.pack_into(m, pr.OFFSETS["gen"], got["gen"] + 1)  # caught mid-write
        if c_read(prog, path) is not None or pr.read(m) is not None:
            fail("a page with an odd gen (mid-write) was read")
        m.close()
    finally:
        shutil.rmtree(tmp)


# -- the job ------------------------------------------------------------------

def check_job(ddplaunch, agent):
    pr = load_progress()
    tmp = tempfile.mkdtemp(prefix="ddp-progress-job-")
    steps = 12
    try:
        env = dict(os.environ, OMP_NUM_THREADS="1",
                   PYTHONPATH=os.path.join(HERE, "..", "..", "python"))
        late = []
        if not agent:
            env["PROGRESS_DIR"] = tmp
            late = ["--late_rank", "1", "--late_step", "5"]
        cmd = [ddplaunch, "--standalone", "--nproc_per_node=2", "--max_restarts=0",
               sys.executable, os.path.join(HERE, "progress_worker.py"), "--steps",
               str(steps)] + late
        proc = subprocess.Popen(cmd, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                                text=True)
        seen = watch(pr, tmp if not agent else None, proc, 180)
        out = proc.communicate()[0]
        sys.stdout.write(out)
        if proc.returncode != 0:
            fail("the job failed (%d)" % proc.returncode)
        for r in (0, 1):
            s = seen[r]
            if not s["phases"] >= {"compute", "collective", "shutdown"}:
                fail("rank %d: phases seen %s" % (r, sorted(s["phases"])))
            if s["last"]["step"] != steps or s["last"]["phase"] != pr.PHASE_SHUTDOWN:
                fail("rank %d's last page: %s" % (r, s["last"]))
            if s["backwards"]:
                fail("rank %d: seq went backwards in a round: %s" % (r, s["backwards"]))
        if not agent and not seen[0]["blocked"]:
            fail("rank 0 was never seen inside an all-reduce while rank 1 was late")
        if "ELASTIC progress ok" not in out:
            fail("a worker's own check did not pass")
        print("both pages read live: phases %s%s" % (
            sorted(seen[0]["phases"]),
            "" if agent else "; rank 0 seen blocked in all-reduce #%d" % seen[0]["blocked"]))
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


def map_page(path):
    try:
        with open(path, "rb") as f:
            return mmap.mmap(f.fileno(), 4096, prot=mmap.PROT_READ)
    except (OSError, ValueError):
        return None


def agent_pages(launcher, maps):
    """The pages ddplaunch's agent named in its workers' environments (as
    they started: /proc/PID/environ), mapped into maps[rank]."""
    kids = {}
    for d in filter(str.isdigit, os.listdir("/proc")):
        try:
            with open("/proc/%s/stat" % d) as f:
                kids.setdefault(int(f.read().rsplit(")", 1)[1].split()[1]), []).append(int(d))
        except (OSError, ValueError, IndexError):
            pass
    todo = [launcher]
    while todo:
        for pid in kids.get(todo.pop(), []):
            todo.append(pid)
            try:
                with open("/proc/%d/environ" % pid, "rb") as f:
                    env = dict(kv.split(b"=", 1) for kv in f.read().split(b"\0") if b"=" in kv)
                with open("/proc/%d/cmdline" % pid, "rb") as f:
                    worker = b"progress_worker.py" in f.read()
            except OSError:
                continue
            path, rank = env.get(b"DDP_PROGRESS_FILE"), env.get(b"RANK")
            if worker and path and rank is not None and int(rank) not in maps:
                m = map_page(path.decode())
                if m is not None:
                    maps[int(rank)] = m


def watch(pr, tmp, proc, limit):
    """Reads both pages until the job ends (the agent's view): the phases
    each showed, the sequence numbers in order, rank 0 blocked. tmp: the
    pages' folder, None: the agent's pages."""
    seen = {r: {"phases": set(), "last": None, "seq": (None, 0), "backwards": [],
                "blocked": 0} for r in (0, 1)}
    maps = {}
    end = time.monotonic() + limit
    while proc.poll() is None:
        if time.monotonic() > end:
            proc.kill()
            fail("the job did not end within %d s" % limit)
        for r in (0, 1):
            if r not in maps and tmp is not None:
                m = map_page(os.path.join(tmp, "rank-%d" % r))
                if m is not None:
                    maps[r] = m
        if tmp is None and len(maps) < 2:
            agent_pages(proc.pid, maps)
        for r in maps:
            p = pr.read(maps[r])
            if p is None:
                continue
            s = seen[r]
            s["last"] = p
            s["phases"].add(pr.PHASES[p["phase"]])
            rnd, seq = s["seq"]
            if rnd == p["round"] and p["seq"] < seq:
                s["backwards"].append((rnd, seq, p["seq"]))
            s["seq"] = (p["round"], p["seq"])
            if p["phase"] == pr.PHASE_COLLECTIVE and p["left_ns"] < p["entered_ns"] and \
                    time.monotonic_ns() - p["entered_ns"] > 100_000_000:
                s["blocked"] = p["seq"]
        time.sleep(0.0005)
    for r in (0, 1):
        p = pr.read(maps[r]) if r in maps else None
        if p is None:
            fail("rank %d's page unreadable after the job" % r)
        seen[r]["last"] = p
        seen[r]["phases"].add(pr.PHASES[p["phase"]])
    return seen


def scrape(url, want, limit):
    """/metrics at url until want(samples) holds, samples being {"name{labels}": value}
    (or fail after limit s)."""
    import urllib.request
    opener = urllib.request.build_opener(urllib.request.ProxyHandler({}))  # loopback
    end = time.monotonic() + limit
    text = ""
    while time.monotonic() < end:
        try:
            with opener.open(url, timeout=5) as r:
                text = r.read().decode()
        except OSError as e:
            text = "(%s: %s)" % (url, e)
            time.sleep(0.1)
            continue
        samples = {}
        for line in text.splitlines():
            if line and not line.startswith("#"):
                k, _, v = line.rpartition(" ")
                samples[k] = float(v)
        if want(samples):
            return samples
        time.sleep(0.1)
    fail("/metrics never showed what was expected; last:\n%s" % text)


def wait_path(proc, path, end):
    """Until path exists (the worker made it), failing when the job ended or
    at end."""
    while not os.path.exists(path):
        if proc.poll() is not None or time.monotonic() > end:
            fail("the worker never made %s" % os.path.basename(path))
        time.sleep(0.05)


def check_huge(ddplaunch, metrics):
    tmp = tempfile.mkdtemp(prefix="ddp-progress-huge-")
    proc = None
    try:
        cmd = [ddplaunch, "--standalone", "--nproc_per_node=1", "--max_restarts=0"]
        if metrics:
            cmd.append("--metrics_port=0")
        cmd += [sys.executable, os.path.join(HERE, "progress_huge_worker.py"), PKG, tmp]
        proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                                text=True)
        lines = []
        url = None
        end = time.monotonic() + 60
        wait_for_file = lambda name: wait_path(proc, os.path.join(tmp, name), end)  # noqa: E731
        wait_for_file("page")
        if metrics:
            # the agent says where it serves before the worker starts
            import selectors
            sel = selectors.DefaultSelector()
            sel.register(proc.stdout, selectors.EVENT_READ)
            while url is None and time.monotonic() < end and sel.select(end - time.monotonic()):
                line = proc.stdout.readline()
                if not line:
                    break
                lines.append(line)
                m = re.search(r"serving metrics at (http://\S+/metrics)", line)
                if m:
                    url = m.group(1)
            if url is None:
                fail("no 'serving metrics at' line:\n" + "".join(lines))
            # a page with no step: its phase, but no ddp_worker_step
            m = scrape(url, lambda m: any(k.startswith("ddp_worker_phase{") for k in m), 20)
            if any(k.startswith("ddp_worker_step{") for k in m):
                fail("ddp_worker_step shown for a worker that reported no step: %s" %
                     [k for k in m if k.startswith("ddp_worker_step{")])
        open(os.path.join(tmp, "scraped0"), "w").close()
        wait_for_file("steps")
        if metrics:
            h = "ddp_worker_step_seconds"
            lab = 'local_rank="0",rank="0"'
            scrape(url, lambda m: (m.get(h + "_count{%s}" % lab) == 3 and
                                   abs(m.get(h + "_sum{%s}" % lab, 0) - 0.054) < 1e-9 and
                                   m.get(h + '_bucket{%s,le="0.005"}' % lab) == 0 and
                                   m.get(h + '_bucket{%s,le="0.025"}' % lab) == 3), 20)
        open(os.path.join(tmp, "scraped"), "w").close()
        try:
            out = proc.communicate(timeout=max(1, end - time.monotonic()))[0]
        except subprocess.TimeoutExpired:
            proc.kill()
            out = proc.communicate()[0]
            fail("ddplaunch did not end within 60 s after the worker wrote a step of 2^63 "
                 "(its agent loops on the page?):\n" + "".join(lines) + out)
        out = "".join(lines) + out
        sys.stdout.write(out)
        if proc.returncode != 0 or "huge worker: done" not in out:
            fail("the job failed (%d) or its last line was not forwarded" % proc.returncode)
        print("ddplaunch ended (rc 0) after steps of 2^63 and 2^64-1%s" %
              (": histogram exact (3 steps, 0.054 s)" if metrics else ""))
    finally:
        if proc and proc.poll() is None:
            proc.kill()
            proc.wait()
        shutil.rmtree(tmp, ignore_errors=True)


def main():
    if len(sys.argv) >= 4 and sys.argv[1] == "layout":
        check_layout(sys.argv[2], sys.argv[3])
    elif len(sys.argv) >= 3 and sys.argv[1] == "job":
        check_job(sys.argv[2], sys.argv[3:] == ["agent"])
    elif len(sys.argv) >= 3 and sys.argv[1] == "huge":
        check_huge(sys.argv[2], sys.argv[3:] == ["metrics"])
    else:
        fail(__doc__)


if __name__ == "__main__":
    main()
