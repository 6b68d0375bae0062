"""Network namespaces as separate hosts, made and removed by the test itself.

Each node gets a namespace of its own (its own loopback, so 127.0.0.1 of one
node is not another's) with one veth to a bridge in a switch namespace; the
addresses are 10.A.B.1, 10.A.B.2, ... (A.B chosen per test). Every packet to
a namespace address is sent from inside a namespace: the test's host
namespace only configures devices (ip -n NS ...) and starts programs in a
namespace (ip netns exec NS ...). A partition detaches a node's port from
the bridge: its packets are dropped silently, as on a cut cable, with no
error for either side.
"""
import os
import random
import subprocess


def available():
    """None when namespaces can be made here, else why not."""
    if os.geteuid() != 0:
        return "network namespaces need root"
    name = "ddpmnprobe%d" % os.getpid()
    r = subprocess.run(["ip", "netns", "add", name], capture_output=True, text=True)
    if r.returncode != 0:
        return "cannot create a network namespace: " + r.stderr.strip()
    subprocess.run(["ip", "netns", "del", name], capture_output=True)
    return None


def ip(*args):
    subprocess.run(["ip"] + list(args), check=True, capture_output=True, text=True)


class Hosts:
    def __init__(self, n):
        tag = "%d%d" % (os.getpid() % 100000, random.randrange(1000))
        self.names = ["ddpmn%s_%d" % (tag, i) for i in range(n)]
        self.switch = "ddpmn%s_sw" % tag
        self.net = "10.%d.%d" % (random.randrange(16, 250), random.randrange(1, 250))
        self.made = []
        try:
            self._make(n)
        except Exception:
            self.close()
            raise

    def _make(self, n):
        for ns in [self.switch] + self.names:
            ip("netns", "add", ns)
            self.made.append(ns)
            ip("-n", ns, "link", "set", "lo", "up")
        ip("-n", self.switch, "link", "add", "br0", "type", "bridge")
        ip("-n", self.switch, "link", "set", "br0", "up")
        for i, ns in enumerate(self.names):
            ip("link", "add", "v%d" % i, "netns", ns, "type", "veth", "peer", "name",
               "p%d" % i, "netns", self.switch)
            ip("-n", ns, "addr", "add", "%s/24" % self.addr(i), "dev", "v%d" % i)
            ip("-n", ns, "link", "set", "v%d" % i, "up")
            ip("-n", self.switch, "link", "set", "p%d" % i, "master", "br0")
            ip("-n", self.switch, "link", "set", "p%d" % i, "up")

    def addr(self, i):
        return "%s.%d" % (self.net, i + 1)

    def wrap(self, i, argv):
        """argv run inside node i's namespace."""
        return ["ip", "netns", "exec", self.names[i]] + list(argv)

    def partition(self, i):
        """Cuts node i off: its packets go nowhere, silently."""
        ip("-n", self.switch, "link", "set", "p%d" % i, "nomaster")

    def close(self):
        for ns in reversed(self.made):
            subprocess.run(["ip", "netns", "del", ns], capture_output=True)
        self.made = []
