"""The etcd client (rendezvous/etcd/) against real etcd from Debian.

Starts etcd on loopback with etcd_cluster.py and runs test_etcd_live ($ETCD_LIVE,
the blocking API) and test_etcd_async ($ETCD_ASYNC, the client on a loop)
once per scenario: one member (plain, with authentication, with TLS), then
three-member clusters where the client's member is killed (a follower, then
the leader, then the last one; and the leader first) or frozen. Exits 77 (skip) only
when etcd cannot run on this machine at all.
"""
import os
import subprocess
import sys
import time

import etcd_cluster

LIVE = os.environ.get("ETCD_LIVE")
ASYNC = os.environ.get("ETCD_ASYNC")
SCENARIO_TIMEOUT_S = 120


def run(scenario, cluster, program=None, **extra):
    env = dict(os.environ, ETCD_ENDPOINTS=cluster.endpoints,
               ETCD_PIDS=",".join(str(p) for p in cluster.pids), **extra)
    t0 = time.monotonic()
    r = subprocess.run([program or LIVE, scenario], env=env, timeout=SCENARIO_TIMEOUT_S)
    print(f"== {scenario}: exit {r.returncode} after {time.monotonic() - t0:.1f} s", flush=True)
    return r.returncode == 0


def main():
    why = etcd_cluster.etcd_unavailable()
    if why:
        print(f"SKIP: etcd cannot run here: {why}")
        return 77
    if not LIVE or not ASYNC:
        print("set ETCD_LIVE and ETCD_ASYNC to test_etcd_live and test_etcd_async (meson does)")
        return 2
    ok = True
    with etcd_cluster.EtcdCluster(1) as c:
        ok &= run("basic", c)
        ok &= run("async", c, ASYNC)
    # Tokens that expire after 1 s: the client must renew its own.
    with etcd_cluster.EtcdCluster(1, extra_args=["--auth-token-ttl", "1"]) as c:
        c.enable_auth("root", "rootpw")
        ok &= run("auth", c, ETCD_USER="root", ETCD_PASSWORD="rootpw")
    with etcd_cluster.EtcdCluster(1, tls=True) as c:
        ok &= run("tls", c, ETCD_CA=c.certs["ca"], ETCD_CERT=c.certs["cert"],
                  ETCD_KEY=c.certs["key"])
    for scenario in ("kill-follower", "kill-leader", "freeze-follower"):
        with etcd_cluster.EtcdCluster(3) as c:
            ok &= run(scenario, c, ETCD_LEADER=str(c.leader()))
    with etcd_cluster.EtcdCluster(3) as c:
        ok &= run("async-kill", c, ASYNC, ETCD_LEADER=str(c.leader()))
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
