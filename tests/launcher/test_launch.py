"""Integration tests: the real ddplaunch with the C helper workers."""
import ctypes
import fcntl
import glob
import json
import os
import re
import resource
import select
import shutil
import signal
import socket
import subprocess
import sys
import time
import unittest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from launchtest import (DDPLAUNCH, HELPER, LaunchCase, marked_pids, marker,  # noqa: E402
                        pid_alive, read_env, run, wait_for, wait_none_left)


class Basics(LaunchCase):
    def test_success_env_and_restart_count(self):
        r = self.launch(["--nproc_per_node=3", HELPER, "env", self.dir])
        self.assertEqual(r.returncode, 0, r.stderr)
        ports = set()
        for rank in range(3):
            env = read_env(self.path("env.%d.0" % rank))
            self.assertEqual(env["RANK"], str(rank))
            self.assertEqual(env["LOCAL_RANK"], str(rank))
            self.assertEqual(env["WORLD_SIZE"], "3")
            self.assertEqual(env["TORCHELASTIC_USE_AGENT_STORE"], "True")
            self.assertEqual(env["OMP_NUM_THREADS"], "1")
            ports.add(env["MASTER_PORT"])
        self.assertEqual(len(ports), 1)
        self.assertIn("OMP_NUM_THREADS=1", r.stderr)

    def test_exit_code_and_summary(self):
        r = self.launch(["--nproc_per_node=2", HELPER, "--only", "1", "pid", self.dir, "3"])
        self.assertEqual(r.returncode, 3, r.stderr)
        pid = int(open(self.path("pid.1")).read())
        self.assertIn("first failure: rank 1 (local rank 1, pid %d) exited with code 3" % pid,
                      r.stderr)
        self.assertIn("attempt 1 of 1", r.stderr)

    def test_killed_by_signal(self):
        r = self.launch(["--nproc_per_node=2", HELPER, "--only", "0", "signal",
                 str(int(signal.SIGUSR1))])
        self.assertEqual(r.returncode, 128 + signal.SIGUSR1, r.stderr)
        self.assertIn("rank 0 (local rank 0, pid", r.stderr)
        self.assertIn("was killed by SIGUSR1", r.stderr)

    def test_one_node_job_loads_no_etcd_client(self):
        """libcurl (and the TLS, Kerberos and LDAP libraries it pulls in) is
        loaded only by an etcd job: a one-node launcher's memory map lacks it."""
        maps = self.path("launcher.maps")
        script = ('launcher=$(awk \'/^PPid/ {print $2}\' /proc/$PPID/status); '
                  'cat /proc/$launcher/maps > %s' % maps)
        r = self.launch(["--nproc_per_node=1", "/bin/sh", "-c", script])
        self.assertEqual(r.returncode, 0, r.stderr)
        text = open(maps).read()
        self.assertIn("libuv", text)  # the map is ddplaunch's
        for lib in ("libcurl", "libssl", "libgssapi"):
            self.assertNotIn(lib, text)

    def test_program_not_found(self):
        r = self.launch([os.path.join(self.dir, "no-such-program")])
        self.assertEqual(r.returncode, 127, r.stderr)
        self.assertIn("cannot run", r.stderr)

    def test_usage_errors(self):
        r = self.launch(["--nproc_per_node=x", HELPER])
        self.assertEqual(r.returncode, 2)
        self.assertIn("bad value 'x' for 'nproc_per_node'", r.stderr)
        r = self.launch(["--nnodes=2", "--rdzv_backend=c10d", HELPER, "exit", "0"])
        self.assertEqual(r.returncode, 2)
        self.assertIn("--rdzv_backend=c10d needs --rdzv_endpoint", r.stderr)
        r = self.launch(["--help"])
        self.assertEqual(r.returncode, 0)
        self.assertIn("--nproc_per_node", r.stdout)

    def test_error_file_and_log_dir(self):
        logs = self.path("logs")
        r = self.launch(["--nproc_per_node=2", "--log_dir", logs, HELPER, "--only", "1",
                 "error-file", "ValueError: bad shape", "4"])
        self.assertEqual(r.returncode, 4, r.stderr)
        self.assertIn("error file of rank 1: ValueError: bad shape", r.stderr)
        self.assertIn("| fatal: ValueError: bad shape", r.stderr)
        with open(os.path.join(logs, "latest", "summary.json")) as f:
            summary = json.load(f)
        self.assertEqual(summary["exit_code"], 4)
        first = [w for w in summary["workers"] if w["first_failure"]]
        self.assertEqual(len(first), 1)
        self.assertEqual(first[0]["rank"], 1)
        self.assertEqual(first[0]["error_message"], "ValueError: bad shape")
        with open(os.path.join(logs, "latest", "attempt_0", "1", "stderr.log")) as f:
            err = f.read()
        self.assertEqual(err, "stderr line one\nstderr line two\nfatal: ValueError: bad shape\n")

    def test_log_dir_full_disk_counts(self):
        # A worker log that cannot be written (a full disk under --log_dir)
        # is reported, naming the rank and the file, and the job exits 1
        # although its worker succeeded.
        if os.geteuid() != 0:
            self.skipTest("mounting a small tmpfs needs root")
        full = self.path("full")
        os.makedirs(full)
        subprocess.run(["mount", "-t", "tmpfs", "-o", "size=64k", "tmpfs", full], check=True)
        try:
            r = self.launch(["--nproc_per_node=1", "--log_dir", full, "/bin/sh", "-c",
                             "head -c 300000 /dev/zero | tr '\\0' x; echo"])
        finally:
            subprocess.run(["umount", full], check=True)
        self.assertEqual(r.returncode, 1, r.stderr[-2000:])
        self.assertIn("rank 0: ", r.stderr)
        self.assertIn("could not be written", r.stderr)
        self.assertIn("No space left on device", r.stderr)
        self.assertIn("some of their output was lost", r.stderr)

    def test_log_dir_per_run(self):
        # Two runs into one --log_dir: each its own directory (RUNID_XXXXXX),
        # nothing of the first overwritten or mixed in; latest is the second.
        logs = self.path("logs")
        r = self.launch(["--nproc_per_node=1", "--log_dir", logs, "--max_restarts=1", HELPER,
                         "fail-once", "5"])
        self.assertEqual(r.returncode, 0, r.stderr)
        first = os.readlink(os.path.join(logs, "latest"))
        self.assertTrue(first.startswith("none_"), first)
        self.assertIn("go to '%s'" % os.path.join(logs, first), r.stderr)
        r = self.launch(["--nproc_per_node=1", "--log_dir", logs, "--rdzv_id=job/7", HELPER,
                         "exit", "0"])
        self.assertEqual(r.returncode, 0, r.stderr)
        second = os.readlink(os.path.join(logs, "latest"))
        self.assertTrue(second.startswith("job_7_"), second)
        self.assertEqual(sorted(os.listdir(logs)), sorted(["latest", first, second]))
        with open(os.path.join(logs, first, "summary.json")) as f:
            s1 = json.load(f)
        with open(os.path.join(logs, second, "summary.json")) as f:
            s2 = json.load(f)
        self.assertEqual((s1["attempts"], s1["exit_code"]), (2, 0))
        self.assertEqual((s2["attempts"], s2["exit_code"]), (1, 0))
        self.assertEqual(sorted(os.listdir(os.path.join(logs, first))),
                         ["attempt_0", "attempt_1", "summary.json"])
        self.assertEqual(sorted(os.listdir(os.path.join(logs, second))),
                         ["attempt_0", "summary.json"])


class Output(LaunchCase):
    def test_no_interleaving(self):
        lines, length = 1500, 700
        r = self.launch(["--nproc_per_node=4", HELPER, "burst", str(lines), str(length)], timeout=120)
        self.assertEqual(r.returncode, 0, r.stderr[-2000:])
        pat = re.compile(r"^\[rank (\d)\]: R(\d):(\d+):([a-z]+)$")
        seen = {0: 0, 1: 0, 2: 0, 3: 0}
        for line in r.stdout.split("\n")[:-1]:
            m = pat.match(line)
            self.assertIsNotNone(m, "mixed line: %r" % line[:200])
            rank = int(m.group(1))
            self.assertEqual(int(m.group(2)), rank)
            self.assertEqual(int(m.group(3)), seen[rank])  # in order per rank
            self.assertEqual(m.group(4), chr(ord("a") + rank) * length)
            seen[rank] += 1
        self.assertEqual(seen, {0: lines, 1: lines, 2: lines, 3: lines})

    def test_redirect_tee_filter_prefix(self):
        logs = self.path("logs")
        r = self.launch(["--nproc_per_node=2", "--log_dir", logs, "-r", "0:1", HELPER, "burst", "2",
                 "5"])
        self.assertEqual(r.returncode, 0, r.stderr)
        self.assertNotIn("[rank 0]", r.stdout)
        self.assertIn("[rank 1]: R1:0:bbbbb", r.stdout)
        with open(os.path.join(logs, "latest", "attempt_0", "0", "stdout.log")) as f:
            self.assertEqual(f.read(), "R0:0:aaaaa\nR0:1:aaaaa\n")
        r = self.launch(["--nproc_per_node=2", "--local_ranks_filter=1", "--prefix", "<%l/%r> ",
                 HELPER, "burst", "1", "3"])
        self.assertEqual(r.stdout, "<1/1> R1:0:bbb\n")
        r = self.launch(["--nproc_per_node=1", "--no_prefix", HELPER, "burst", "1", "3"])
        self.assertEqual(r.stdout, "R0:0:aaa\n")

    def test_long_prefix(self):
        # A prefix over 63 characters was cut there, silently: now every
        # prefix that fits is whole, and one that cannot fit is refused.
        long = "P" * 200 + "<%r> "
        r = self.launch(["--nproc_per_node=1", "--prefix", long, HELPER, "burst", "1", "3"])
        self.assertEqual(r.returncode, 0, r.stderr)
        self.assertEqual(r.stdout, "P" * 200 + "<0> R0:0:aaa\n")
        r = self.launch(["--nproc_per_node=1", "--prefix", "P" * 250 + "%r", HELPER, "burst",
                         "1", "3"])
        self.assertEqual(r.returncode, 2, r.stderr)
        self.assertIn("--prefix is too long", r.stderr)
        self.assertIn("shorten it", r.stderr)

    def test_tee_without_log_dir(self):
        # -t copies to files and keeps the console; without --log_dir the
        # files go to a directory that ddplaunch names.
        r = self.launch(["--nproc_per_node=1", "-t", "3", HELPER, "burst", "1", "4"])
        self.assertEqual(r.returncode, 0, r.stderr)
        self.assertEqual(r.stdout, "[rank 0]: R0:0:aaaa\n")
        m = re.search(r"worker logs go to '([^']+)'", r.stderr)
        self.assertIsNotNone(m, r.stderr)
        self.assertTrue(m.group(1).startswith(self.dir))
        with open(os.path.join(m.group(1), "attempt_0", "0", "stdout.log")) as f:
            self.assertEqual(f.read(), "R0:0:aaaa\n")


class Supervision(LaunchCase):
    def test_restart_after_failure(self):
        r = self.launch(["--nproc_per_node=2", "--max_restarts=2", HELPER, "--only", "1",
                 "fail-once", "5"])
        self.assertEqual(r.returncode, 0, r.stderr)
        self.assertIn("restarting the worker group: restart 1 of 2", r.stderr)
        self.assertIn("first failure: rank 1 (local rank 1", r.stderr)
        self.assertNotIn("restart 2 of 2", r.stderr)

    def test_restart_count_increases_until_exhausted(self):
        r = self.launch(["--nproc_per_node=1", "--max_restarts=2", HELPER, "exit", "7"])
        self.assertEqual(r.returncode, 7, r.stderr)
        self.assertIn("restart 2 of 2", r.stderr)
        self.assertIn("attempt 3 of 3", r.stderr)
        self.assertIn("no restart left", r.stderr)

    def test_restart_env_attempts(self):
        # rank 0 dumps its env on every attempt; rank 1 fails on attempt 0.
        script = self.path("w.sh")
        with open(script, "w") as f:
            # rank 1 fails in attempt 0 once rank 0 has dumped its env.
            f.write("#!/bin/sh\n%s env %s\nif [ \"$RANK\" = 1 ] && [ "
                    "\"$TORCHELASTIC_RESTART_COUNT\" = 0 ]; then\n"
                    "  i=0; while [ ! -e %s/env.0.0 ] && [ $i -lt 2000 ]; do sleep 0.01; i=$((i+1)); done\n"
                    "  exit 9\nfi\nexit 0\n"
                    % (HELPER, self.dir, self.dir))
        os.chmod(script, 0o755)
        r = self.launch(["--nproc_per_node=2", "--max_restarts=3", script])
        self.assertEqual(r.returncode, 0, r.stderr)
        for rank in (0, 1):
            e0 = read_env(self.path("env.%d.0" % rank))
            e1 = read_env(self.path("env.%d.1" % rank))
            self.assertEqual(e0["TORCHELASTIC_RESTART_COUNT"], "0")
            self.assertEqual(e1["TORCHELASTIC_RESTART_COUNT"], "1")
            self.assertEqual(e1["TORCHELASTIC_MAX_RESTARTS"], "3")
            self.assertNotEqual(e0["TORCHELASTIC_ERROR_FILE"], e1["TORCHELASTIC_ERROR_FILE"])
        self.assertFalse(os.path.exists(self.path("env.0.2")))

    def test_grace_then_sigkill(self):
        t0 = time.monotonic()
        r = self.launch(["--nproc_per_node=2", "--grace_period=0.3", "--log_dir", self.path("logs2"),
                 "--", "/bin/sh", "-c",
                 "if [ $RANK = 0 ]; then exec %s ignore-term %s; else "
                 "i=0; while [ ! -e %s/ready.0 ] && [ $i -lt 2000 ]; do sleep 0.01; i=$((i+1)); done; "
                 "exit 6; fi"
                 % (HELPER, self.dir, self.dir)], timeout=30)
        elapsed = time.monotonic() - t0
        self.assertEqual(r.returncode, 6, r.stderr)
        self.assertIn("sending SIGKILL", r.stderr)
        self.assertIn("then rank 0 (local rank 0, pid", r.stderr)
        self.assertIn("was killed by SIGKILL (stopped by ddplaunch)", r.stderr)
        self.assertLess(elapsed, 20)

    def test_forward_signal_exit_128_plus(self):
        for sig in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP):
            d = self.path("s%d" % sig)
            os.mkdir(d)
            p = self.start(["--nproc_per_node=2", HELPER, "catch", d])
            self.wait_files(["s%d/ready.0" % sig, "s%d/ready.1" % sig])
            p.send_signal(sig)
            out, err = p.communicate(timeout=30)
            self.assertEqual(p.returncode, 128 + sig, err)
            for rank in (0, 1):
                with open(os.path.join(d, "sig.%d" % rank)) as f:
                    self.assertEqual(int(f.read()), sig)
            self.assertIn("stopped by %s" % signal.Signals(sig).name, err)

    def test_forward_only_signals_keep_the_job(self):
        # Slurm's --signal=USR1@T: the workers checkpoint and go on; the
        # job's status is then theirs (0), with no SIGTERM and no grace.
        p = self.start(["--nproc_per_node=2", "--grace_period=60", HELPER, "checkpoint",
                        self.dir])
        self.wait_files(["ready.0", "ready.1"])
        for n in (1, 2):
            p.send_signal(signal.SIGUSR1)
            wait_for(lambda: all(self.lines("usr1.%d" % r) == n for r in (0, 1)), 20,
                     "checkpoint %d of both ranks" % n)
        self.assertIsNone(p.poll())
        self.assertFalse(glob.glob(self.path("term.*")))
        open(self.path("finish"), "w").close()
        out, err = p.communicate(timeout=30)
        self.assertEqual(p.returncode, 0, err)
        self.assertIn("got SIGUSR1; passing it on to the workers (--forward_signals)", err)
        self.assertNotIn("stopped by", err)

    def test_forward_signals_none_stops(self):
        # --forward_signals=none: SIGUSR1 stops the job as SIGTERM does.
        p = self.start(["--nproc_per_node=1", "--forward_signals=none", HELPER, "catch",
                        self.dir])
        self.wait_files(["ready.0"])
        p.send_signal(signal.SIGUSR1)
        out, err = p.communicate(timeout=30)
        self.assertEqual(p.returncode, 128 + signal.SIGUSR1, err)
        self.assertIn("stopped by SIGUSR1", err)

    def test_stopped_worker_is_continued(self):
        # A worker stopped with SIGSTOP cannot act on SIGTERM: the stop sends
        # SIGCONT after it, so the group ends at once, not after the grace.
        p = self.start(["--nproc_per_node=2", "--grace_period=30", "--", "/bin/sh", "-c",
                        "if [ $RANK = 0 ]; then exec %s stop-self %s; else %s await %s/go; "
                        "exit 6; fi" % (HELPER, self.dir, HELPER, self.dir)])
        self.wait_files(["ready.0"])
        with open(self.path("ready.0")) as f:
            pid = int(f.read())
        wait_for(lambda: proc_state(pid) == "T", 20, "rank 0 to be stopped")
        t0 = time.monotonic()
        open(self.path("go"), "w").close()
        out, err = p.communicate(timeout=60)
        self.assertEqual(p.returncode, 6, err)
        self.assertLess(time.monotonic() - t0, 15, err)
        self.assertNotIn("sending SIGKILL", err)
        self.assertIn("was killed by SIGTERM (stopped by ddplaunch)", err)

    def lines(self, name):
        try:
            with open(self.path(name)) as f:
                return len(f.readlines())
        except FileNotFoundError:
            return 0

    def test_signal_during_backoff(self):
        p = self.start(["--nproc_per_node=1", "--max_restarts=1", "--backoff=60", HELPER,
                        "exit", "4"])
        seen = ""
        for line in p.stderr:  # bounded by the test's timeout; EOF ends it
            seen += line
            if "restarting the worker group" in line:
                break
        self.assertIn("restarting the worker group in 60 s (the backoff, --backoff): restart 1 of 1",
                      seen)
        t0 = time.monotonic()
        p.send_signal(signal.SIGTERM)
        out, err = p.communicate(timeout=20)
        self.assertEqual(p.returncode, 128 + signal.SIGTERM, seen + err)
        self.assertLess(time.monotonic() - t0, 10)

    def test_kill9_leaves_nothing(self):
        p = self.start(["--nproc_per_node=2", HELPER, "grandchild", self.dir])
        self.wait_files(["pids.0", "pids.1"])
        pids = []
        for rank in (0, 1):
            pids += [int(x) for x in open(self.path("pids.%d" % rank)).read().split()]
        self.assertEqual(len(pids), 4)
        self.assertTrue(all(pid_alive(x) for x in pids))
        p.kill()
        p.wait()
        wait_for(lambda: not any(pid_alive(x) for x in pids), 10,
                 "workers and their sleep grandchildren to die")

    def test_group_cleanup_kills_grandchildren(self):
        # A worker that fails while its grandchild still runs: the group goes.
        r = self.launch(["--nproc_per_node=1", "--", "/bin/sh", "-c",
                 "/bin/sleep 1000 & echo $! > %s/gc; exit 3" % self.dir], timeout=30)
        self.assertEqual(r.returncode, 3, r.stderr)
        gc = int(open(self.path("gc")).read())
        wait_for(lambda: not pid_alive(gc), 10, "the grandchild to die")


def proc_state(pid):
    try:
        with open("/proc/%d/stat" % pid) as f:
            return f.read().rsplit(")", 1)[1].split()[0]
    except (OSError, IndexError):
        return ""


YES = shutil.which("yes") or "/usr/bin/yes"


def proc_comm(pid):
    try:
        with open("/proc/%d/comm" % pid) as f:
            return f.read().strip()
    except OSError:
        return ""


def children(pid):
    try:
        with open("/proc/%d/task/%d/children" % (pid, pid)) as f:
            return [int(c) for c in f.read().split()]
    except OSError:
        return []


def job_cgroup(proc):
    """The cgroup a launcher started with DDP_LOG_LEVEL=debug says its
    workers run in, read from its stderr up to that line (bounded by the
    test's timeout), or None with what it said when it has none: (path or
    None, text read)."""
    seen = ""
    for line in proc.stderr:
        seen += line
        if "the workers run in cgroup" in line or "no cgroup for the job" in line:
            break
    m = re.search(r"the workers run in cgroup '([^']+)'", seen)
    return (m.group(1) if m else None), seen


def descendants(pid):
    """Every process under pid now (a launcher's guards, their workers)."""
    found, todo = [], [pid]
    while todo:
        kids = children(todo.pop())
        found += kids
        todo += kids
    return found


def job_pages(launcher, tmpdir, n):
    """The progress pages of the launcher's n workers, once they all run
    (not only their guards) and the pages exist."""
    pages = set()

    def made():
        for pid in descendants(launcher):
            got = progress_page_env(pid, tmpdir)
            if got and os.path.exists(got[0]) and proc_comm(pid) != "ddp-exec":
                pages.add(got[0])
        return len(pages) == n
    wait_for(made, 20, "the workers with their progress pages")
    return pages


def inotify_watching(path):
    """A new inotify descriptor with a watch on path (closing its last
    reference waits for an SRCU grace period)."""
    libc = ctypes.CDLL(None, use_errno=True)
    fd = libc.inotify_init1(os.O_CLOEXEC)
    if fd < 0:
        raise OSError(ctypes.get_errno(), "inotify_init1")
    if libc.inotify_add_watch(fd, path.encode(), 0x00000002) < 0:  # IN_MODIFY
        err = ctypes.get_errno()
        os.close(fd)
        raise OSError(err, "inotify_add_watch")
    return fd


def progress_page_env(pid, tmpdir):
    """DDP_PROGRESS_FILE and DDP_JOB_TAG of process pid, a worker of a
    launcher run with TMPDIR=tmpdir (a test's own), or None."""
    try:
        with open("/proc/%d/environ" % pid, "rb") as f:
            env = dict(kv.partition(b"=")[::2] for kv in f.read().split(b"\0") if kv)
    except OSError:
        return None
    if env.get(b"TMPDIR", b"").decode() != tmpdir or b"DDP_PROGRESS_FILE" not in env:
        return None
    return env[b"DDP_PROGRESS_FILE"].decode(), env.get(b"DDP_JOB_TAG", b"").decode()


class Leftovers(LaunchCase):
    """Nothing of a job outlives it, grandchildren that call setsid
    included: after a kill -9 of the launcher, a group restart and a normal
    end; with the job's cgroup where the machine allows one, and with the
    guards' subreaper alone (DDPLAUNCH_CGROUP=off). Each test's processes
    are "sleep MARKER" with markers of its own, found by a /proc scan."""

    MODES = {"cgroup": {}, "subreaper": {"DDPLAUNCH_CGROUP": "off"}}

    def mode_env(self, mode):
        return dict(self.MODES[mode], DDP_LOG_LEVEL="debug")

    def check_mode(self, mode, err):
        if mode == "subreaper":
            self.assertIn("no cgroup for the job (DDPLAUNCH_CGROUP=off)", err)
        elif "the workers run in cgroup" not in err:
            # Not allowed here (not root, not delegated): the subreaper alone.
            self.assertIn("no cgroup for the job", err)

    def mode_dir(self, mode):
        d = self.path(mode)
        os.mkdir(d)
        return d

    def test_launcher_in_another_pid_namespace_spares_our_job(self):
        # A launcher in its own PID namespace (a Slurm step, a container)
        # sees no process with our launcher's pid: it must not take our
        # job's cgroup for a dead one and kill our workers.
        probe = subprocess.run(["unshare", "-p", "-f", "--mount-proc", "true"],
                               capture_output=True)
        if probe.returncode != 0:
            self.skipTest("cannot make a PID namespace here: %s" % probe.stderr.decode())
        ours = self.start(["--nproc_per_node=1", "/bin/sleep", "3"],
                          env={"DDP_LOG_LEVEL": "debug"})
        cgroup, seen = job_cgroup(ours)
        if not cgroup:
            self.skipTest("no cgroup for jobs on this machine: " + seen)

        def populated():
            with open(os.path.join(cgroup, "cgroup.procs")) as f:
                return f.read().strip() != ""
        wait_for(populated, what="our worker in its cgroup")
        r = subprocess.run(["unshare", "-p", "-f", "--mount-proc", DDPLAUNCH,
                            "--nproc_per_node=1", "/bin/true"],
                           capture_output=True, text=True, timeout=60)
        self.assertEqual(r.returncode, 0, r.stderr)
        out, err = ours.communicate(timeout=30)
        self.assertEqual(ours.returncode, 0, seen + err)

    def test_launcher_killed(self):
        for mode in self.MODES:
            with self.subTest(mode=mode):
                d, m = self.mode_dir(mode), [marker() for _ in range(4)]
                # rank 0: the command line of the report; rank 1: the helper,
                # which starts both before it says so.
                p = self.start(["--nproc_per_node=2", "--", "/bin/sh", "-c",
                                "if [ $RANK = 0 ]; then sleep %s & setsid sleep %s & "
                                "exec sleep 100; else exec %s escape %s %s %s -1; fi"
                                % (m[0], m[1], HELPER, d, m[2], m[3])],
                               env=self.mode_env(mode))
                wait_for(lambda: len(marked_pids(*m)) == 4, 20, "the four sleeps to run")
                p.kill()
                out, err = p.communicate(timeout=30)
                wait_none_left(m)
                self.check_mode(mode, err)
                # The guards remove the job's cgroup when no launcher can.
                cg = re.search(r"the workers run in cgroup '([^']+)'", err)
                if cg:
                    wait_for(lambda: not os.path.exists(cg.group(1)), 10,
                             "the job's cgroup to go")

    def test_launcher_killed_while_workers_write(self):
        # Workers that write without pause die of SIGPIPE once their killed
        # launcher's files are closed, which the kernel does before it
        # reparents the launcher's children and so signals its death to
        # their guards. A guard that reaped its worker in between ended like
        # it, and nobody removed the job's /dev/shm names (its progress
        # pages: the multinode campaign's seed 26991274, a node's agent
        # killed). A launcher with more to close after the workers' pipes
        # has a wider gap: here an inherited inotify descriptor holding a
        # watch (the last reference: closing it waits for an SRCU grace
        # period, tens of ms): before the fix, 2 to 7 trials of 8 left both
        # pages. Once every process of the job is gone, no name of it may
        # be left, in both modes.
        trials, left = 8, []
        for n in range(trials):
            mode = list(self.MODES)[n % len(self.MODES)]
            slow_close = inotify_watching(self.dir)
            try:
                # The console goes nowhere, and the launcher keeps reading.
                p = subprocess.Popen([DDPLAUNCH, "--master_port=0", "--nproc_per_node=2", "--",
                                      YES, "ddp"], stdout=subprocess.DEVNULL,
                                     stderr=subprocess.DEVNULL, pass_fds=[slow_close],
                                     env=dict(os.environ, **self.env(), **self.mode_env(mode)))
            finally:
                os.close(slow_close)
            self.procs.append(p)
            pages = job_pages(p.pid, self.dir, 2)
            procs = descendants(p.pid)
            p.kill()
            p.wait()
            wait_for(lambda: not any(pid_alive(pid) for pid in procs), 10,
                     "the job's processes to end")
            job = {os.path.basename(pg).rsplit("-progress-", 1)[0] + "-" for pg in pages}
            names = [e for e in os.listdir("/dev/shm") if any(e.startswith(j) for j in job)]
            if names:
                left.append("trial %d (%s): %s" % (n, mode, ", ".join(sorted(names))))
                for e in names:
                    os.unlink(os.path.join("/dev/shm", e))
        self.assertEqual(left, [], "names left once the job's processes were gone")

    def test_group_restart(self):
        for mode in self.MODES:
            with self.subTest(mode=mode):
                d, m = self.mode_dir(mode), [marker(), marker()]
                p = self.start(["--nproc_per_node=1", "--max_restarts=1", "--", "/bin/sh",
                                "-c", "if [ $TORCHELASTIC_RESTART_COUNT = 0 ]; then "
                                "exec %s escape %s %s %s 3; else exec %s checkpoint %s; fi"
                                % (HELPER, d, m[0], m[1], HELPER, d)],
                               env=self.mode_env(mode))
                wait_for(lambda: os.path.exists(os.path.join(d, "ready.0")), 20,
                         "the second attempt")
                self.assertTrue(os.path.exists(os.path.join(d, "escape.0.0")))
                # While the second attempt runs, nothing of the first is left.
                wait_none_left(m)
                self.assertIsNone(p.poll())
                open(os.path.join(d, "finish"), "w").close()
                out, err = p.communicate(timeout=30)
                self.assertEqual(p.returncode, 0, err)
                self.check_mode(mode, err)

    def test_normal_end(self):
        for mode in self.MODES:
            with self.subTest(mode=mode):
                d, m = self.mode_dir(mode), [marker(), marker()]
                r = self.launch(["--nproc_per_node=2", HELPER, "escape", d, m[0], m[1], "0"],
                                env=self.mode_env(mode))
                self.assertEqual(r.returncode, 0, r.stderr)
                self.assertTrue(os.path.exists(os.path.join(d, "escape.1.0")))
                wait_none_left(m)
                self.check_mode(mode, r.stderr)

    def test_dead_runs_tmp_dir_removed(self):
        # A launcher killed with -9 leaves its run directory in TMPDIR; the
        # next run removes it, and only it: a live run's, a directory of
        # kept logs (no lock) and one whose lock is held stay.
        dead_dir, live_dir = self.mode_dir("dead"), self.mode_dir("live")
        p = self.start(["--nproc_per_node=1", HELPER, "catch", dead_dir])
        wait_for(lambda: os.path.exists(os.path.join(dead_dir, "ready.0")), 20, "worker")
        (dead,) = glob.glob(self.path("ddplaunch_*"))
        live = self.start(["--nproc_per_node=1", HELPER, "catch", live_dir])
        wait_for(lambda: os.path.exists(os.path.join(live_dir, "ready.0")), 20, "worker")
        (live_run,) = set(glob.glob(self.path("ddplaunch_*"))) - {dead}
        keep = self.path("ddplaunch_keep01")
        os.makedirs(os.path.join(keep, "attempt_0", "0"))
        held = self.path("ddplaunch_held01")
        os.mkdir(held)
        with open(os.path.join(held, "ddplaunch.lock"), "w") as lock:
            fcntl.flock(lock, fcntl.LOCK_EX)
            p.kill()
            p.wait()
            self.assertTrue(os.path.isdir(os.path.join(dead, "attempt_0", "0")))
            # A run with --log_dir cleans the temporary directory as well.
            r = self.launch(["--nproc_per_node=1", "--log_dir", self.path("logs"), HELPER,
                             "exit", "0"])
            self.assertEqual(r.returncode, 0, r.stderr)
            self.assertFalse(os.path.exists(dead))
            self.assertEqual(sorted(glob.glob(self.path("ddplaunch_*"))),
                             sorted([live_run, keep, held]))
        live.send_signal(signal.SIGTERM)
        live.communicate(timeout=30)
        self.assertFalse(os.path.exists(live_run))


DDP_HELPER = os.environ.get("LAUNCH_DDP_HELPER", "launch_ddp_helper")

# Runs in a mount namespace of its own with a fresh tmpfs on /dev/shm, so
# that whatever is in it afterwards is the job's: each argv in the JSON list
# sys.argv[1] is launched, and what /dev/shm holds after each is printed.
SHM_SWEEP = r"""
import json, os, subprocess, sys
subprocess.run(["mount", "-t", "tmpfs", "-o", "size=1g", "ddptest", "/dev/shm"], check=True)
for argv in json.loads(sys.argv[1]):
    r = subprocess.run(argv, capture_output=True, text=True, timeout=120)
    print(json.dumps([argv[-1], r.returncode, sorted(os.listdir("/dev/shm")), r.stderr[-800:]]))
"""



class Permanent(LaunchCase):
    """A failure that will repeat at every restart spends none: ddplaunch
    names it, stops at once and exits 78 (DDP_EXIT_PERMANENT)."""

    def test_out_of_file_descriptors_is_not_permanent(self):
        # a shortage of descriptors may pass (whoever holds them may let
        # go): named, then the restarts try again; it was taken as permanent
        # (exit 78, "will repeat at every restart") until issue 28
        def few_fds():
            resource.setrlimit(resource.RLIMIT_NOFILE, (20, 20))
        r = self.launch(["--nproc_per_node=2", "--max_restarts=1", HELPER, "exit", "0"],
                        preexec_fn=few_fds)
        self.assertNotEqual(r.returncode, 78, r.stderr)
        self.assertNotEqual(r.returncode, 0, r.stderr)
        self.assertIn("no file descriptor left (its limit, ulimit -n, is 20); a shortage "
                      "that may pass", r.stderr)
        self.assertIn("restarting the worker group", r.stderr)
        self.assertNotIn("will repeat", r.stderr)
        self.assertNotIn("pid 0", r.stderr)
        self.assertIn("never started", r.stderr)

    def test_worker_says_permanent(self):
        r = self.launch(["--nproc_per_node=2", "--max_restarts=3", HELPER, "--only", "1",
                         "exit", "78"])
        self.assertEqual(r.returncode, 78, r.stderr)
        self.assertNotIn("restarting the worker group", r.stderr)
        self.assertIn("will repeat at every restart", r.stderr)
        r = self.launch(["--nproc_per_node=1", "--max_restarts=1", HELPER, "exit", "3"])
        self.assertEqual(r.returncode, 3, r.stderr)
        self.assertIn("restarting the worker group", r.stderr)


def cgroup2_mount():
    with open("/proc/self/mountinfo") as f:
        for line in f:
            left, _, right = line.partition(" - ")
            if right.startswith("cgroup2 ") and left.split()[3] == "/":
                return left.split()[4]
    return None


class StaleCgroups(LaunchCase):
    """Whoever removes a dead launcher's lock file removes its cgroup, even
    one made under another cgroup (a launcher started from a Slurm step's):
    an abandoned cgroup never loses the lock that leads to it."""

    def test_cgroup_of_a_launcher_from_another_cgroup(self):
        mnt = cgroup2_mount()
        if not mnt or not os.access(os.path.join(mnt, "cgroup.procs"), os.W_OK):
            self.skipTest("no writable cgroup2 hierarchy here")
        parent = os.path.join(mnt, "ddplaunch-test-other-%d" % os.getpid())
        os.mkdir(parent)
        job = lock = None
        try:
            def enter():
                with open(os.path.join(parent, "cgroup.procs"), "w") as f:
                    f.write("0")
            a = subprocess.Popen([DDPLAUNCH, "--master_port=0", "--nproc_per_node=1",
                                  "/bin/sleep", "100"], stderr=subprocess.PIPE, text=True,
                                 env=dict(os.environ, DDP_LOG_LEVEL="debug", **self.env()),
                                 preexec_fn=enter)
            self.procs.append(a)
            job, seen = job_cgroup(a)
            if not job:
                self.skipTest("no cgroup for jobs here: " + seen)
            lock = "/dev/shm/ddplaunch-cgroup-%s.lock" % os.path.basename(job)[10:]
            self.assertTrue(os.path.dirname(job) == parent, job)

            def populated():
                with open(os.path.join(job, "cgroup.procs")) as f:
                    return f.read().strip() != ""
            wait_for(populated, what="the worker in its cgroup")
            pages = job_pages(a.pid, self.dir, 1)
            # The launcher and its guards die at once: stopped, the job's
            # cgroup (guards and worker) killed, then the launcher.
            os.kill(a.pid, signal.SIGSTOP)
            with open(os.path.join(job, "cgroup.kill"), "w") as f:
                f.write("1")
            wait_for(lambda: not populated(), what="the job's cgroup to empty")
            a.kill()
            a.wait(timeout=30)
            # Both are left, or (when a launcher of a test running beside
            # this one swept them first) both are gone: never one alone.
            self.assertEqual(os.path.exists(job), os.path.exists(lock))
            # A launcher in our own cgroup, which cannot list the other one.
            r = self.launch(["--nproc_per_node=1", "/bin/true"],
                            env={"DDP_LOG_LEVEL": "debug"})
            self.assertEqual(r.returncode, 0, r.stderr)
            self.assertEqual((os.path.exists(job), os.path.exists(lock)), (False, False),
                             "the abandoned cgroup and its lock must go together:\n"
                             + r.stderr)
            # And the dead job's /dev/shm names with them (the lock file
            # names its tag): no guard was left to remove them.
            self.assertEqual([pg for pg in pages if os.path.exists(pg)], [], r.stderr)
        finally:
            if job and os.path.isdir(job):
                os.rmdir(job)
            if lock and os.path.exists(lock):
                os.unlink(lock)
            os.rmdir(parent)

    def test_dead_jobs_names_go_with_its_cgroup(self):
        # A launcher killed with -9 while its guards have not run yet (a
        # loaded machine; here they are stopped) when another launcher
        # starts: that one removes the dead launcher's cgroup, which kills
        # the guards before they removed the job's /dev/shm names, so it
        # removes the names too (the lock file names the job's tag). Before,
        # the progress pages were left (the multinode campaign's seed
        # 26991274, in a CI running tests side by side).
        p = self.start(["--nproc_per_node=2", "/bin/sleep", "100"],
                       env={"DDP_LOG_LEVEL": "debug"})
        job, seen = job_cgroup(p)
        if not job:
            self.skipTest("no cgroup for jobs here: " + seen)
        pages = job_pages(p.pid, self.dir, 2)
        procs = descendants(p.pid)
        for pid in children(p.pid):  # the guards
            os.kill(pid, signal.SIGSTOP)
        p.kill()
        p.wait()
        r = self.launch(["--nproc_per_node=1", "/bin/true"], env={"DDP_LOG_LEVEL": "debug"})
        self.assertEqual(r.returncode, 0, r.stderr)
        wait_for(lambda: not any(pid_alive(pid) for pid in procs), 10,
                 "the dead job's processes to end")
        self.assertFalse(os.path.exists(job), r.stderr)
        self.assertEqual([pg for pg in pages if os.path.exists(pg)], [],
                         "the dead job's names must go with its cgroup:\n" + r.stderr)


class SharedMemory(LaunchCase):
    """A rank killed at any moment of the shared-memory set-up (and after)
    leaves nothing of the job in /dev/shm: libddp unlinks its names once
    every rank mapped them, ddplaunch removes the job's (DDP_JOB_TAG) when
    the group ends."""

    def sweep(self):
        # Rank 1 and rank 0 in turn, every 0.25 ms over the first 8 ms of
        # their life (ddp_init's store exchange, the segment's creation and
        # mapping, the arenas, the all-reduce, the exit: a few ms on an idle
        # machine), then every 16 ms up to 160 ms (a loaded one).
        delays = list(range(0, 8000, 250)) + list(range(8000, 160000, 16000))
        return [(rank, us) for us in delays for rank in (1, 0)]

    def argv(self, rank, us, note_dir):
        return [DDPLAUNCH, "--master_port=0", "--nproc_per_node=2", DDP_HELPER,
                "--note", note_dir, "--die", str(rank), str(us)]

    def test_rank_killed_during_setup(self):
        env = dict(os.environ, DDP_BACKEND="cpu", DDP_CPU_TRANSPORT="shm",
                   DDP_TIMEOUT_MS="20000", **self.env())
        probe = subprocess.run(["unshare", "-m", "--propagation", "private", "true"],
                               capture_output=True)
        if probe.returncode != 0:
            self.check_by_tag(env)
            return
        runs = [self.argv(rank, us, self.dir) for rank, us in self.sweep()]
        r = subprocess.run(["unshare", "-m", "--propagation", "private", sys.executable, "-c",
                            SHM_SWEEP, json.dumps(runs)], capture_output=True, text=True,
                           timeout=110, env=env)
        self.assertEqual(r.returncode, 0, r.stderr)
        results = [json.loads(line) for line in r.stdout.splitlines()]
        self.assertEqual(len(results), len(runs), r.stderr)
        left = [res for res in results if res[2]]
        self.assertEqual(left, [], "names left in /dev/shm (delay us, exit, names, stderr)")
        # The sweep covered both a job that got through and ones that did not.
        self.assertIn(0, [res[1] for res in results])
        self.assertTrue(any(res[1] != 0 for res in results))

    def check_by_tag(self, env):
        # No mount namespace (not root): /dev/shm is shared with everyone, so
        # only the names with the job's tag or its ranks' pids are looked at.
        for rank, us in self.sweep()[::4]:
            r = subprocess.run(self.argv(rank, us, self.dir), capture_output=True, text=True,
                               timeout=60, env=env)
            mine = set()
            for n in (0, 1):
                try:
                    with open(self.path("note.%d" % n)) as f:
                        pid, tag = f.read().split()
                except FileNotFoundError:
                    continue
                mine |= {"ddp-%s-" % tag, "ddp-%s-" % pid}
            left = [e for e in os.listdir("/dev/shm") if any(e.startswith(m) for m in mine)]
            self.assertEqual(left, [], "rank %d killed after %d us: %s" % (rank, us, r.stderr))


    # The progress pages (common/progress.h): one per worker, made by the
    # agent beside the job's other shared-memory names.
    def test_progress_pages_named_and_removed(self):
        r = self.launch(["--nproc_per_node=2", HELPER, "env", self.dir])
        self.assertEqual(r.returncode, 0, r.stderr)
        pages = set()
        for rank in (0, 1):
            env = read_env(self.path("env.%d.0" % rank))
            want = "/dev/shm/ddp-%s-progress-%s" % (env["DDP_JOB_TAG"], env["LOCAL_RANK"])
            self.assertEqual(env["DDP_PROGRESS_FILE"], want)
            pages.add(want)
            self.assertFalse(os.path.exists(want), "the page outlived its job")
        self.assertEqual(len(pages), 2)

    def test_progress_pages_fresh_and_writable(self):
        # The tiny writer exits 3 unless it finds DDP_PROGRESS_SIZE zero
        # bytes, 4 without the variable, 5 when it cannot map the file.
        r = self.launch(["--nproc_per_node=2", HELPER, "progress", "1", "write"])
        self.assertEqual(r.returncode, 0, r.stderr)

    def test_progress_pages_gone_after_kill_9(self):
        p = self.start(["--nproc_per_node=2", HELPER, "catch", self.dir])
        self.wait_files(["ready.0", "ready.1"])
        pages = set()
        for entry in os.listdir("/proc"):
            if entry.isdigit():
                got = progress_page_env(int(entry), self.dir)
                if got:
                    pages.add(got[0])
        self.assertEqual(len(pages), 2, pages)
        for page in pages:
            self.assertEqual(os.stat(page).st_size, 4096)
        p.kill()
        p.wait()
        wait_for(lambda: not any(os.path.exists(pg) for pg in pages), 30.0,
                 "the pages of a launcher killed with -9 to be removed")


class LiveLines(LaunchCase):
    """A line without its newline (a prompt, a progress bar) is shown after a
    short quiet time, and two ranks' text never shares a console line."""

    def read_until(self, p, text, got):
        """Reads p's stdout into got[0] until `text` is in it (bounded)."""
        fd = p.stdout.fileno()
        deadline = time.monotonic() + 20
        while text not in got[0]:
            left = deadline - time.monotonic()
            self.assertGreater(left, 0, "%r not shown; stdout so far: %r" % (text, got[0]))
            if select.select([fd], [], [], left)[0]:
                chunk = os.read(fd, 65536)
                self.assertTrue(chunk, "stdout ended before %r: %r" % (text, got[0]))
                got[0] += chunk.decode()

    def start_raw(self, args, **kw):
        full = dict(os.environ, **self.env())
        p = subprocess.Popen([DDPLAUNCH, "--master_port=0"] + args, stdout=subprocess.PIPE,
                             stderr=subprocess.PIPE, env=full, **kw)
        self.procs.append(p)
        return p

    def finish(self, p, got):
        out, err = p.communicate(timeout=30)
        self.assertEqual(p.returncode, 0, err.decode())
        return got[0] + out.decode()

    def test_prompt_shown(self):
        for flags, shown in ((["--no_prefix"], "name? "), ([], "[rank 0]: name? ")):
            with self.subTest(flags=flags):
                go = self.path("go%d" % len(flags))
                p = self.start_raw(["--nproc_per_node=1"] + flags + [
                    "--", "/bin/sh", "-c", "printf 'name? '; exec %s await %s" % (HELPER, go)])
                got = [""]
                self.read_until(p, shown, got)
                open(go, "w").close()
                self.assertEqual(self.finish(p, got), shown + "\n")

    def test_python_input(self):
        p = self.start_raw(["--nproc_per_node=1", "--", "/usr/bin/python3", "-c",
                            "print('hello', input('name? '))"], stdin=subprocess.PIPE)
        got = [""]
        self.read_until(p, "[rank 0]: name? ", got)
        p.stdin.write(b"bob\n")
        p.stdin.close()
        p.stdin = None
        self.assertEqual(self.finish(p, got), "[rank 0]: name? hello bob\n")

    def test_ranks_never_share_a_line(self):
        p = self.start_raw(["--nproc_per_node=2", "--", "/bin/sh", "-c",
                            "if [ $RANK = 0 ]; then printf AAA; %s await %s/go2; printf 'aaa\\n'; "
                            "else %s await %s/go1; printf 'BBB\\n'; fi"
                            % (HELPER, self.dir, HELPER, self.dir)])
        got = [""]
        self.read_until(p, "[rank 0]: AAA", got)
        open(self.path("go1"), "w").close()
        self.read_until(p, "[rank 1]: BBB\n", got)
        open(self.path("go2"), "w").close()
        self.assertEqual(self.finish(p, got), "[rank 0]: AAA\n[rank 1]: BBB\n[rank 0]: aaa\n")

    def test_progress_bar(self):
        # tqdm redraws with '\r': each redraw keeps the prefix on the
        # console; the log file has the bytes as they came.
        logs = self.path("logs")
        p = self.start_raw(["--nproc_per_node=1", "--log_dir", logs, "-t", "1", "--", "/bin/sh",
                            "-c", "printf '\\r 10%%%%'; %s await %s/go; printf '\\r100%%%%\\n'"
                            % (HELPER, self.dir)])
        got = [""]
        self.read_until(p, "[rank 0]:  10%", got)
        open(self.path("go"), "w").close()
        self.assertEqual(self.finish(p, got), "[rank 0]:  10%\r[rank 0]: 100%\n")
        with open(os.path.join(logs, "latest", "attempt_0", "0", "stdout.log"), newline="") as f:
            self.assertEqual(f.read(), "\r 10%\r100%\n")


class Ports(LaunchCase):
    def test_taken_port_moves_or_fails_strict(self):
        holder = socket.socket()
        holder.bind(("127.0.0.1", 0))
        holder.listen(1)
        port = holder.getsockname()[1]
        try:
            r = self.launch(["--nproc_per_node=1", "--master_port=%d" % port, HELPER, "env", self.dir])
            self.assertEqual(r.returncode, 0, r.stderr)
            m = re.search(r"ddplaunch: port %d is in use by another process; using (\d+) "
                          r"instead \(--strict_port to refuse\)" % port, r.stderr)
            self.assertIsNotNone(m, r.stderr)
            self.assertEqual(read_env(self.path("env.0.0"))["MASTER_PORT"], m.group(1))
            r = self.launch(["--strict_port", "--master_port=%d" % port, HELPER, "exit", "0"])
            self.assertEqual(r.returncode, 2)
            self.assertIn("port %d is in use by another process" % port, r.stderr)
            # --dry_run refuses it as the run does (it probes the port, then
            # lets it go), and accepts the same line once the port is free.
            r = self.launch(["--dry_run", "--strict_port", "--master_port=%d" % port, HELPER])
            self.assertEqual(r.returncode, 2, r.stdout + r.stderr)
            self.assertIn("port %d is in use by another process" % port, r.stderr)
        finally:
            holder.close()
        r = self.launch(["--dry_run", "--strict_port", "--master_port=%d" % port, HELPER])
        self.assertEqual(r.returncode, 0, r.stderr)

    def test_dry_run_without_ddp_exec(self):
        """A ddplaunch whose ddp-exec is missing: --dry_run refuses it as a
        run does, naming what to do."""
        lone = os.path.join(self.dir, "lone")
        os.mkdir(lone)
        shutil.copy(DDPLAUNCH, lone)
        real = subprocess.run([os.path.join(lone, "ddplaunch"), HELPER, "exit", "0"],
                              capture_output=True, text=True, timeout=30)
        if real.returncode == 0:
            self.skipTest("a ddp-exec is installed in the configured libexecdir, so this "
                          "ddplaunch finds one")
        self.assertIn("cannot find 'ddp-exec'", real.stderr)
        r = subprocess.run([os.path.join(lone, "ddplaunch"), "--dry_run", HELPER],
                           capture_output=True, text=True, timeout=30)
        self.assertEqual(r.returncode, 2, r.stdout + r.stderr)
        self.assertIn("cannot find 'ddp-exec' next to ddplaunch", r.stderr)
        self.assertIn("reinstall ddplaunch", r.stderr)

    def test_default_port_29500_then_a_free_one(self):
        # torchrun's default port is fixed, so this runs in a network
        # namespace of its own (root only), where 29500 is surely free and
        # holding it harms no parallel test.
        probe = subprocess.run(["unshare", "-n", "true"], capture_output=True)
        if probe.returncode != 0:
            self.skipTest("cannot create a network namespace: %s" % probe.stderr.decode())
        script = (
            "import socket, subprocess, sys\n"
            "subprocess.run(['ip', 'link', 'set', 'lo', 'up'], check=True)\n"
            "def launch(tag):\n"
            "    r = subprocess.run(sys.argv[1:-1] + [sys.argv[-1] + '/' + tag],\n"
            "                       capture_output=True, text=True, timeout=60)\n"
            "    sys.stderr.write(r.stderr)\n"
            "    assert r.returncode == 0, r.returncode\n"
            "launch('free')\n"
            "holder = socket.socket()\n"
            "holder.bind(('0.0.0.0', 29500))\n"
            "holder.listen(1)\n"
            "launch('taken')\n")
        for tag in ("free", "taken"):
            os.mkdir(self.path(tag))
        r = subprocess.run(["unshare", "-n", sys.executable, "-c", script, DDPLAUNCH,
                            "--nproc_per_node=1", HELPER, "env", self.dir],
                           capture_output=True, text=True, timeout=120,
                           env=dict(os.environ, **self.env()))
        self.assertEqual(r.returncode, 0, r.stderr)
        self.assertEqual(read_env(self.path("free", "env.0.0"))["MASTER_PORT"], "29500")
        moved = read_env(self.path("taken", "env.0.0"))["MASTER_PORT"]
        self.assertNotEqual(moved, "29500")
        self.assertIn("port 29500 is in use by another process; using %s instead" % moved,
                      r.stderr)

    def test_store_is_bound_before_workers(self):
        # The worker checks that MASTER_PORT is already listening.
        r = self.launch(["--standalone", "--nproc_per_node=1", "--", "/usr/bin/python3", "-c",
                 "import os, socket; s = socket.create_connection(('127.0.0.1', "
                 "int(os.environ['MASTER_PORT'])), timeout=5); s.close()"])
        self.assertEqual(r.returncode, 0, r.stderr)


class JobFiles(LaunchCase):
    def test_config_with_cli_override(self):
        job = self.path("job.ini")
        with open(job, "w") as f:
            f.write("[launch]\nnproc_per_node = 3\nmax_restarts = 1\n"
                    "[program]\nprogram = %s\narg = env\narg = %s\n"
                    "[env]\nJOB_VAR = from job file\n" % (HELPER, self.dir))
        r = self.launch(["--config", job, "--nproc_per_node=2"])
        self.assertEqual(r.returncode, 0, r.stderr)
        env = read_env(self.path("env.1.0"))
        self.assertEqual(env["WORLD_SIZE"], "2")
        self.assertEqual(env["JOB_VAR"], "from job file")
        self.assertEqual(env["TORCHELASTIC_MAX_RESTARTS"], "1")
        self.assertFalse(os.path.exists(self.path("env.2.0")))

    def test_config_error_names_file_line_key(self):
        job = self.path("bad.ini")
        with open(job, "w") as f:
            f.write("[launch]\nnproc_per_node = 2\nmaster_prot = 1\n")
        r = self.launch(["--config", job, HELPER, "exit", "0"])
        self.assertEqual(r.returncode, 2)
        self.assertIn("%s:3: unknown key 'master_prot' in [launch]" % job, r.stderr)


    def test_dry_run_refuses_what_the_run_refuses(self):
        for flags in (["--nnodes=1:2"], ["--nnodes=2", "--rdzv_backend=c10d"],
                      ["--nnodes=2", "--node_rank=2"], ["--nnodes=2", "--rdzv_conf=bogus=1"]):
            with self.subTest(flags=flags):
                dry = self.launch(["--dry_run"] + flags + [HELPER, "exit", "0"])
                real = self.launch(flags + [HELPER, "exit", "0"])
                self.assertEqual(real.returncode, 2, real.stderr)
                self.assertEqual(dry.returncode, real.returncode, dry.stderr)
                self.assertEqual(dry.stderr, real.stderr)
                self.assertEqual(dry.stdout, "")


class Programs(LaunchCase):
    def test_py_module_no_python_local_rank(self):
        script = self.path("show.py")
        with open(script, "w") as f:
            f.write("import sys, os\nprint('py', os.environ['RANK'], sys.argv[1:], "
                    "sys.flags.dont_write_bytecode, sys.stdout.line_buffering)\n")
        env = {"PYTHON_EXEC": "/usr/bin/python3", "PYTHONPATH": self.dir}
        r = self.launch(["--nproc_per_node=2", "--pass_local_rank", script, "a", "b"], env=env)
        self.assertEqual(r.returncode, 0, r.stderr)
        self.assertIn("[rank 1]: py 1 ['--local_rank=1', 'a', 'b']", r.stdout)
        r = self.launch(["-m", "--nproc_per_node=1", "show", "x"], env=env)
        self.assertEqual(r.returncode, 0, r.stderr)
        self.assertIn("[rank 0]: py 0 ['x']", r.stdout)
        os.chmod(script, 0o755)
        with open(script) as f:
            body = f.read()
        with open(script, "w") as f:
            f.write("#!/usr/bin/python3\n" + body)
        r = self.launch(["--no_python", script, "y"], env={"PYTHON_EXEC": "/nonexistent"})
        self.assertEqual(r.returncode, 0, r.stderr)
        self.assertIn("[rank 0]: py 0 ['y']", r.stdout)

    def test_local_rank_spellings(self):
        # torch.distributed.launch passed --local_rank=N (torch 2.x: --local-rank=N)
        # unless --use_env; torchrun passes nothing.
        script = self.path("args.py")
        with open(script, "w") as f:
            f.write("import sys\nprint(sys.argv[1:])\n")
        job = self.path("dash.ini")
        with open(job, "w") as f:
            f.write("[launch]\npass_local_rank = dash\n")
        env = {"PYTHON_EXEC": "/usr/bin/python3"}
        cases = [
            ([], "['a']"),
            (["--pass_local_rank"], "['--local_rank=1', 'a']"),
            (["--pass_local_rank=underscore"], "['--local_rank=1', 'a']"),
            (["--pass-local-rank=dash"], "['--local-rank=1', 'a']"),
            (["--config", job], "['--local-rank=1', 'a']"),
            (["--config", job, "--pass_local_rank=false"], "['a']"),
            (["--use_env"], "['a']"),
            (["--use_env=false"], "['--local_rank=1', 'a']"),
            (["--use_env=false", "--pass_local_rank=dash"], "['--local-rank=1', 'a']"),
        ]
        for flags, argv in cases:
            with self.subTest(flags=flags):
                r = self.launch(["--nproc_per_node=2"] + flags + [script, "a"], env=env)
                self.assertEqual(r.returncode, 0, r.stderr)
                self.assertIn("[rank 1]: %s\n" % argv, r.stdout)
        r = self.launch(["--use_env", "--pass_local_rank", script], env=env)
        self.assertEqual(r.returncode, 2)
        self.assertIn("--use_env and --pass_local_rank contradict each other", r.stderr)
        r = self.launch(["--pass_local_rank=dashes", script], env=env)
        self.assertEqual(r.returncode, 2)
        self.assertIn("bad value 'dashes' for 'pass_local_rank'", r.stderr)


if __name__ == "__main__":
    unittest.main()
