"""A slow rank costs its share, not the whole job (issue 26), against the
real binaries: ddp-train in shard mode on 2 simulated nodes x 1 rank (c10d,
node 0 hosting), steps of about 270 ms, node 1's worker capped at half a CPU
from outside mid-run (slowdown.Throttle: a cgroup CPU quota of 5 ms per
10 ms; SIGSTOP/SIGCONT where no cgroup can be made) and the cap lifted
later. The same job runs with and without --rebalance, and once in one
process for the reference bits.

  Straggler.test_named_moved_same_bits
      - both runs: every node's output names node 1's rank (host 127.0.0.3)
        as a compute straggler, "how much slower" about 2x, within 10 steps
        of the cap; rank 0's --metrics holds the same as a record;
      - with --rebalance: the plan moves shards off it (a "plan" record)
        and gives them back once the cap is lifted; step time under the cap
        recovers at least half of what the balanced plan could (the
        optimum for the per-shard times measured under the cap; the bench,
        tests/bench/straggler_bench.py, measures the figure: target 80%);
      - final.safetensors of both runs byte-identical to the one-process
        run's;
      - the launcher learns of it (the "straggler" line of the agent
        channel): every node's summary.json lists node 1's rank under
        "stragglers" (cause compute, about 2x, cleared after the cap is
        lifted in the rebalanced run), and while it is named every agent's
        /metrics (--metrics_port) shows ddp_stragglers_total{cause="compute"}
        1 and its ddp_straggler_slower_ratio.

  test_straggler.py Straggler
"""
import json
import os
import sys
import unittest
import urllib.request

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
sys.path.insert(0, os.path.join(HERE, "..", "worker", "train"))
import slowdown  # noqa: E402
import train_it  # noqa: E402
from mnlib import MultiNodeCase, addr, wait_for  # noqa: E402

STEPS, SLOW_AT, RELEASE_AT = 50, 8, 32
SETTLE = 14  # steps after the cap before the measured window (named, plan, dwell)


def scrape(target):
    """{series with its labels: value} of one agent's /metrics."""
    with urllib.request.urlopen("http://%s/metrics" % target, timeout=5) as r:
        text = r.read().decode()
    return {k: float(v) for k, v in (line.rsplit(" ", 1) for line in text.splitlines()
                                     if line and not line.startswith("#"))}


class Straggler(MultiNodeCase):
    def logs(self, tag, metrics=False):
        def args(i):
            return ["--log_dir=" + os.path.join(self.dir, "%s_logs%d" % (tag, i))] + (
                ["--metrics_port=%s:0" % addr(i)] if metrics else [])
        return args

    def summary(self, tag, i):
        found = [os.path.join(d, "summary.json")
                 for d, _, files in os.walk(os.path.join(self.dir, "%s_logs%d" % (tag, i)))
                 if "summary.json" in files]
        self.assertEqual(len(found), 1, found)
        with open(found[0]) as f:
            return json.load(f)

    def scraped(self, procs):
        """While node 1's rank is named: every agent's /metrics counts it."""
        targets = [p.wait_line(r"serving metrics at http://(\S+?)/metrics")[1].group(1)
                   for p in procs]
        self.metrics = []
        for i, t in enumerate(targets):
            def named(t=t, i=i):
                try:
                    m = scrape(t)
                except OSError as e:  # the job ended before any was counted
                    self.fail("node %d's /metrics never counted a straggler: %s" % (i, e))
                ratio = [k for k in m if k.startswith("ddp_straggler_slower_ratio{")]
                return m if m.get('ddp_stragglers_total{cause="compute"}') == 1 and ratio \
                    else None
            self.metrics.append(wait_for(named, 120, "node %d's /metrics naming a straggler" % i))

    def check_summary(self, tag, run, cleared):
        slow_rank = [r["rank"] for r in run["stragglers"] if r["host"] == addr(1)][0]
        for i in range(2):
            got = self.summary(tag, i)["stragglers"]
            mine = [g for g in got if g["rank"] == slow_rank]
            self.assertTrue(mine, "%s node %d: summary.json lists no straggler rank %d: %s" %
                            (tag, i, slow_rank, got))
            g = mine[0]
            self.assertEqual((g["node"], g["cause"]), (1, "compute"), g)
            self.assertGreater(g["slower"], 1.5, g)
            self.assertLessEqual(g["step"] - run["slowed_at"], 10, g)
            if cleared:
                self.assertIsNotNone(g["cleared_step"], g)
                self.assertGreater(g["cleared_step"], g["step"], g)
            # and ddplaunch's end output says it
            self.assertRegex(run["outputs"][i],
                             r"ddplaunch: stragglers: (.*; )?rank %d \(node 1, [\d.]+x, "
                             r"compute, steps %d to " % (slow_rank, g["step"]))
        return slow_rank

    def check_named(self, run, tag):
        host = addr(1)
        for i, text in enumerate(run["outputs"]):
            named = [m for m in slowdown.NAMED_RE.finditer(text) if m.group(4) == host]
            self.assertTrue(named, "%s node %d: no line names node 1's rank as a straggler:\n%s"
                            % (tag, i, text[-4000:]))
            m = named[0]
            self.assertEqual(m.group(6), "compute", m.group(0))
            self.assertEqual(m.group(3), "1", m.group(0))
            self.assertLessEqual(int(m.group(1)) - run["slowed_at"], 10,
                                 "%s: named at step %s, the cap came after step %d" %
                                 (tag, m.group(1), run["slowed_at"]))
            self.assertGreater(float(m.group(5)), 1.5, m.group(0))
        recs = [r for r in run["stragglers"] if r["host"] == host and r["state"] == "named"]
        self.assertTrue(recs, "%s: no straggler record in --metrics: %s" %
                        (tag, run["stragglers"]))
        self.assertEqual(recs[0]["cause"], "compute")

    def test_named_moved_same_bits(self):
        ref = slowdown.reference(self, STEPS)
        on = slowdown.run_job(self, "on", 2, STEPS, SLOW_AT, 1, RELEASE_AT,
                              launcher=self.logs("on", metrics=True), during=self.scraped)
        off = slowdown.run_job(self, "off", 2, STEPS, SLOW_AT, 1, RELEASE_AT, rebalance=False,
                               launcher=self.logs("off"))
        print("throttle: %s" % on["throttle"])
        for run, tag in ((on, "rebalance"), (off, "no rebalance")):
            self.check_named(run, tag)
            self.assertEqual(train_it.sha256(run["final"]), train_it.sha256(ref),
                             "%s: the final weights differ from the one-process run's" % tag)
        # The launcher heard of it: summary.json, /metrics while named.
        slow_rank = self.check_summary("on", on, cleared=True)
        self.check_summary("off", off, cleared=False)
        for m in self.metrics:
            self.assertEqual(m.get('ddp_stragglers_total{cause="link"}'), 0, m)
            self.assertGreater(m.get('ddp_straggler_slower_ratio{rank="%d"}' % slow_rank, 0),
                               1.5, m)
        # Moved off node 1's rank, then given back.
        self.assertFalse(off["plans"], off["plans"])
        slow_rank = [r["rank"] for r in on["stragglers"] if r["host"] == addr(1)][0]
        moved = [p for p in on["plans"] if p["shards"][slow_rank] < slowdown.SHARDS // 2]
        self.assertTrue(moved, "no plan moved shards off rank %d: %s" % (slow_rank, on["plans"]))
        back = [p for p in on["plans"] if p["step"] > on["released_at"]]
        self.assertTrue(back and back[-1]["shards"] == [slowdown.SHARDS // 2] * 2,
                        "the share did not come back after the cap was lifted: %s" % on["plans"])
        # Throughput under the cap.
        lo = max(on["slowed_at"], off["slowed_at"]) + SETTLE
        hi = min(on["released_at"], off["released_at"])
        healthy = slowdown.step_time(off["times"], 1, off["slowed_at"])
        t_off = slowdown.step_time(off["times"], lo, hi)
        t_on = slowdown.step_time(on["times"], lo, hi)
        slower = t_off / healthy  # two ranks: the job runs at the slow rank's pace
        # the balanced step for the speeds under the cap: the first plan's
        # predicted compute against the even plan's (tests/bench/straggler_bench.py)
        optimum = t_off * moved[0]["predicted_s"] / moved[0]["was_s"]
        recovered = (t_off - t_on) / (t_off - optimum) if t_off > optimum else 0.0
        print("steps %d-%d: healthy %.0f ms, capped %.0f ms without rebalancing, %.0f ms with, "
              "balanced plan %.0f ms: %.0f%% of the recoverable loss recovered" %
              (lo, hi, healthy * 1e3, t_off * 1e3, t_on * 1e3, optimum * 1e3, recovered * 100))
        self.assertGreater(slower, 1.3, "the cap did not slow the job")
        self.assertGreaterEqual(recovered, 0.5)


if __name__ == "__main__":
    unittest.main(argv=[sys.argv[0]] + sys.argv[1:], verbosity=2)
