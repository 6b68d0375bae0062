"""Runs the real ddp-rdzvd on 127.0.0.1, port 0, for Python tests.

The daemon path comes from $DDP_RDZVD. Used as a context manager:
    with Rdzvd() as d: ... d.port ...
"""
import os
import signal
import subprocess
import tempfile
import time


class Rdzvd:
    def __init__(self, *args):
        self.args = list(args)
        self.proc = None
        self.port = None

    def __enter__(self):
        self.dir = tempfile.TemporaryDirectory(prefix="rdzvd-")
        port_file = os.path.join(self.dir.name, "port")
        self.log = open(os.path.join(self.dir.name, "log"), "w+")
        self.proc = subprocess.Popen(
            [os.environ["DDP_RDZVD"], "--port", "0", "--port-file", port_file] + self.args,
            stdout=subprocess.DEVNULL, stderr=self.log)
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError("ddp-rdzvd exited early: " + self.log_text())
            try:
                with open(port_file) as f:
                    self.port = int(f.read())
                return self
            except (FileNotFoundError, ValueError):
                time.sleep(0.005)
        raise RuntimeError("ddp-rdzvd wrote no port file within 10 s")

    def log_text(self):
        self.log.flush()
        self.log.seek(0)
        return self.log.read()

    def __exit__(self, *exc):
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                rc = self.proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
                raise RuntimeError("ddp-rdzvd did not exit on SIGTERM")
            if exc[0] is None and rc != 0:
                raise RuntimeError(f"ddp-rdzvd exited with {rc}: {self.log_text()}")
        self.log.close()
        self.dir.cleanup()
        return False
