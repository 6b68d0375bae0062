"""Starts a real etcd (Debian's etcd-server) on loopback for tests.

    with EtcdCluster(members=3) as c:
        c.endpoints        # "127.0.0.1:P1,127.0.0.1:P2,127.0.0.1:P3"
        c.pids             # member PIDs, in endpoint order
        c.kill(i)          # SIGKILL member i and reap it
        c.leader()         # index of the current leader
        c.enable_auth("root", "pw")

Members listen on free loopback ports (chosen by binding port 0; a port
taken between that and etcd's bind makes the start fail, and the whole
cluster is tried again on fresh ports). start() waits for every member's
/health with a deadline. Members are stopped by PID: in stop(), on leaving
the `with`, and at interpreter exit (atexit) if a test forgot. With tls=True
the test makes a CA, a server and a client certificate with openssl, and
the members require client certificates.

etcd_unavailable() says why etcd cannot run at all here (None when it can).
"""
import atexit
import json
import os
import shutil
import socket
import ssl
import subprocess
import tempfile
import time
import urllib.request

ETCD = os.environ.get("ETCD", "etcd")
ETCDCTL = os.environ.get("ETCDCTL", "etcdctl")
START_TIMEOUT_S = 30.0

_live = set()


def _stop_all_at_exit():
    for cluster in list(_live):
        cluster.stop()


atexit.register(_stop_all_at_exit)


def etcd_unavailable():
    exe = shutil.which(ETCD)
    if not exe:
        return f"'{ETCD}' not found (install etcd-server)"
    try:
        out = subprocess.run([exe, "--version"], capture_output=True, text=True, timeout=30)
    except (OSError, subprocess.TimeoutExpired) as e:
        return f"'{exe} --version' cannot run: {e}"
    if out.returncode != 0:
        return f"'{exe} --version' failed: {out.stderr.strip()}"
    return None


def _free_ports(n):
    """n distinct free TCP ports on 127.0.0.1 (bound together, then released)."""
    socks = []
    try:
        for _ in range(n):
            s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
            s.bind(("127.0.0.1", 0))
            socks.append(s)
        return [s.getsockname()[1] for s in socks]
    finally:
        for s in socks:
            s.close()


def _openssl(*args, cwd):
    subprocess.run(["openssl", *args], cwd=cwd, check=True, capture_output=True, timeout=60)


def make_certs(d):
    """A CA, a server certificate for 127.0.0.1/localhost and a client
    certificate, as PEM files in d. Returns their paths."""
    with open(os.path.join(d, "san.cnf"), "w") as f:
        f.write("subjectAltName=IP:127.0.0.1,DNS:localhost\n"
                "extendedKeyUsage=serverAuth,clientAuth\n")
    _openssl("req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "2",
             "-subj", "/CN=ddplaunch test CA", "-keyout", "ca.key", "-out", "ca.pem", cwd=d)
    for name in ("server", "client"):
        _openssl("req", "-newkey", "rsa:2048", "-nodes", "-subj", f"/CN={name}",
                 "-keyout", f"{name}.key", "-out", f"{name}.csr", cwd=d)
        _openssl("x509", "-req", "-in", f"{name}.csr", "-CA", "ca.pem", "-CAkey", "ca.key",
                 "-CAcreateserial", "-days", "2", "-extfile", "san.cnf",
                 "-out", f"{name}.pem", cwd=d)
    return {k: os.path.join(d, v) for k, v in
            {"ca": "ca.pem", "cert": "client.pem", "key": "client.key",
             "server_cert": "server.pem", "server_key": "server.key"}.items()}


class EtcdCluster:
    def __init__(self, members=1, tls=False, extra_args=()):
        self.n = members
        self.tls = tls
        self.extra_args = list(extra_args)
        self.procs = []
        self.client_ports = []
        self.dir = None
        self.certs = None

    # ---- life cycle ----

    def __enter__(self):
        self.start()
        return self

    def __exit__(self, *exc):
        self.stop()
        return False

    def start(self):
        self.dir = tempfile.mkdtemp(prefix="etcd-test-")
        _live.add(self)
        if self.tls:
            self.certs = make_certs(self.dir)
        deadline = time.monotonic() + START_TIMEOUT_S
        for attempt in range(3):
            try:
                self._spawn(attempt)
                self._wait_healthy(deadline)
                return
            except _PortTaken:
                self._kill_all()
        raise RuntimeError("etcd: a chosen port was taken three times in a row")

    def _scheme(self):
        return "https" if self.tls else "http"

    def _spawn(self, attempt):
        ports = _free_ports(2 * self.n)
        self.client_ports = ports[:self.n]
        peer = ports[self.n:]
        s = self._scheme()
        cluster = ",".join(f"m{i}={s}://127.0.0.1:{peer[i]}" for i in range(self.n))
        token = f"ddp-{os.getpid()}-{id(self)}-{attempt}"
        self.procs = []
        for i in range(self.n):
            data = os.path.join(self.dir, f"m{i}.{attempt}")
            client_url = f"{s}://127.0.0.1:{self.client_ports[i]}"
            peer_url = f"{s}://127.0.0.1:{peer[i]}"
            args = [ETCD, "--name", f"m{i}", "--data-dir", data,
                    "--listen-client-urls", client_url, "--advertise-client-urls", client_url,
                    "--listen-peer-urls", peer_url, "--initial-advertise-peer-urls", peer_url,
                    "--initial-cluster", cluster, "--initial-cluster-state", "new",
                    "--initial-cluster-token", token] + self.extra_args
            if self.tls:
                c = self.certs
                args += ["--cert-file", c["server_cert"], "--key-file", c["server_key"],
                         "--trusted-ca-file", c["ca"], "--client-cert-auth",
                         "--peer-cert-file", c["server_cert"], "--peer-key-file",
                         c["server_key"], "--peer-trusted-ca-file", c["ca"],
                         "--peer-client-cert-auth"]
            log = open(os.path.join(self.dir, f"m{i}.{attempt}.log"), "w")
            self.procs.append(subprocess.Popen(args, stdout=log, stderr=subprocess.STDOUT,
                                               stdin=subprocess.DEVNULL))
            log.close()

    def log(self, i):
        logs = sorted(f for f in os.listdir(self.dir) if f.startswith(f"m{i}.") and
                      f.endswith(".log"))
        with open(os.path.join(self.dir, logs[-1])) as f:
            return f.read()

    def _wait_healthy(self, deadline):
        pending = set(range(self.n))
        delay = 0.02
        while pending:
            for i in list(pending):
                if self.procs[i].poll() is not None:
                    text = self.log(i)
                    if "address already in use" in text:
                        raise _PortTaken()
                    raise RuntimeError(f"etcd member m{i} exited with {self.procs[i].returncode}:"
                                       f"\n{text[-3000:]}")
                if self._healthy(i):
                    pending.discard(i)
            if not pending:
                return
            if time.monotonic() > deadline:
                raise RuntimeError(f"etcd members {sorted(pending)} not healthy within "
                                   f"{START_TIMEOUT_S} s:\n{self.log(min(pending))[-3000:]}")
            # A foreign daemon's readiness can only be asked; back off gently.
            time.sleep(delay)
            delay = min(delay * 2, 0.2)

    def _ssl_context(self):
        if not self.tls:
            return None
        ctx = ssl.create_default_context(cafile=self.certs["ca"])
        ctx.load_cert_chain(self.certs["cert"], self.certs["key"])
        return ctx

    def _url(self, i, path):
        return f"{self._scheme()}://127.0.0.1:{self.client_ports[i]}{path}"

    def _healthy(self, i):
        try:
            with urllib.request.urlopen(self._url(i, "/health"), timeout=1,
                                        context=self._ssl_context()) as r:
                return json.load(r).get("health") == "true"
        except (OSError, ValueError):
            return False

    def _kill_all(self):
        for p in self.procs:
            if p.poll() is None:
                p.kill()
            p.wait()

    def stop(self):
        """Kills every member still running and removes the data. SIGKILL, not
        SIGTERM: the data is thrown away, and the last members of a cluster
        spend seconds on a graceful stop trying to reach their gone peers.
        Safe to call more than once."""
        self._kill_all()
        self.procs = []
        _live.discard(self)
        if self.dir:
            shutil.rmtree(self.dir, ignore_errors=True)
            self.dir = None

    # ---- what tests use ----

    @property
    def endpoints(self):
        return ",".join(f"127.0.0.1:{p}" for p in self.client_ports)

    @property
    def pids(self):
        return [p.pid for p in self.procs]

    def kill(self, i):
        """SIGKILL member i and reap it."""
        self.procs[i].kill()
        self.procs[i].wait()

    def post(self, i, path, body, timeout=5):
        """One JSON gateway request to member i (for test set-up only)."""
        req = urllib.request.Request(self._url(i, path), data=json.dumps(body).encode(),
                                     headers={"Content-Type": "application/json"})
        with urllib.request.urlopen(req, timeout=timeout, context=self._ssl_context()) as r:
            return json.load(r)

    def leader(self):
        """Index of the member that is leader now (asked of member 0 onwards)."""
        ids = {}
        leader = None
        for i in range(self.n):
            if self.procs[i].poll() is not None:
                continue
            st = self.post(i, "/v3/maintenance/status", {})
            ids[st["header"]["member_id"]] = i
            leader = st.get("leader", leader)
        return ids[leader]

    def enable_auth(self, user, password):
        """Adds user with the root role and turns authentication on."""
        ep = [f"--endpoints={self._url(0, '')}"]
        if self.tls:
            c = self.certs
            ep += [f"--cacert={c['ca']}", f"--cert={c['cert']}", f"--key={c['key']}"]
        env = dict(os.environ, ETCDCTL_API="3")
        for cmd in (["user", "add", f"{user}:{password}"], ["user", "grant-role", user, "root"],
                    ["auth", "enable"]):
            subprocess.run([ETCDCTL, *ep, *cmd], check=True, capture_output=True, env=env,
                           timeout=30)


class _PortTaken(Exception):
    pass
