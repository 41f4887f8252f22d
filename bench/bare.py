"""The floor: shells on PTYs held by the harness itself (no multiplexer)."""

from __future__ import annotations

import errno
import fcntl
import os
import re
import select
import struct
import subprocess
import termios
import time

from common import BIG, BenchError, Env, SMALL, gated, open_gate_writer, sum_pss, wait_cpu_settled


def spawn_on_pty(argv, env, cwd, size) -> tuple[subprocess.Popen, int]:
    """Starts argv as a session leader with a fresh PTY as its controlling terminal."""
    cols, rows = size
    master, slave = os.openpty()
    fcntl.ioctl(slave, termios.TIOCSWINSZ, struct.pack("HHHH", rows, cols, 0, 0))
    try:
        p = subprocess.Popen(
            argv, stdin=slave, stdout=slave, stderr=slave, env=env, cwd=cwd,
            start_new_session=True, close_fds=True,
            preexec_fn=lambda: fcntl.ioctl(0, termios.TIOCSCTTY, 0),
        )
    except BaseException:
        os.close(master)
        os.close(slave)
        raise
    os.close(slave)
    return p, master


def drain_until_eio(fd: int) -> int:
    n = 0
    while True:
        try:
            b = os.read(fd, 1 << 16)
        except OSError as e:
            if e.errno == errno.EIO:
                break
            raise
        if not b:
            break
        n += len(b)
    return n


class Bare:
    """The floor: this Python process reads the PTY master itself."""

    name = "bare"

    def __init__(self, env: Env):
        self.env = env
        self.rt_proc = None
        self.rt_fd = None

    def throughput(self, cmd: str) -> dict:
        fifo = self.env.fifo()
        p, master = spawn_on_pty(["sh", "-c", gated(cmd, fifo)], self.env.env,
                                 str(self.env.work), BIG)
        try:
            wfd = open_gate_writer(fifo)
            c0 = time.process_time()
            t0 = time.perf_counter()
            os.write(wfd, b"\n")
            os.close(wfd)
            nbytes = drain_until_eio(master)
            t1 = time.perf_counter()
            c1 = time.process_time()
            rc = p.wait(timeout=30)
        finally:
            os.close(master)
            if p.poll() is None:
                p.kill()
                p.wait()
            fifo.unlink(missing_ok=True)
        if rc != 0:
            raise BenchError(f"bare: `{cmd}` exited {rc}")
        return {"seconds": t1 - t0, "bytes": nbytes, "cpu_s": {"reader": c1 - c0}}

    # round trip: a persistent interactive bash on a PTY with a sentinel per op
    def rt_open(self):
        self.rt_proc, self.rt_fd = spawn_on_pty([self.env.bash, "-i"], self.env.env,
                                                str(self.env.work), BIG)
        # The shell reads input once this answers (the echoed input shows $((6*7)), not 42).
        os.write(self.rt_fd, b"echo __ready_$((6*7))\r")
        self._rt_read_until(re.compile(rb"__ready_42"), 30)

    def rt_pids(self) -> dict[str, list[int]]:
        return {"shell": [self.rt_proc.pid]}

    def _rt_read_until(self, pattern: re.Pattern, timeout: float) -> tuple[re.Match, bytes]:
        deadline = time.monotonic() + timeout
        buf = b""
        while True:
            m = pattern.search(buf)
            if m:
                return m, buf
            left = deadline - time.monotonic()
            if left <= 0:
                raise BenchError(f"bare: timed out waiting for {pattern.pattern!r}; "
                                 f"got {buf[-300:]!r}")
            r, _, _ = select.select([self.rt_fd], [], [], left)
            if r:
                try:
                    chunk = os.read(self.rt_fd, 1 << 16)
                except OSError as e:
                    raise BenchError(f"bare: shell went away ({e})")
                buf += chunk

    def rt_op(self, i: int) -> tuple[float, str | None]:
        line = f"echo hi; echo __D{i}_$?\r".encode()
        t0 = time.perf_counter()
        os.write(self.rt_fd, line)
        m, buf = self._rt_read_until(re.compile(rb"__D%d_(\d+)" % i), 30)
        t1 = time.perf_counter()
        err = None
        if m.group(1) != b"0":
            err = f"exit code {m.group(1)!r}"
        # A shell without a line editor (sh) may print its prompt late, in front of the line.
        elif not re.search(rb"(?:^|[\r\n])(?:[$#] )?hi\r?\n", buf[: m.start()]):
            err = f"no 'hi' line before the sentinel: {buf[-200:]!r}"
        return t1 - t0, err

    def rt_close(self):
        if self.rt_fd is not None:
            os.close(self.rt_fd)
            self.rt_fd = None
        if self.rt_proc is not None:
            try:
                self.rt_proc.wait(timeout=5)
            except subprocess.TimeoutExpired:
                self.rt_proc.kill()
                self.rt_proc.wait()
            self.rt_proc = None

    # memory: N idle bash, each on its own PTY held by this process
    def memory(self, ns: list[int]) -> dict:
        procs: list[tuple[subprocess.Popen, int]] = []
        out = {"per_n": {}}
        try:
            for n in ns:
                before = len(procs)
                t0 = time.perf_counter()
                while len(procs) < n:
                    procs.append(spawn_on_pty([self.env.bash, "-i"], self.env.env,
                                              str(self.env.work), SMALL))
                created_s = time.perf_counter() - t0
                pids = [p.pid for p, _ in procs]
                settle = wait_cpu_settled(lambda: pids)
                time.sleep(1.0)
                pss, rss, uss, found = sum_pss(pids)
                out["per_n"][n] = {
                    "n": n, "new": n - before, "found_shells": found, "create_s": created_s,
                    "shell_pss_kib": pss, "shell_rss_kib": rss, "shell_uss_kib": uss,
                    "server_pss_kib": 0, "holder_pss_kib": 0, "settle_s": settle,
                }
        finally:
            for p, fd in procs:
                try:
                    os.close(fd)
                except OSError:
                    pass
            for p, fd in procs:
                try:
                    p.wait(timeout=5)
                except subprocess.TimeoutExpired:
                    p.kill()
                    p.wait()
        return out
