"""A real Slurm cluster on this host, for tests (stdlib only).

Debian's slurm-wlm and munge: munged with a private key and socket, one
slurmctld and N slurmd, each slurmd a node ("n1", "n2", ...) with its own
spool directory. Each node is a host of its own: a network namespace
(tests/multinode/netns.py) with one address, 10.A.B.1, 10.A.B.2, ..., on a
veth to a bridge, and a UTS namespace whose hostname is the node's name, as
on a real cluster, so that 127.0.0.1 on one node is not another's and a
worker given a wrong MASTER_ADDR fails. slurmctld runs in one more such
namespace, the "login host" (address 10.A.B.N+1, the host's own hostname),
and so does every client (srun, sbatch, scontrol, ...; cmd() wraps one):
a namespace address is only ever contacted from inside a namespace. The
namespaces are made and removed by the cluster itself, under names of its
own, so clusters started side by side never meet; inside them Slurm's
default ports are free by construction.

The daemons run inside their own PID and mount namespaces (unshare), under a
small init (this file run with --inner) that starts them, reaps what they
leave and stops them when its stdin closes. So nothing the cluster started
outlives it: when the init ends, the kernel kills every process left in the
namespace (slurmstepd, job tasks), even if this test process itself was
killed. The init also moves itself into a cgroup of its own (cgroup v2,
where this process may make one), so that what runs in the cluster meets
only its own processes in the cgroup tree: ddplaunch removes the cgroups of
launchers that are gone, by PID, and PIDs in the cluster's namespace are not
the host's. stop() kills what is left in that cgroup and removes it.
The mount namespace gives the nodes an /etc/hosts of their own in
which "n1", "n2", ... resolve to their addresses (the host's file is never
touched). The clients run in the test's own mount namespace: they reach
the daemons over TCP and munged's socket (a Unix socket: the filesystem is
shared).

Readiness: munged is ready when it returns (it daemonises only once it
serves). Slurm has no readiness notification a client could wait on, so
the init polls slurmctld's port until it takes a connection (every 10 ms)
before it reports, then this end polls sinfo until every node is idle
(every 20 ms), both under one deadline. Batch jobs end by writing to a FIFO
that sbatch() reads (no polling).

    with SlurmCluster(nodes=2) as c:
        out = c.srun(["-N2", "--ntasks-per-node=1", "env"])

SlurmCluster.unavailable() says why the daemons cannot run here (None when
they can); tests skip with that message.
"""
import atexit
import json
import os
import select
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "multinode"))
import netns  # noqa: E402

BINARIES = ["munged", "slurmctld", "slurmd", "srun", "sinfo", "scontrol", "unshare", "nsenter",
            "ip"]
SBIN_DIRS = ["/usr/sbin", "/sbin"]
# Slurm's own defaults: each daemon listens in a network namespace that the
# cluster has just made, where nothing else can hold a port.
CTLD_PORT = 6817
SLURMD_PORT = 6818


def which(name):
    path = os.environ.get("PATH", "") + os.pathsep + os.pathsep.join(SBIN_DIRS)
    return shutil.which(name, path=path)


class ClusterError(Exception):
    pass


def own_cgroup():
    """This process's cgroup v2 directory, or None without cgroup v2."""
    mount = root = path = None
    with open("/proc/self/mountinfo") as f:
        for line in f:
            pre, _, post = line.partition(" - ")
            if post.startswith("cgroup2 "):
                root, mount = pre.split()[3:5]
                break
    with open("/proc/self/cgroup") as f:
        for line in f:
            if line.startswith("0::"):
                path = line[3:].strip()
    if mount is None or path is None:
        return None
    if root != "/":
        if not path.startswith(root):
            return None
        path = path[len(root):]
    return os.path.join(mount, path.lstrip("/"))


def cgroup_populated(cg):
    try:
        with open(os.path.join(cg, "cgroup.events")) as f:
            return "populated 1\n" in f.read()
    except OSError:
        return False


class SlurmCluster:
    """nodes: node count; cpus: CPUs per node (default: this host's count);
    extra_conf: more slurm.conf lines; start_timeout: seconds for the
    daemons to start and every node to be idle."""

    def __init__(self, nodes=2, cpus=None, extra_conf=(), start_timeout=30.0):
        self.nnodes = nodes
        self.cpus = cpus or os.cpu_count() or 1
        self.extra_conf = list(extra_conf)
        self.start_timeout = start_timeout
        self.names = ["n%d" % (i + 1) for i in range(nodes)]
        self.hosts = None  # netns.Hosts: the nodes' namespaces, then the login host's
        self.addrs = []  # the nodes' addresses, once started
        self.dir = None
        self.init = None
        self.cgroup = None
        self.times = {}
        self.inner_report = {}
        self._atexit = False

    @staticmethod
    def unavailable():
        """Why the daemons cannot run on this machine, or None."""
        if os.geteuid() != 0:
            return "the Slurm test cluster needs root (slurmd runs jobs as their user)"
        missing = [b for b in BINARIES if which(b) is None]
        if missing:
            return "not installed: %s (Debian packages slurm-wlm, munge)" % " ".join(missing)
        r = subprocess.run([which("unshare"), "--pid", "--fork", "--mount", "--mount-proc",
                            "--uts", "true"], capture_output=True, text=True)
        if r.returncode != 0:
            return "cannot create PID, mount and UTS namespaces: %s" % r.stderr.strip()
        return netns.available()

    # --- set-up -------------------------------------------------------------

    def _write_files(self):
        d = self.dir
        for sub in ["munge", "state", "log"] + ["spool/" + n for n in self.names]:
            os.makedirs(os.path.join(d, sub), exist_ok=True)
        # munged refuses a key that others may read, and a socket directory
        # that others may write; clients need to reach the socket (0755).
        os.chmod(d, 0o755)
        os.chmod(os.path.join(d, "munge"), 0o755)
        key = os.path.join(d, "munge", "munge.key")
        with open(key, "wb") as f:
            f.write(os.urandom(1024))
        os.chmod(key, 0o600)
        with open("/etc/hosts") as f:
            hosts = f.read()
        with open(os.path.join(d, "hosts"), "w") as f:
            f.write(hosts.rstrip("\n") + "\n")
            for name, addr in zip(self.names, self.addrs):
                f.write("%s %s\n" % (addr, name))
        with open(self.conf, "w") as f:
            f.write(self._slurm_conf())

    def _slurm_conf(self):
        d = self.dir
        host = socket.gethostname().split(".")[0]
        lines = [
            "ClusterName=ddptest",
            "SlurmctldHost=%s(%s)" % (host, self.login_addr),
            "SlurmctldPort=%d" % CTLD_PORT,
            "AuthType=auth/munge",
            "CredType=cred/munge",
            "AuthInfo=socket=%s" % self.munge_socket,
            "SlurmUser=root",
            "SlurmdUser=root",
            "StateSaveLocation=%s/state" % d,
            "SlurmdSpoolDir=%s/spool/%%n" % d,
            "SlurmctldPidFile=%s/slurmctld.pid" % d,
            "SlurmdPidFile=%s/slurmd-%%n.pid" % d,
            "SlurmctldLogFile=%s/log/slurmctld.log" % d,
            "SlurmdLogFile=%s/log/slurmd-%%n.log" % d,
            "ProctrackType=proctrack/linuxproc",
            "TaskPlugin=task/none",
            "SelectType=select/cons_tres",
            "SelectTypeParameters=CR_CPU",
            "MpiDefault=none",
            "SwitchType=switch/none",
            "JobCompType=jobcomp/none",
            "JobAcctGatherType=jobacct_gather/none",
            "AccountingStorageType=accounting_storage/none",
            "ReturnToService=2",
            "InactiveLimit=0",
            "KillWait=5",
            # schedule batch jobs at once rather than seconds later
            "SchedulerParameters=batch_sched_delay=0,sched_min_interval=0",
            "SlurmctldDebug=info",
            "SlurmdDebug=info",
        ]
        for name, addr in zip(self.names, self.addrs):
            lines.append("NodeName=%s NodeHostname=%s NodeAddr=%s Port=%d CPUs=%d State=UNKNOWN"
                         % (name, name, addr, SLURMD_PORT, self.cpus))
        lines.append("PartitionName=debug Nodes=ALL Default=YES MaxTime=INFINITE State=UP")
        return "\n".join(lines + self.extra_conf) + "\n"

    @property
    def conf(self):
        return os.path.join(self.dir, "slurm.conf")

    @property
    def munge_socket(self):
        return os.path.join(self.dir, "munge", "munge.socket")

    @property
    def login_addr(self):
        """slurmctld's address, that of the namespace the clients run in."""
        return self.hosts.addr(self.nnodes)

    def netns_path(self, i):
        """The network namespace of node i, or of the login host (i = nnodes)."""
        return "/run/netns/" + self.hosts.names[i]

    def cmd(self, name):
        """argv that runs Slurm's client `name` on the login host (its network
        namespace): nsenter execs it, so the PID is the client's."""
        return [which("nsenter"), "--net=" + self.netns_path(self.nnodes), "--", which(name)]

    def env(self, extra=None):
        """The environment for Slurm's clients (srun, sinfo, ...)."""
        e = dict(os.environ)
        for k in list(e):
            if k.startswith("SLURM_"):
                del e[k]
        e["SLURM_CONF"] = self.conf
        e.update(extra or {})
        return e

    # --- start and stop -----------------------------------------------------

    def start(self):
        why = self.unavailable()
        if why:
            raise ClusterError(why)
        if not self._atexit:
            atexit.register(self.stop)
            self._atexit = True
        try:
            self._start_once()
        except BaseException:
            self.stop()
            raise
        return self

    def _start_once(self):
        self.times = {}
        t0 = time.monotonic()
        self.hosts = netns.Hosts(self.nnodes + 1)
        self.addrs = [self.hosts.addr(i) for i in range(self.nnodes)]
        self.times["namespaces_s"] = time.monotonic() - t0
        self.dir = tempfile.mkdtemp(prefix="ddp-slurm-")
        self._write_files()
        self.cgroup = self._make_cgroup()
        # nsenter execs unshare, so that killing this PID kills the init
        # (--kill-child) and with it the whole PID namespace.
        nodes = ",".join("%s=%s" % (n, self.netns_path(i)) for i, n in enumerate(self.names))
        cmd = [which("nsenter"), "--net=" + self.netns_path(self.nnodes), "--",
               which("unshare"), "--pid", "--fork", "--mount", "--mount-proc",
               "--propagation", "private", "--kill-child", "--",
               sys.executable, os.path.abspath(__file__), "--inner", self.dir, nodes,
               self.cgroup or "-"]
        self.init = subprocess.Popen(cmd, stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                     env=self.env(), cwd=self.dir)
        deadline = t0 + self.start_timeout
        self.inner_report = self._read_report(deadline)
        self.times.update(self.inner_report.get("times", {}))
        self.times["ctld_listens_s"] = time.monotonic() - t0
        self._wait_idle(deadline, t0)

    def _make_cgroup(self):
        """A cgroup for the cluster under this process's, or None where none
        can be made (no cgroup v2, no write access): ddplaunch makes none
        either then."""
        own = own_cgroup()
        if own is None:
            return None
        cg = os.path.join(own, "ddp-slurm-" + os.path.basename(self.dir))
        try:
            os.mkdir(cg)
        except OSError:
            return None
        if not os.access(os.path.join(cg, "cgroup.procs"), os.W_OK):
            os.rmdir(cg)
            return None
        return cg

    def _remove_cgroup(self, grace=5.0):
        """Kills what is left in the cluster's cgroup (nothing, once the
        init has ended) and removes it with the cgroups made inside."""
        cg, self.cgroup = self.cgroup, None
        if not cg or not os.path.isdir(cg):
            return
        if cgroup_populated(cg) and os.path.exists(os.path.join(cg, "cgroup.kill")):
            with open(os.path.join(cg, "cgroup.kill"), "w") as f:
                f.write("1")
        deadline = time.monotonic() + grace
        while cgroup_populated(cg) and time.monotonic() < deadline:
            time.sleep(0.01)  # the kernel reaps the killed; no event to wait on here
        for d, _, _ in os.walk(cg, topdown=False):
            try:
                os.rmdir(d)
            except OSError:
                pass

    def _read_report(self, deadline):
        """The init's one JSON line: the daemons' PIDs (in the namespace) and
        how long munged took, or why a daemon did not start."""
        line = b""
        while not line.endswith(b"\n"):
            left = deadline - time.monotonic()
            if left <= 0:
                raise ClusterError("the cluster's init did not report within %.0f s%s"
                                   % (self.start_timeout, self.log_tails()))
            ready, _, _ = select.select([self.init.stdout], [], [], left)
            if ready:
                chunk = os.read(self.init.stdout.fileno(), 4096)
                if not chunk:
                    raise ClusterError("the cluster's init exited (%s)%s"
                                       % (self.init.wait(), self.log_tails()))
                line += chunk
        report = json.loads(line)
        if "error" in report:
            raise ClusterError(report["error"] + self.log_tails())
        return report

    def _wait_idle(self, deadline, t0):
        """Polls sinfo until every node is idle (slurmctld listens once the
        init has reported; see the module's docstring)."""
        states = {}
        while time.monotonic() < deadline:
            died = self._inner_messages()
            if died:
                raise ClusterError("%s%s" % (died, self.log_tails()))
            r = subprocess.run(self.cmd("sinfo") + ["-h", "-N", "-o", "%N %T"],
                               capture_output=True, text=True, env=self.env())
            if r.returncode == 0:
                self.times.setdefault("ctld_answers_s", time.monotonic() - t0)
                states = dict(l.split() for l in r.stdout.splitlines() if l.strip())
                if all(states.get(n) == "idle" for n in self.names):
                    self.times["nodes_idle_s"] = time.monotonic() - t0
                    return
            time.sleep(0.02)
        raise ClusterError("nodes not idle within %.0f s: %s%s"
                           % (self.start_timeout, states or "slurmctld never answered",
                              self.log_tails()))

    def _inner_messages(self):
        """A daemon death the init reported since the last call, or None."""
        ready, _, _ = select.select([self.init.stdout], [], [], 0)
        if not ready:
            return None
        data = os.read(self.init.stdout.fileno(), 4096)
        if not data:
            return "the cluster's init exited (%s)" % self.init.wait()
        return data.decode(errors="replace").strip()

    def stop(self):
        """Stops everything the cluster started; safe to call twice."""
        if self.init is not None:
            init, self.init = self.init, None
            try:
                init.stdin.close()  # the init stops the daemons and exits
            except OSError:
                pass
            try:
                init.wait(timeout=15)
            except subprocess.TimeoutExpired:
                # unshare --kill-child passes SIGKILL on to the init, and the
                # kernel ends the rest of the namespace with it.
                init.kill()
                init.wait()
            init.stdout.close()
        self._remove_cgroup()
        if self.dir is not None:
            shutil.rmtree(self.dir, ignore_errors=True)
            self.dir = None
        if self.hosts is not None:
            hosts, self.hosts = self.hosts, None
            hosts.close()

    def __enter__(self):
        return self.start()

    def __exit__(self, *exc):
        self.stop()

    # --- use ----------------------------------------------------------------

    def srun(self, args, timeout=60, env=None, check=True):
        """Runs srun ARGS to its end; returns the CompletedProcess. srun runs
        in a session of its own, so that on a timeout it ends together with
        the shepherd process it forks (which would otherwise linger)."""
        p = subprocess.Popen(self.cmd("srun") + list(args), stdout=subprocess.PIPE,
                             stderr=subprocess.PIPE, text=True, env=self.env(env),
                             start_new_session=True)
        try:
            out, err = p.communicate(timeout=timeout)
        except subprocess.TimeoutExpired:
            os.killpg(p.pid, signal.SIGKILL)
            p.communicate()
            raise ClusterError("srun %s: no end within %.0f s%s"
                               % (" ".join(args), timeout, self.log_tails()))
        r = subprocess.CompletedProcess(p.args, p.returncode, out, err)
        if check and r.returncode != 0:
            raise ClusterError("srun %s: exit %d\n%s%s" % (" ".join(args), r.returncode,
                                                           r.stderr, self.log_tails()))
        return r

    def sbatch(self, lines, args=(), timeout=60):
        """Runs a batch script of `lines` (shell) with sbatch ARGS; returns
        (its exit status, its output) once it has ended. The script's last
        act is to write its status into a FIFO that this end reads: sbatch
        --wait would poll the controller, seconds apart."""
        name = "batch-%d-%s" % (os.getpid(), os.urandom(4).hex())
        script, out, fifo = (os.path.join(self.dir, name + ext)
                             for ext in (".sh", ".out", ".fifo"))
        os.mkfifo(fifo)
        # O_RDWR: the FIFO never reads as closed, so select() waits for data
        fd = os.open(fifo, os.O_RDWR | os.O_NONBLOCK)
        try:
            with open(script, "w") as f:
                f.write("#!/bin/sh\n(\n%s\n)\necho $? > %s\n" % ("\n".join(lines), fifo))
            r = subprocess.run(self.cmd("sbatch") + ["-o", out] + list(args) + [script],
                               capture_output=True, text=True, timeout=timeout, env=self.env())
            if r.returncode != 0:
                raise ClusterError("sbatch %s: exit %d\n%s" % (" ".join(args), r.returncode,
                                                               r.stderr))
            ready, _, _ = select.select([fd], [], [], timeout)
            if not ready:
                raise ClusterError("batch job %s did not end within %.0f s%s"
                                   % (r.stdout.strip(), timeout, self.log_tails()))
            status = int(os.read(fd, 64).decode().strip() or -1)
        finally:
            os.close(fd)
        with open(out) as f:
            return status, f.read()

    def log_tails(self, lines=15):
        if not self.dir:
            return ""
        out = []
        logdir = os.path.join(self.dir, "log")
        for name in sorted(os.listdir(logdir)) if os.path.isdir(logdir) else []:
            with open(os.path.join(logdir, name), errors="replace") as f:
                tail = f.read().splitlines()[-lines:]
            out.append("\n--- %s ---\n%s" % (name, "\n".join(tail)))
        return "".join(out)


# --- the init inside the namespaces ------------------------------------------

# Run as a node's slurmd: the node's hostname in the UTS namespace that
# unshare made, then slurmd itself (same PID).
SET_HOSTNAME = ("import os, socket, sys; socket.sethostname(sys.argv[1]); "
                "os.execv(sys.argv[2], sys.argv[2:])")


class Init:
    """PID 1 of the cluster's PID and mount namespaces, in the login host's
    network namespace: starts munged, slurmctld and one slurmd per node
    (each in its node's network namespace and a UTS namespace of its own),
    waits until slurmctld listens, reports one JSON line, reaps every child
    (orphans such as the daemonised munged and slurmstepd come to PID 1),
    reports a daemon that dies, and stops them all when its stdin closes.
    SIGCHLD wakes it through a pipe; it polls only slurmctld's port."""

    def __init__(self, d, nodes, cgroup):
        self.d, self.nodes, self.cgroup = d, nodes, cgroup
        self.daemons = {}
        self.wake_r, wake_w = os.pipe()
        os.set_blocking(wake_w, False)
        signal.set_wakeup_fd(wake_w)
        signal.signal(signal.SIGCHLD, lambda *_: None)
        signal.signal(signal.SIGTERM, lambda *_: None)

    def path(self, *p):
        return os.path.join(self.d, *p)

    def start(self):
        if self.cgroup:
            with open(os.path.join(self.cgroup, "cgroup.procs"), "w") as f:
                f.write("0")  # this process; the daemons and their jobs follow
        subprocess.run(["mount", "--bind", self.path("hosts"), "/etc/hosts"], check=True)
        report = {"times": {}, "pids": {}}
        t0 = time.monotonic()
        r = subprocess.run([which("munged"), "--socket=" + self.path("munge", "munge.socket"),
                            "--key-file=" + self.path("munge", "munge.key"),
                            "--pid-file=" + self.path("munge", "munged.pid"),
                            "--log-file=" + self.path("log", "munged.log"),
                            "--seed-file=" + self.path("munge", "munged.seed")],
                           capture_output=True, text=True)
        if r.returncode != 0:
            raise RuntimeError("munged did not start: " + r.stderr.strip())
        report["times"]["munged_s"] = time.monotonic() - t0
        with open(self.path("munge", "munged.pid")) as f:
            self.daemons[int(f.read())] = "munged"
        cmds = [("slurmctld", [which("slurmctld"), "-D", "-i"])]
        cmds += [("slurmd-" + n, [which("nsenter"), "--net=" + ns, "--", which("unshare"),
                                  "--uts", "--", sys.executable, "-c", SET_HOSTNAME, n,
                                  which("slurmd"), "-D", "-N", n]) for n, ns in self.nodes]
        for name, cmd in cmds:
            with open(self.path("log", name + ".stderr"), "w") as err:
                p = subprocess.Popen(cmd, stdin=subprocess.DEVNULL,
                                     stdout=subprocess.DEVNULL, stderr=err)
            self.daemons[p.pid] = name
            report["pids"][name] = p.pid
        report["times"]["daemons_spawned_s"] = time.monotonic() - t0
        self.wait_ctld()
        return report

    def wait_ctld(self):
        """Polls slurmctld's port, in this namespace, every 10 ms until it
        takes a connection (sinfo would retry a refused connection only a
        second later). Raises RuntimeError if a daemon exits first or the
        test closes stdin (it has given up)."""
        names = set(self.daemons.values())
        while True:
            try:
                socket.create_connection(("127.0.0.1", CTLD_PORT), timeout=1).close()
                return
            except OSError:
                pass
            if sys.stdin in self.wait([sys.stdin], 0.01):
                raise RuntimeError("stopped before slurmctld listened")
            self.reap(report_deaths=False)
            gone = names - set(self.daemons.values())
            if gone:
                raise RuntimeError("%s exited before slurmctld listened on port %d"
                                   % (", ".join(sorted(gone)), CTLD_PORT))

    def reap(self, report_deaths):
        while True:
            try:
                pid, status = os.waitpid(-1, os.WNOHANG)
            except ChildProcessError:
                return
            if pid == 0:
                return
            name = self.daemons.pop(pid, None)
            if name and report_deaths:
                try:
                    print("%s exited (status %d)" % (name, os.waitstatus_to_exitcode(status)),
                          flush=True)
                except BrokenPipeError:
                    pass  # the test has gone: stdin's end stops us next

    def wait(self, fds, timeout=None):
        ready, _, _ = select.select(fds + [self.wake_r], [], [], timeout)
        if self.wake_r in ready:
            os.read(self.wake_r, 512)
        return ready

    def serve(self):
        while True:
            ready = self.wait([sys.stdin])
            self.reap(report_deaths=True)
            if sys.stdin in ready and not os.read(sys.stdin.fileno(), 512):
                return

    def stop(self, grace=5.0):
        """SIGTERM to each daemon by PID, SIGKILL to those left after the
        grace period. What is no daemon (steps, tasks) ends with this init."""
        for pid in list(self.daemons):
            try:
                os.kill(pid, signal.SIGTERM)
            except ProcessLookupError:
                self.daemons.pop(pid, None)
        deadline = time.monotonic() + grace
        self.reap(report_deaths=False)
        while self.daemons and time.monotonic() < deadline:
            self.wait([], deadline - time.monotonic())
            self.reap(report_deaths=False)
        for pid in list(self.daemons):
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass


def inner_main(d, nodes, cgroup):
    init = Init(d, nodes, None if cgroup == "-" else cgroup)
    try:
        report = init.start()
    except (OSError, RuntimeError, subprocess.CalledProcessError) as e:
        print(json.dumps({"error": str(e)}), flush=True)
        init.stop()
        return 1
    print(json.dumps(report), flush=True)
    init.serve()
    init.stop()
    return 0


if __name__ == "__main__":
    if len(sys.argv) == 5 and sys.argv[1] == "--inner":
        sys.exit(inner_main(sys.argv[2], [n.split("=", 1) for n in sys.argv[3].split(",")],
                            sys.argv[4]))
    # Stand-alone: start a cluster, print its timings, run srun hostname.
    why = SlurmCluster.unavailable()
    if why:
        print("slurm cluster: " + why)
        sys.exit(77)
    with SlurmCluster() as c:
        t = time.monotonic()
        out = c.srun(["-N%d" % c.nnodes, "hostname"]).stdout
        c.times["srun_hostname_s"] = time.monotonic() - t
        print(out.strip())
        print(json.dumps(c.times))
