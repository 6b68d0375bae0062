"""Runs the real ddp-rdzvd on 127.0.0.1, port 0, for Python tests.

The daemon path comes from $DDP_RDZVD. Used as a context manager:
    with Rdzvd() as d: ... d.port ...
"""
import os
import select
import signal
import subprocess
import tempfile


def read_announced_port(proc, timeout, why=lambda: ""):
    """The port ddp-rdzvd prints on its standard output (a pipe) once it
    listens: a blocking read of that one line, bounded by `timeout`."""
    ready, _, _ = select.select([proc.stdout], [], [], timeout)
    line = proc.stdout.readline() if ready else b""
    if not line.strip().isdigit():
        proc.kill()
        proc.wait()
        raise RuntimeError("ddp-rdzvd announced no port within %g s: %s" % (timeout, why()))
    return int(line)


class Rdzvd:
    def __init__(self, *args):
        self.args = list(args)
        self.proc = None
        self.port = None

    def __enter__(self):
        self.dir = tempfile.TemporaryDirectory(prefix="rdzvd-")
        self.log = open(os.path.join(self.dir.name, "log"), "w+")
        self.proc = subprocess.Popen(
            [os.environ["DDP_RDZVD"], "--port", "0"] + self.args,
            stdout=subprocess.PIPE, stderr=self.log)
        self.port = read_announced_port(self.proc, 10, self.log_text)
        return self

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
        self.proc.stdout.close()
        self.log.close()
        self.dir.cleanup()
        return False
