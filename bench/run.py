#!/usr/bin/env python3
"""ptyhub benchmark harness: ptyhub, a bare PTY reader and tmux, side by side in one run.

Usage: python3 bench/run.py [--quick] [--ptyhub PATH] [options]   (see bench/README.md)

Workloads (each system measured in every round, the order of systems rotating per round):
  throughput  `seq 1 3000000` and `cat` of a generated 100 MB ANSI/UTF-8 file
  roundtrip   `echo hi` plus its exit code, one op after another, p50/p99
  memory      PSS of N idle terminals (holders, shells, server deltas)
  fanout      `cat` of a 10 MB mixed file with 0 … 100 watchers (ptyhub) / attach -r clients (tmux)
  replay      a watcher's 10 MiB restore (JSON and binary) until `terminal_restored`

Writes bench/results/<UTC timestamp>.md and .json and prints the Markdown.
Python 3 standard library only (bench/live_client.py is the WebSocket client); tmux must be on
PATH.
"""

from __future__ import annotations

import argparse
import errno
import fcntl
import glob
import hashlib
import http.client
import json
import math
import os
import platform
import random
import re
import resource
import select
import shlex
import shutil
import signal
import socket
import statistics
import struct
import subprocess
import sys
import tempfile
import termios
import threading
import time
import urllib.parse
from datetime import datetime, timezone
from pathlib import Path

import live_client  # bench/live_client.py: the WebSocket client and the watcher process

HERE = Path(__file__).resolve().parent
REPO = HERE.parent

SYSTEMS = ("bare", "tmux", "ptyhub")
CLK_TCK = os.sysconf("SC_CLK_TCK")
WORKLOADS = ("throughput", "roundtrip", "memory", "fanout", "replay")

# Terminal sizes: 200x50 for throughput and round trip, 80x24 for idle terminals (memory).
BIG = (200, 50)
SMALL = (80, 24)


# --------------------------------------------------------------------------------------------
# small helpers
# --------------------------------------------------------------------------------------------

def log(msg: str) -> None:
    print(f"[bench {time.strftime('%H:%M:%S')}] {msg}", file=sys.stderr, flush=True)


class BenchError(Exception):
    pass


SCRUB: list[tuple[str, str]] = []  # (absolute prefix, placeholder), longest first


def add_scrub(path: str | Path, placeholder: str) -> None:
    p = str(path)
    if p and p != "/":
        SCRUB.append((p, placeholder))
        SCRUB.sort(key=lambda kv: -len(kv[0]))


def scrub(value):
    """Replaces this machine's absolute paths (temp dirs, repo, binary, home) in report values."""
    if isinstance(value, str):
        for prefix, placeholder in SCRUB:
            value = value.replace(prefix, placeholder)
        return value
    if isinstance(value, list):
        return [scrub(v) for v in value]
    if isinstance(value, tuple):
        return [scrub(v) for v in value]
    if isinstance(value, dict):
        return {k: scrub(v) for k, v in value.items()}
    return value


def median(xs):
    xs = [x for x in xs if x is not None]
    return statistics.median(xs) if xs else None


def percentile(xs, q):
    """Nearest-rank percentile (q in 0..100)."""
    xs = sorted(x for x in xs if x is not None)
    if not xs:
        return None
    k = max(1, math.ceil(q / 100.0 * len(xs)))
    return xs[k - 1]


def ratio(a, b):
    if a is None or b is None or b == 0:
        return None
    return a / b


def fmt(x, digits=3, unit=""):
    if x is None:
        return "n/a"
    if isinstance(x, float):
        if abs(x) >= 100:
            s = f"{x:.0f}"
        elif abs(x) >= 10:
            s = f"{x:.1f}"
        else:
            s = f"{x:.{digits}g}" if abs(x) < 1 else f"{x:.{digits - 1}f}"
    else:
        s = str(x)
    return s + unit


def fmt_ratio(x):
    return "n/a" if x is None else f"{x:.2f}x"


def short_error(e: BaseException) -> str:
    s = f"{type(e).__name__}: {e}"
    return s if len(s) < 600 else s[:600] + "..."


def proc_alive(pid: int | None) -> bool:
    if not pid:
        return False
    try:
        with open(f"/proc/{pid}/stat") as f:
            state = f.read().rsplit(")", 1)[1].split()[0]
        return state != "Z"
    except (FileNotFoundError, ProcessLookupError, IndexError):
        return False


def proc_cmdline(pid: int) -> list[str]:
    try:
        with open(f"/proc/{pid}/cmdline", "rb") as f:
            return [a.decode(errors="replace") for a in f.read().split(b"\0") if a]
    except OSError:
        return []


def read_pss(pid: int) -> tuple[int, int, int] | None:
    """(Pss, Rss, Uss = Private_Clean + Private_Dirty) in KiB from /proc/PID/smaps_rollup,
    or None if the process is gone."""
    try:
        vals = {}
        with open(f"/proc/{pid}/smaps_rollup") as f:
            for line in f:
                key = line.split(":", 1)[0]
                if key in ("Pss", "Rss", "Private_Clean", "Private_Dirty"):
                    vals[key] = int(line.split()[1])
        if "Pss" not in vals:
            return None
        return (vals["Pss"], vals.get("Rss", 0),
                vals.get("Private_Clean", 0) + vals.get("Private_Dirty", 0))
    except (FileNotFoundError, ProcessLookupError, PermissionError):
        return None


def sum_pss(pids) -> tuple[int, int, int, int]:
    """(Pss, Rss, Uss KiB, processes found) summed over pids."""
    pss = rss = uss = found = 0
    for pid in pids:
        r = read_pss(pid)
        if r:
            pss += r[0]
            rss += r[1]
            uss += r[2]
            found += 1
    return pss, rss, uss, found


def cpu_ticks(pids, children: bool = False) -> int:
    """utime + stime of the processes (with children: plus the CPU of children they reaped)."""
    total = 0
    for pid in pids:
        if not pid:
            continue
        try:
            with open(f"/proc/{pid}/stat") as f:
                fields = f.read().rsplit(")", 1)[1].split()
            total += int(fields[11]) + int(fields[12])  # utime, stime
            if children:
                total += int(fields[13]) + int(fields[14])  # cutime, cstime
        except (OSError, IndexError, ValueError):
            pass
    return total


def machine_ticks() -> tuple[int, int]:
    """(busy, all) CPU ticks of the whole machine from /proc/stat (busy = all but idle and
    iowait), to see how much CPU the rest of a shared machine took during a run."""
    with open("/proc/stat") as f:
        vals = [int(x) for x in f.readline().split()[1:]]
    total = sum(vals[:8])  # user nice system idle iowait irq softirq steal (guest is in user)
    return total - vals[3] - vals[4], total


def wait_cpu_settled(pids_fn, quiet_ticks=2, interval=0.5, max_wait=60.0) -> float:
    """Waits until the processes used at most quiet_ticks CPU ticks over interval; returns s."""
    start = time.monotonic()
    prev = cpu_ticks(pids_fn())
    while time.monotonic() - start < max_wait:
        time.sleep(interval)
        cur = cpu_ticks(pids_fn())
        if cur - prev <= quiet_ticks:
            break
        prev = cur
    return time.monotonic() - start


def kill_pid(pid: int, sig=signal.SIGKILL) -> None:
    try:
        os.kill(pid, sig)
    except (ProcessLookupError, PermissionError):
        pass


# --------------------------------------------------------------------------------------------
# environment: temp dirs, the shell environment shared by every system, cleanup
# --------------------------------------------------------------------------------------------

class Env:
    """Private temp dirs and the environment every system's shells get.

    Every shell (ptyhub's, tmux's, the bare one) is an interactive non-login bash with
    HOME pointing to an empty temp home, so no user rc file (pyenv hooks and the like)
    makes one system's prompt slower than another's; bash still reads /etc/bash.bashrc.
    """

    def __init__(self, keep: bool):
        self.keep = keep
        self.root = Path(tempfile.mkdtemp(prefix="ptyhub-bench-"))
        # Short, private runtime dir (unix socket paths are limited to 108 bytes).
        self.runtime = Path(tempfile.mkdtemp(prefix="phb-"))
        os.chmod(self.runtime, 0o700)
        self.home = self.root / "home"
        self.home.mkdir()
        (self.home / ".bashrc").write_text("# empty: benchmark shells run without user rc\n")
        self.work = self.root / "work"
        self.work.mkdir()
        self.data = self.root / "data"
        self.data.mkdir()
        add_scrub(self.root, "$BENCH_TMP")
        add_scrub(self.runtime, "$BENCH_RUNTIME")
        self.bash = shutil.which("bash") or "/bin/bash"
        env = dict(os.environ)
        for k in ("TMUX", "TMUX_PANE", "PROMPT_COMMAND", "PS1", "PS0", "ENV", "BASH_ENV",
                  "ZDOTDIR", "HISTFILE"):
            env.pop(k, None)
        env.update({
            "HOME": str(self.home),
            "XDG_RUNTIME_DIR": str(self.runtime),
            "SHELL": self.bash,
            "TERM": "xterm-256color",
            "LANG": env.get("LANG") or "C.UTF-8",
        })
        if "UTF-8" not in (env.get("LC_ALL") or env["LANG"]).upper().replace("UTF8", "UTF-8"):
            env["LC_ALL"] = "C.UTF-8"
        self.env = env
        self._cleanups: list[tuple[str, object]] = []
        self._seq = 0

    def name(self, prefix: str) -> str:
        self._seq += 1
        return f"{prefix}{self._seq}"

    def fifo(self) -> Path:
        p = self.root / self.name("gate-")
        os.mkfifo(p, 0o600)
        return p

    def on_cleanup(self, label: str, fn) -> None:
        self._cleanups.append((label, fn))

    def cleanup(self) -> None:
        while self._cleanups:
            label, fn = self._cleanups.pop()
            try:
                fn()
            except Exception as e:  # cleanup must go on
                log(f"cleanup {label}: {short_error(e)}")
        if not self.keep:
            shutil.rmtree(self.root, ignore_errors=True)
            shutil.rmtree(self.runtime, ignore_errors=True)
        else:
            log(f"kept temp dirs {self.root} {self.runtime}")


def open_gate_writer(fifo: Path, timeout: float = 30.0) -> int:
    """Opens a FIFO for writing once its reader is there (without blocking forever)."""
    deadline = time.monotonic() + timeout
    while True:
        try:
            fd = os.open(fifo, os.O_WRONLY | os.O_NONBLOCK)
            fcntl.fcntl(fd, fcntl.F_SETFL, fcntl.fcntl(fd, fcntl.F_GETFL) & ~os.O_NONBLOCK)
            return fd
        except OSError as e:
            if e.errno != errno.ENXIO:
                raise
        if time.monotonic() > deadline:
            raise BenchError(f"nobody opened the gate {fifo.name} within {timeout}s")
        time.sleep(0.001)


def gated(cmd: str, fifo: Path) -> str:
    """sh script that waits for one line on the gate FIFO, then runs cmd."""
    return f"read _ < {shlex.quote(str(fifo))}; {cmd}"


# --------------------------------------------------------------------------------------------
# the generated 100 MB ANSI / UTF-8 file
# --------------------------------------------------------------------------------------------

WORDS = ("alpha beta gamma delta epsilon zeta theta kappa lambda sigma omega build test "
         "compile link error warning info debug trace request response server client "
         "session terminal buffer render cursor scroll window pane process signal").split()
UTF8 = ["café", "naïve", "Ærøskøbing", "señor", "Straße", "über", "façade", "déjà vu",
        "e\u0301", "a\u0308\u0323", "漢字", "日本語のテキスト", "한국어", "中文字符测试",
        "全角ＡＢＣ", "🚀", "✨", "👍🏽", "🇫🇷", "👩‍💻", "ﬁ", "Ω≈ç√∫", "→⇒∀∃", "█▓▒░"]
LEVELS = ["\x1b[32mINFO\x1b[0m", "\x1b[33mWARN\x1b[0m", "\x1b[31mERROR\x1b[0m", "DEBUG"]


def _sgr(rng: random.Random) -> str:
    k = rng.random()
    if k < 0.4:
        return f"\x1b[{rng.choice([31, 32, 33, 34, 35, 36, 37, 90, 91, 92, 93, 94, 95, 96])}m"
    if k < 0.6:
        return f"\x1b[1;{rng.randint(30, 37)}m"
    if k < 0.8:
        return f"\x1b[38;5;{rng.randint(0, 255)}m"
    if k < 0.9:
        return f"\x1b[38;2;{rng.randint(0, 255)};{rng.randint(0, 255)};{rng.randint(0, 255)}m"
    return f"\x1b[4;48;5;{rng.randint(0, 255)}m"


def _mixed_chunk(seed: int, size: int) -> bytes:
    rng = random.Random(seed)
    out: list[str] = []
    total = 0
    n = 0
    while total < size:
        n += 1
        k = rng.random()
        if k < 0.40:  # coloured word line
            parts = []
            for _ in range(rng.randint(6, 18)):
                w = rng.choice(WORDS)
                parts.append(f"{_sgr(rng)}{w}\x1b[0m" if rng.random() < 0.6 else w)
            line = " ".join(parts)
        elif k < 0.55:  # long line that wraps several times at 200 columns
            line = " ".join(rng.choice(WORDS) for _ in range(rng.randint(60, 220)))
            if rng.random() < 0.5:
                line = f"{_sgr(rng)}{line}\x1b[0m"
        elif k < 0.70:  # carriage-return progress line
            step = rng.choice([5, 10, 20, 25])
            width = 40
            frames = []
            for p in range(0, 101, step):
                bar = "#" * (p * width // 100)
                frames.append(f"\r\x1b[32m[{bar:<{width}}]\x1b[0m {p:3d}% file-{n}.tar")
            line = "".join(frames)
        elif k < 0.85:  # UTF-8: accents, combining marks, CJK (wide), emoji
            parts = [rng.choice(UTF8) if rng.random() < 0.6 else rng.choice(WORDS)
                     for _ in range(rng.randint(5, 25))]
            line = " ".join(parts)
            if rng.random() < 0.3:
                line = f"{_sgr(rng)}{line}\x1b[0m"
        else:  # log line
            level = rng.choice(LEVELS)
            words = " ".join(rng.choice(WORDS) for _ in range(rng.randint(3, 12)))
            line = (f"2024-06-{rng.randint(1, 28):02d}T{rng.randint(0, 23):02d}:"
                    f"{rng.randint(0, 59):02d}:{rng.randint(0, 59):02d}Z {level} "
                    f"{rng.choice(WORDS)}::{rng.choice(WORDS)} id={rng.randint(0, 10**9)} "
                    f"{words}")
        s = line + "\n"
        out.append(s)
        total += len(s.encode())
    return "".join(out).encode()


def generate_mixed_file(path: Path, size: int) -> dict:
    """Deterministic: eight 1 MB chunks (seeded), written in a fixed pattern up to size."""
    t0 = time.monotonic()
    chunks = [_mixed_chunk(1000 + i, 1 << 20) for i in range(8)]
    h = hashlib.sha256()
    written = 0
    i = 0
    with open(path, "wb") as f:
        while written < size:
            c = chunks[(i * 5 + i // 8) % 8]
            i += 1
            if written + len(c) > size:
                cut = c.rfind(b"\n", 0, max(1, size - written))
                c = c[: cut + 1] if cut >= 0 else b""
                if not c:
                    break
            f.write(c)
            h.update(c)
            written += len(c)
        tail = b"\x1b[0m\n"
        f.write(tail)
        h.update(tail)
        written += len(tail)
    text = b"".join(chunks)
    return {
        "bytes": written,
        "sha256": h.hexdigest(),
        "generated_in_s": round(time.monotonic() - t0, 2),
        "esc_per_mb_sample": round(text.count(b"\x1b") / (len(text) / 1e6)),
        "cr_per_mb_sample": round(text.count(b"\r") / (len(text) / 1e6)),
    }


# --------------------------------------------------------------------------------------------
# bare PTY
# --------------------------------------------------------------------------------------------

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
        elif not re.search(rb"(?:^|[\r\n])hi\r?\n", buf[: m.start()]):
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


# --------------------------------------------------------------------------------------------
# live fan-out: the watcher process and its checks
# --------------------------------------------------------------------------------------------

# The producer ends with this line; the echoed command shows `$((6*7))`, so only the command's
# output can contain the marker.
FANOUT_MARKER = "__FANOUT_END_42__"
FANOUT_END_CMD = "echo __FANOUT_END_$((6*7))__"
F_SETPIPE_SZ = getattr(fcntl, "F_SETPIPE_SZ", 1031)


class Watchers:
    """One `bench/live_client.py drain` process reading every watcher's stream, plus the client
    processes whose output it reads (`ptyhub terminal watch`, `tmux attach -r`), if any.

    The harness hands over the read ends (pipes, PTY masters) and keeps none; `close()` stops
    the clients and the drainer."""

    def __init__(self, env: Env, config: dict, fds=(), clients=()):
        self.clients = list(clients)
        self.fds = list(fds)
        self.err_path = env.root / f"{env.name('drain-')}.log"
        self.proc = None
        try:
            with open(self.err_path, "wb") as err:
                self.proc = subprocess.Popen(
                    [sys.executable, str(HERE / "live_client.py"), "drain",
                     json.dumps(dict(config, fds=self.fds))],
                    stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=err,
                    pass_fds=self.fds, start_new_session=True)
        except BaseException:
            self.close()
            raise
        finally:
            for fd in self.fds:
                os.close(fd)
            self.fds = []

    def pids(self) -> list[int]:
        return [self.proc.pid] + [p.pid for p in self.clients]

    def err_tail(self) -> str:
        try:
            return self.err_path.read_text(errors="replace")[-600:]
        except OSError:
            return ""

    def _line(self, timeout: float, what: str) -> dict:
        r, _, _ = select.select([self.proc.stdout], [], [], timeout)
        if not r:
            raise BenchError(f"watchers: no {what} line within {timeout:.0f}s; {self.err_tail()}")
        line = self.proc.stdout.readline()
        if not line:
            raise BenchError(f"watcher process ended (rc {self.proc.poll()}) before its {what} "
                             f"line: {self.err_tail()}")
        return json.loads(line)

    def wait_ready(self, timeout: float = 60) -> dict:
        doc = self._line(timeout + 30, "ready")
        if doc.get("not_ready"):
            raise BenchError(f"watchers not live after {timeout}s: {len(doc['not_ready'])} of "
                             f"{doc['streams']} (first {doc['not_ready'][:5]})")
        return doc

    def finish(self, timeout: float = 120) -> dict:
        self.proc.stdin.write(f"finish {timeout}\n".encode())
        self.proc.stdin.flush()
        return self._line(timeout + 30, "report")

    def close(self):
        for p in self.clients:
            if p.poll() is None:
                kill_pid(p.pid, signal.SIGTERM)
        deadline = time.monotonic() + 5
        for p in self.clients:
            try:
                p.wait(timeout=max(0.05, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                p.kill()
                p.wait()
        if self.proc is not None:
            if self.proc.poll() is None:
                self.proc.kill()
            self.proc.wait()
            for f in (self.proc.stdin, self.proc.stdout):
                try:
                    f.close()
                except (OSError, ValueError):
                    pass
        for fd in self.fds:
            os.close(fd)
        self.fds = []


def check_streams(report: dict, t0: float, expect_min: int | None, same_bytes: bool) -> dict:
    """Checks that every watcher got the whole output; raises BenchError otherwise.

    Every stream must show the end marker, with no error frame; with `same_bytes` (ptyhub:
    every watcher connected before the producer started, so each gets the same bytes) the
    byte counts up to the end of the marker must be equal and at least `expect_min` (the
    producer's output after `onlcr`). What follows the marker (the next prompt) may still be
    on its way when the report is made, so it is not compared."""
    streams = report["streams"]
    missing = [s["index"] for s in streams if s["marker_at"] is None]
    errors = [(s["index"], s["errors"]) for s in streams if s["errors"]]
    counts = [s["bytes_to_marker"] if s["bytes_to_marker"] is not None else s["bytes"]
              for s in streams]
    problems = []
    if missing:
        problems.append(f"{len(missing)} of {len(streams)} watchers never got the end marker "
                        f"(first {missing[:5]}, ended: "
                        f"{[streams[i]['ended'] for i in missing[:5]]})")
    if errors:
        problems.append(f"error frames: {errors[:3]}")
    if same_bytes and counts and min(counts) != max(counts):
        problems.append(f"watchers got different byte counts ({min(counts)} … {max(counts)})")
    if expect_min is not None and counts and min(counts) < expect_min:
        problems.append(f"a watcher got {min(counts)} bytes, less than the producer's "
                        f"{expect_min}")
    if problems:
        raise BenchError("invalid run: " + "; ".join(problems))
    lagged = [s["lagged"] for s in streams]
    return {
        "last_watcher_s": max(s["marker_at"] for s in streams) - t0,
        "first_watcher_s": min(s["marker_at"] for s in streams) - t0,
        "watcher_bytes": [min(counts), max(counts)],
        "lagged_frames": sum(lagged),
        "lagged_watchers": sum(1 for x in lagged if x),
        "frames_per_watcher": statistics.median(s["frames"] for s in streams),
        "drain_cpu_s": report.get("cpu_s"),
    }


def check_kept(paths, expected: bytes) -> None:
    """The streams kept whole must hold the producer's output contiguously."""
    for p in paths:
        data = Path(p).read_bytes()
        Path(p).unlink(missing_ok=True)
        if expected not in data:
            raise BenchError(f"invalid run: a kept watcher stream ({len(data)} bytes) does not "
                             f"hold the producer's {len(expected)} bytes contiguously")


# --------------------------------------------------------------------------------------------
# tmux
# --------------------------------------------------------------------------------------------

class Tmux:
    """One private tmux server (`-S sock -f /dev/null`, default options but remain-on-exit)."""

    name = "tmux"

    def __init__(self, env: Env, label: str = "tmux"):
        self.env = env
        self.sock = str(env.runtime / env.name("t"))
        self.server_pid = None
        self.ctl = None
        self._start()
        env.on_cleanup(f"{label} server", self.kill_server)

    def cmd(self, *args, check=True, timeout=60) -> str:
        r = subprocess.run(["tmux", "-S", self.sock, *args], env=self.env.env,
                           stdin=subprocess.DEVNULL, capture_output=True, timeout=timeout)
        if check and r.returncode != 0:
            raise BenchError(f"tmux {' '.join(args)}: rc={r.returncode} "
                             f"{r.stderr.decode(errors='replace').strip()}")
        return r.stdout.decode(errors="replace")

    def _start(self):
        # A session that does nothing keeps the server alive between measured sessions.
        self.cmd("-f", "/dev/null", "new-session", "-d", "-s", "keep", "-x", "80", "-y", "24",
                 "--", "cat")
        self.cmd("set-option", "-g", "remain-on-exit", "on")
        self.server_pid = int(self.cmd("display-message", "-p", "-t", "keep", "#{pid}").strip())

    def kill_server(self):
        if self.ctl is not None:
            self.rt_close()
        self.cmd("kill-server", check=False, timeout=30)
        if proc_alive(self.server_pid):
            time.sleep(0.5)
            if proc_alive(self.server_pid):
                kill_pid(self.server_pid)

    def new_session(self, name: str, size, argv) -> None:
        self.cmd("new-session", "-d", "-s", name, "-x", str(size[0]), "-y", str(size[1]),
                 "-c", str(self.env.work), "--", *argv)

    def throughput(self, cmd: str) -> dict:
        fifo = self.env.fifo()
        s = self.env.name("tp")
        chan = f"done_{s}"
        self.new_session(s, BIG, ["sh", "-c", gated(cmd, fifo)])
        try:
            # The hook runs inside the server when the pane has died (all output read);
            # `wait-for` blocks on it without any polling.
            self.cmd("set-hook", "-t", s, "pane-died", f"wait-for -S {chan}")
            waiter = subprocess.Popen(["tmux", "-S", self.sock, "wait-for", chan],
                                      env=self.env.env, stdin=subprocess.DEVNULL)
            time.sleep(0.05)  # let the waiter connect (the channel also latches a signal)
            wfd = open_gate_writer(fifo)
            c0 = cpu_ticks([self.server_pid])
            t0 = time.perf_counter()
            os.write(wfd, b"\n")
            os.close(wfd)
            try:
                waiter.wait(timeout=120)
            except subprocess.TimeoutExpired:
                waiter.kill()
                raise BenchError("tmux: pane did not die within 120 s (a lost pane-died hook; seen once)")
            t1 = time.perf_counter()
            c1 = cpu_ticks([self.server_pid])
            state = self.cmd("display-message", "-p", "-t", s,
                             "#{pane_dead} #{pane_dead_status}").split()
            if state != ["1", "0"]:
                raise BenchError(f"tmux: pane state after run {state} (want dead, status 0)")
            return {"seconds": t1 - t0, "cpu_s": {"server": (c1 - c0) / CLK_TCK}}
        finally:
            self.cmd("kill-session", "-t", s, check=False)
            fifo.unlink(missing_ok=True)

    # ---- live fan-out: the producer with W `tmux attach -r` clients, each on its own PTY
    def fanout(self, w: int, cmd: str) -> dict:
        fifo = self.env.fifo()
        s = self.env.name("fo")
        chan = f"done_{s}"
        status = self.env.root / f"{s}.status"
        # The producer signals its own end and the pane stays alive: a pane that dies while
        # tmux is behind loses the output it has not read yet (seen with 10 clients: the
        # pane-died hook fired, the marker never reached the screen).
        script = (f"{cmd}; echo $? > {shlex.quote(str(status))}; "
                  f"tmux -S {shlex.quote(self.sock)} wait-for -S {chan}; exec sleep 86400")
        self.new_session(s, BIG, ["sh", "-c", gated(script, fifo)])
        watchers = None
        waiter = None
        try:
            if w:
                procs, fds = [], []
                try:
                    for _ in range(w):
                        # One more row than the pane: the client's status line.
                        p, master = spawn_on_pty(
                            ["tmux", "-S", self.sock, "attach-session", "-r", "-t", s],
                            self.env.env, str(self.env.work), (BIG[0], BIG[1] + 1))
                        procs.append(p)
                        fds.append(master)
                except BaseException:
                    for fd in fds:
                        os.close(fd)
                    for p in procs:
                        p.kill()
                        p.wait()
                    raise
                watchers = Watchers(self.env, {"kind": "fds", "marker": FANOUT_MARKER},
                                    fds=fds, clients=procs)
                watchers.wait_ready()
                deadline = time.monotonic() + 30
                while True:
                    n = len(self.cmd("list-clients", "-t", s, "-F", "#{client_pid}").split())
                    if n == w:
                        break
                    if time.monotonic() > deadline:
                        raise BenchError(f"tmux: {n} of {w} clients attached after 30 s")
                    time.sleep(0.05)
            size = self.cmd("display-message", "-p", "-t", s,
                            "#{pane_width}x#{pane_height}").strip()
            pids = {"server": [self.server_pid]}
            if watchers:
                pids["watchers"] = watchers.pids()
            waiter = subprocess.Popen(["tmux", "-S", self.sock, "wait-for", chan],
                                      env=self.env.env, stdin=subprocess.DEVNULL)
            time.sleep(0.05)  # let the waiter connect (the channel also latches a signal)
            wfd = open_gate_writer(fifo)
            c0 = {k: cpu_ticks(v) for k, v in pids.items()}
            m0 = machine_ticks()
            t0 = time.monotonic()
            os.write(wfd, b"\n")
            os.close(wfd)
            try:
                waiter.wait(timeout=900)
            except subprocess.TimeoutExpired:
                raise BenchError("tmux: the producer did not signal its end within 900 s")
            t1 = time.monotonic()
            c1 = {k: cpu_ticks(v) for k, v in pids.items()}
            m1 = machine_ticks()
            rc = status.read_text().strip() if status.exists() else None
            if rc != "0":
                raise BenchError(f"tmux: producer exit status {rc!r} (want 0)")
            out = {"seconds": t1 - t0, "pane_size": size,
                   "cpu_s": {k: (c1[k] - c0[k]) / CLK_TCK for k in pids},
                   "machine_busy_s": (m1[0] - m0[0]) / CLK_TCK,
                   "machine_all_s": (m1[1] - m0[1]) / CLK_TCK}
            if watchers:
                # tty clients get screen updates, not the byte stream: each must have drawn the
                # marker line, and no byte count can be compared.
                out.update(check_streams(watchers.finish(), t0, None, same_bytes=False))
            return out
        finally:
            if waiter is not None and waiter.poll() is None:
                waiter.kill()
                waiter.wait()
            self.cmd("kill-session", "-t", s, check=False)
            if watchers is not None:
                watchers.close()
            fifo.unlink(missing_ok=True)
            status.unlink(missing_ok=True)

    # ---- round trip
    def rt_open(self):
        self.rt_session = self.env.name("rt")
        self.new_session(self.rt_session, BIG, [self.env.bash, "-i"])
        # Wait until bash reads input (the sentinel round trip through capture-pane).
        self.poll_op(-1, timeout=30)

    def poll_op(self, i: int, timeout: float = 30) -> tuple[float, str | None]:
        """send-keys, then capture-pane back to back until the sentinel shows."""
        pat = re.compile(r"__D%d_(\d+)\s*$" % i if i >= 0 else r"__Dm1_(\d+)\s*$", re.M)
        tag = f"__D{i}_" if i >= 0 else "__Dm1_"
        t0 = time.perf_counter()
        self.cmd("send-keys", "-t", self.rt_session, f"echo hi; echo {tag}$?", "Enter")
        deadline = time.monotonic() + timeout
        while True:
            screen = self.cmd("capture-pane", "-p", "-t", self.rt_session)
            m = pat.search(screen)
            if m:
                break
            if time.monotonic() > deadline:
                raise BenchError(f"tmux poll: no sentinel {tag} after {timeout}s; screen tail "
                                 f"{screen[-300:]!r}")
        t1 = time.perf_counter()
        err = None
        if m.group(1) != "0":
            err = f"exit code {m.group(1)}"
        else:
            before = screen[: m.start()].rstrip("\n").rsplit("\n", 1)[-1]
            if before.strip() != "hi":
                err = f"line before sentinel is {before!r}, not 'hi'"
        return t1 - t0, err

    def ctl_open(self):
        self.ctl = subprocess.Popen(
            ["tmux", "-S", self.sock, "-C", "attach-session", "-t", self.rt_session],
            env=self.env.env, stdin=subprocess.PIPE, stdout=subprocess.PIPE,
            stderr=subprocess.DEVNULL, bufsize=0)
        self.ctl_reader = self.ctl.stdout
        self.ctl_fd = self.ctl.stdout.fileno()
        self.ctl_pending = b""
        # First op (unrecorded) proves the control client is attached and bash reads input.
        self.ctl_op(-1, timeout=30)

    _OCTAL = re.compile(rb"\\([0-7]{3})")

    def _ctl_lines(self, deadline):
        """Yields complete lines from the control client."""
        while True:
            nl = self.ctl_pending.find(b"\n")
            if nl >= 0:
                line, self.ctl_pending = self.ctl_pending[:nl], self.ctl_pending[nl + 1:]
                yield line
                continue
            left = deadline - time.monotonic()
            if left <= 0:
                raise BenchError("tmux control mode: timed out")
            r, _, _ = select.select([self.ctl_fd], [], [], left)
            if r:
                chunk = os.read(self.ctl_fd, 1 << 16)
                if not chunk:
                    raise BenchError("tmux control client exited")
                self.ctl_pending += chunk

    def ctl_op(self, i: int, timeout: float = 30) -> tuple[float, str | None]:
        tag = f"__D{i}_" if i >= 0 else "__Dm1_"
        pat = re.compile(re.escape(tag.encode()) + rb"(\d+)")
        line = f"send-keys -t {self.rt_session} 'echo hi; echo {tag}$?' Enter\n".encode()
        t0 = time.perf_counter()
        self.ctl.stdin.write(line)
        deadline = time.monotonic() + timeout
        out = b""
        for raw in self._ctl_lines(deadline):
            if raw.startswith(b"%output "):
                data = raw.split(b" ", 2)[2] if raw.count(b" ") >= 2 else b""
                out += self._OCTAL.sub(lambda mm: bytes([int(mm.group(1), 8)]), data)
                m = pat.search(out)
                if m:
                    break
            elif raw.startswith(b"%exit"):
                raise BenchError(f"tmux control client: {raw!r}")
        t1 = time.perf_counter()
        err = None
        if m.group(1) != b"0":
            err = f"exit code {m.group(1)!r}"
        elif not re.search(rb"(?:^|[\r\n])hi\r?\n", out[: m.start()]):
            err = f"no 'hi' line before the sentinel: {out[-200:]!r}"
        return t1 - t0, err

    def rt_close(self):
        if self.ctl is not None:
            try:
                self.ctl.stdin.write(b"detach-client\n")
                self.ctl.stdin.close()
                self.ctl.wait(timeout=5)
            except Exception:
                self.ctl.kill()
                self.ctl.wait()
            self.ctl = None
        if getattr(self, "rt_session", None):
            self.cmd("kill-session", "-t", self.rt_session, check=False)
            self.rt_session = None

    # ---- memory: N idle bash sessions in this (fresh) server, one CLI call each
    def memory(self, ns: list[int]) -> dict:
        out = {"per_n": {}}
        keep_panes = set(self._pane_pids())
        time.sleep(0.5)
        base = read_pss(self.server_pid)
        out["server_base_pss_kib"] = base[0] if base else None
        out["server_base_uss_kib"] = base[2] if base else None
        created = 0
        for n in ns:
            before = created
            t0 = time.perf_counter()
            while created < n:
                created += 1
                self.new_session(f"m{created}", SMALL, [self.env.bash, "-i"])
            created_s = time.perf_counter() - t0
            shells = [p for p in self._pane_pids() if p not in keep_panes]
            settle = wait_cpu_settled(lambda: [self.server_pid] + shells)
            time.sleep(1.0)
            spss, srss, suss, sfound = sum_pss(shells)
            server = read_pss(self.server_pid)
            out["per_n"][n] = {
                "n": n, "new": n - before, "found_shells": sfound, "create_s": created_s,
                "shell_pss_kib": spss, "shell_rss_kib": srss, "shell_uss_kib": suss,
                "server_pss_kib": server[0] if server else None,
                "server_rss_kib": server[1] if server else None,
                "server_uss_kib": server[2] if server else None,
                "holder_pss_kib": 0, "settle_s": settle,
            }
        return out

    def _pane_pids(self) -> list[int]:
        return [int(x) for x in self.cmd("list-panes", "-a", "-F", "#{pane_pid}").split()]


# --------------------------------------------------------------------------------------------
# ptyhub
# --------------------------------------------------------------------------------------------

class PtyhubError(BenchError):
    pass


class Ptyhub:
    """One `ptyhub serve` on 127.0.0.1 with a fresh state dir, driven over REST."""

    name = "ptyhub"

    def __init__(self, env: Env, binary: Path, label: str):
        self.env = env
        self.binary = binary
        self.label = label
        self.state = env.root / env.name("state-")
        self.token = hashlib.sha256(os.urandom(16)).hexdigest()[:32]
        self.proc = None
        self.conn = None
        self.socket = None  # the local unix socket, from the banner's `socket:` line
        self.created: list[str] = []
        self.stdout_tail: list[str] = []
        self.log_path = env.root / f"{label}-{env.name('serve')}.log"
        self._start()
        env.on_cleanup(f"ptyhub {label}", self.stop)

    def _start(self):
        self.log_file = open(self.log_path, "wb")
        # A private runtime dir per server: its local socket and the holders' sockets.
        self.runtime = self.env.runtime / self.env.name("s")
        self.runtime.mkdir(mode=0o700)
        env = dict(self.env.env, XDG_RUNTIME_DIR=str(self.runtime))
        for k in ("PTYHUB_SOCKET", "PTYHUB_STATE_DIR", "PTYHUB_RUNTIME_DIR", "PTYHUB_LISTEN",
                  "PTYHUB_TOKEN"):
            env.pop(k, None)
        # The server closes its least recently used terminal beyond --max-terminals (default
        # 20); the memory workload holds hundreds. (An env var: older binaries ignore it.)
        env["PTYHUB_MAX_TERMINALS"] = "100000"
        self.proc = subprocess.Popen(
            [str(self.binary), "serve", "--state-dir", str(self.state),
             "--listen", "127.0.0.1:0", "--token", self.token],
            env=env, cwd=str(self.env.work), stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE, stderr=self.log_file, start_new_session=True)
        url_box: list[str] = []
        got = threading.Event()

        def pump():  # keeps draining stdout so the server never blocks on a full pipe
            for raw in self.proc.stdout:
                line = raw.decode(errors="replace").rstrip("\n")
                self.stdout_tail = (self.stdout_tail + [line])[-50:]
                s = line.strip()
                if s.startswith("socket:"):
                    self.socket = s.split(":", 1)[1].strip()
                if not url_box and s.startswith("url:"):
                    url_box.append(s.split(":", 1)[1].strip())
                elif url_box and s.startswith(("socket:", "terminals found")):
                    got.set()  # the banner's last lines the harness needs
            got.set()

        threading.Thread(target=pump, daemon=True).start()
        if not got.wait(30) or not url_box:
            try:
                rc = self.proc.wait(timeout=2)
            except subprocess.TimeoutExpired:
                rc = "none: still running after 30 s, killed"
                self.proc.kill()
                self.proc.wait()
            raise PtyhubError(f"ptyhub serve printed no `url:` line (exit code {rc}); "
                              f"stdout: {self.stdout_tail[-10:]}; log: {self.log_tail()}")
        u = urllib.parse.urlsplit(url_box[0])
        self.host, self.port = u.hostname, u.port
        self.base = u.path.rstrip("/")

    def log_tail(self, n=15) -> list[str]:
        try:
            self.log_file.flush()
            return self.log_path.read_text(errors="replace").splitlines()[-n:]
        except OSError:
            return []

    # ---- HTTP
    def _connect(self):
        c = http.client.HTTPConnection(self.host, self.port, timeout=900)
        c.connect()
        c.sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        return c

    def request(self, method: str, path: str, body=None, conn=None) -> tuple[int, dict]:
        """One request; the response's JSON envelope (or a synthetic one on non-JSON)."""
        own = conn is None
        if own:
            if self.conn is None:
                self.conn = self._connect()
            conn = self.conn
        headers = {"Authorization": f"Bearer {self.token}"}
        payload = None
        if body is not None:
            payload = json.dumps(body).encode()
            headers["Content-Type"] = "application/json"
        try:
            conn.request(method, self.base + path, body=payload, headers=headers)
            resp = conn.getresponse()
            raw = resp.read()
        except (http.client.HTTPException, ConnectionError, OSError) as e:
            if own:
                self.conn = None
            try:
                conn.close()
            except Exception:
                pass
            raise PtyhubError(f"{method} {path}: {short_error(e)}; server alive: "
                              f"{self.proc.poll() is None}; log: {self.log_tail(5)}")
        self.last_raw_len = len(raw)
        try:
            doc = json.loads(raw)
        except ValueError:
            doc = {"success": False, "message": raw[:300].decode(errors="replace")}
        return resp.status, doc

    def ok(self, method, path, body=None, conn=None) -> dict:
        status, doc = self.request(method, path, body, conn)
        if status >= 300 or not doc.get("success"):
            raise PtyhubError(f"{method} {path} -> HTTP {status}: {json.dumps(doc)[:500]}")
        return doc.get("data") or {}

    def create(self, size) -> str:
        data = self.ok("POST", "/v2/pty/sessions",
                       {"cwd": str(self.env.work), "cols": size[0], "rows": size[1],
                        "shell": self.env.bash})
        sid = data.get("session_id")
        if not sid:
            raise PtyhubError(f"create: no session_id in {data}")
        self.created.append(sid)
        return sid

    def delete(self, sid: str):
        try:
            self.request("DELETE", f"/v2/pty/sessions/{urllib.parse.quote(sid)}")
        finally:
            if sid in self.created:
                self.created.remove(sid)

    def exec(self, sid: str, command: str, conn=None, **extra) -> tuple[float, dict, int]:
        body = {"command": command}
        body.update(extra)
        t0 = time.perf_counter()
        status, doc = self.request("POST", f"/v2/pty/sessions/{urllib.parse.quote(sid)}/exec",
                                   body, conn)
        t1 = time.perf_counter()
        return t1 - t0, doc, status

    def wait_prompt(self, sid: str, timeout: float = 30) -> None:
        deadline = time.monotonic() + timeout
        while True:
            data = self.ok("GET", f"/v2/pty/sessions/{urllib.parse.quote(sid)}/screen")
            if any(str(r).strip() for r in data.get("screen") or []):
                return
            if time.monotonic() > deadline:
                raise PtyhubError(f"terminal {sid} shows no prompt after {timeout}s")
            time.sleep(0.02)

    # ---- lifecycle
    def metas(self) -> list[dict]:
        out = []
        pattern = str(self.state / "home" / "*" / "agent" / "*" / "session" / "*" /
                      "terminal" / "*" / "meta.json")
        for p in glob.glob(pattern):
            try:
                with open(p) as f:
                    out.append(json.load(f))
            except (OSError, ValueError):
                pass
        return out

    def holder_pids_from_proc(self) -> list[int]:
        """Fallback: processes running this binary's `holder` subcommand."""
        pids = []
        real = os.path.realpath(self.binary)
        for d in os.listdir("/proc"):
            if not d.isdigit():
                continue
            argv = proc_cmdline(int(d))
            if len(argv) >= 2 and argv[1] == "holder":
                try:
                    exe = os.path.realpath(f"/proc/{d}/exe")
                except OSError:
                    continue
                if exe.replace(" (deleted)", "") == real:
                    pids.append(int(d))
        return pids

    def stop(self):
        """DELETE every terminal, SIGTERM the server, then kill what is left of holders."""
        if self.proc is None:
            return
        if self.proc.poll() is None:
            try:
                listed = self.ok("GET", "/v2/pty/sessions")
                items = listed if isinstance(listed, list) else (
                    listed.get("sessions") or listed.get("terminals") or listed.get("items") or [])
                for it in items:
                    sid = it.get("session_id") if isinstance(it, dict) else None
                    if sid and sid not in self.created:
                        self.created.append(sid)
            except Exception as e:
                log(f"ptyhub {self.label}: list before stop failed: {short_error(e)}")
            for sid in list(self.created):
                try:
                    self.delete(sid)
                except Exception as e:
                    log(f"ptyhub {self.label}: DELETE {sid}: {short_error(e)}")
                    if sid in self.created:
                        self.created.remove(sid)
        if self.conn is not None:
            self.conn.close()
            self.conn = None
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(timeout=15)
            except subprocess.TimeoutExpired:
                log(f"ptyhub {self.label}: server ignored SIGTERM for 15 s; SIGKILL")
                self.proc.kill()
                self.proc.wait()
        # Holders outlive the server by design: kill leftovers (and their shells).
        leftovers = 0
        for m in self.metas():
            for key in ("holder_pid", "pid"):
                pid = m.get(key)
                if pid and proc_alive(pid):
                    argv = proc_cmdline(pid)
                    if key == "holder_pid" and not (len(argv) >= 2 and argv[1] == "holder"):
                        continue
                    leftovers += 1
                    kill_pid(pid)
        for pid in self.holder_pids_from_proc():
            leftovers += 1
            kill_pid(pid)
        if leftovers:
            log(f"ptyhub {self.label}: killed {leftovers} leftover holder/shell processes")
        self.proc = None
        try:
            self.log_file.close()
        except Exception:
            pass

    # ---- workloads
    def throughput(self, cmd: str) -> dict:
        sid = self.create(BIG)
        try:
            self.wait_prompt(sid)
            holder = [m.get("holder_pid") for m in self.metas() if m.get("id") == sid]
            holder = [holder[0]] if holder and holder[0] else []
            c0 = (cpu_ticks([self.proc.pid]), cpu_ticks(holder))
            secs, doc, status = self.exec(sid, cmd, truncate=True, timeout=600)
            c1 = (cpu_ticks([self.proc.pid]), cpu_ticks(holder))
            cpu = {"server": (c1[0] - c0[0]) / CLK_TCK}
            if holder:
                cpu["holder"] = (c1[1] - c0[1]) / CLK_TCK
            data = doc.get("data") or {}
            if status >= 300 or not doc.get("success"):
                raise PtyhubError(f"exec `{cmd}` -> HTTP {status}: {json.dumps(doc)[:400]}")
            if data.get("status") != "completed" or data.get("exit_code") != 0:
                raise PtyhubError(f"exec `{cmd}`: status={data.get('status')!r} "
                                  f"exit_code={data.get('exit_code')!r} after {secs:.2f}s")
            return {"seconds": secs, "output_chars": len(data.get("output") or ""), "cpu_s": cpu}
        finally:
            self.delete(sid)

    def rt_open(self):
        self.rt_sid = self.create(BIG)
        self.wait_prompt(self.rt_sid)
        self.rt_conn = self._connect()
        self.rt_sample = None
        self.rt_op(-1)

    def rt_op(self, i: int) -> tuple[float, str | None]:
        secs, doc, status = self.exec(self.rt_sid, "echo hi", conn=self.rt_conn, timeout=30)
        data = doc.get("data") or {}
        if self.rt_sample is None:
            self.rt_sample = {"http": status, "data": data, "first_response_bytes":
                              self.last_raw_len}
        self.rt_sample["last_response_bytes"] = self.last_raw_len
        self.rt_sample["last_console_len"] = len(data.get("console") or [])
        err = None
        if status >= 300 or not doc.get("success"):
            err = f"HTTP {status}: {json.dumps(doc)[:300]}"
        elif data.get("status") != "completed" or data.get("exit_code") != 0:
            err = f"status={data.get('status')!r} exit_code={data.get('exit_code')!r}"
        elif (data.get("output") or "").rstrip("\r\n") != "hi":
            err = f"output={data.get('output')!r}"
        return secs, err

    def rt_close(self):
        try:
            self.rt_conn.close()
        except Exception:
            pass
        self.delete(self.rt_sid)

    # ---- live fan-out: the producer with W watchers on its terminal
    def fanout(self, w: int, kind: str, cmd: str, expect_min: int, expected: bytes) -> dict:
        """kind "ws": one watcher process multiplexing W WebSockets (`mode=watch`, binary);
        kind "cli": W `ptyhub terminal watch T` processes (stdin /dev/null), their stdout
        drained by the watcher process. All watchers are live before the producer starts."""
        sid = self.create(BIG)
        watchers = None
        try:
            self.wait_prompt(sid)
            meta = next((m for m in self.metas() if m.get("id") == sid), {})
            pids = {"server": [self.proc.pid], "holder": [meta.get("holder_pid")],
                    "producer": [meta.get("pid")]}
            keep = {}
            if w:
                keep = {str(i): str(self.env.root / self.env.name("kept-")) for i in {0, w - 1}}
                config = {"marker": FANOUT_MARKER, "keep": keep}
                if kind == "ws":
                    watchers = Watchers(self.env, dict(
                        config, kind="ws", unix=self.socket, n=w,
                        path=f"/v2/pty/sessions/{urllib.parse.quote(sid)}/ws"
                             f"?mode=watch&protocol=binary"))
                else:
                    watchers = self._cli_watchers(sid, w, config)
                watchers.wait_ready()
                pids["watchers"] = watchers.pids()
            # The producer's CPU is the shell's children (`cat`, reaped before the marker).
            c0 = {k: cpu_ticks(v, children=k == "producer") for k, v in pids.items()}
            m0 = machine_ticks()
            t0 = time.monotonic()
            _, doc, status = self.exec(sid, cmd, truncate=True, timeout=900)
            t1 = time.monotonic()
            c1 = {k: cpu_ticks(v, children=k == "producer") for k, v in pids.items()}
            m1 = machine_ticks()
            data = doc.get("data") or {}
            if status >= 300 or not doc.get("success"):
                raise PtyhubError(f"exec -> HTTP {status}: {json.dumps(doc)[:400]}")
            if data.get("status") != "completed" or data.get("exit_code") != 0:
                raise PtyhubError(f"exec: status={data.get('status')!r} "
                                  f"exit_code={data.get('exit_code')!r} after {t1 - t0:.2f}s")
            out = {"seconds": t1 - t0,
                   "cpu_s": {k: (c1[k] - c0[k]) / CLK_TCK for k in pids},
                   "machine_busy_s": (m1[0] - m0[0]) / CLK_TCK,
                   "machine_all_s": (m1[1] - m0[1]) / CLK_TCK}
            if watchers:
                out.update(check_streams(watchers.finish(), t0, expect_min, same_bytes=True))
                check_kept(keep.values(), expected)
            return out
        finally:
            if watchers is not None:
                watchers.close()
            self.delete(sid)

    def _cli_watchers(self, sid: str, w: int, config: dict) -> Watchers:
        env = dict(self.env.env, PTYHUB_SOCKET=self.socket)
        procs, fds = [], []
        err = open(self.env.root / f"{self.env.name('watch-')}.log", "ab")
        try:
            for _ in range(w):
                r, wr = os.pipe()
                fds.append(r)
                try:
                    fcntl.fcntl(r, F_SETPIPE_SZ, 1 << 20)
                except OSError:
                    pass
                try:
                    procs.append(subprocess.Popen(
                        [str(self.binary), "terminal", "watch", sid], env=env,
                        stdin=subprocess.DEVNULL, stdout=wr, stderr=err, start_new_session=True))
                finally:
                    os.close(wr)
        except BaseException:
            for fd in fds:
                os.close(fd)
            for p in procs:
                p.kill()
                p.wait()
            raise
        finally:
            err.close()
        return Watchers(self.env, dict(config, kind="fds"), fds=fds, clients=procs)

    # ---- replay: a watcher that asks for the retained output before live output
    def replay_terminal(self, cmd: str) -> str:
        sid = self.create(BIG)
        self.wait_prompt(sid)
        secs, doc, status = self.exec(sid, cmd, truncate=True, timeout=900)
        data = doc.get("data") or {}
        if status >= 300 or data.get("status") != "completed" or data.get("exit_code") != 0:
            raise PtyhubError(f"replay producer: HTTP {status}: {json.dumps(doc)[:400]}")
        return sid

    def replay_once(self, sid: str, transport: str, replay_bytes: int) -> dict:
        """Opens `mode=watch&restore=true` over TCP and times it until `terminal_restored`."""
        path = (f"/v2/pty/sessions/{urllib.parse.quote(sid)}/ws?mode=watch&restore=true"
                f"&replay_bytes={replay_bytes}&protocol={transport}")
        got = {"binary": 0, "wire": 0}

        def on_binary(piece):
            got["binary"] += len(piece)

        parser = live_client.FrameParser(on_binary)
        texts: list[bytes] = []
        first = ready = restored = None
        c0 = time.process_time()
        t0 = time.perf_counter()
        sock, data = live_client.connect(path, tcp=(self.host, self.port), token=self.token)
        try:
            while restored is None:
                if not data:
                    data = sock.recv(live_client.READ_BYTES)
                    if not data:
                        raise PtyhubError(f"replay ({transport}): closed before "
                                          f"terminal_restored")
                got["wire"] += len(data)
                now = time.perf_counter()
                for op, payload in parser.feed(data):
                    if op == live_client.OP_BINARY:
                        first = first or now
                    elif op == live_client.OP_TEXT:
                        # Output frames are decoded after the clock stops; small frames now.
                        if len(payload) > 4096:
                            texts.append(payload)
                            first = first or now
                            continue
                        frame = json.loads(payload)
                        kind = frame.get("type")
                        if kind == "ready":
                            ready = now
                        elif kind == "restore_output":
                            texts.append(payload)
                            first = first or now
                        elif kind == "terminal_restored":
                            restored = now
                        elif kind == "error":
                            raise PtyhubError(f"replay ({transport}): {frame}")
                    elif op == live_client.OP_CLOSE:
                        raise PtyhubError(f"replay ({transport}): closed ({payload!r})")
                data = b""
            cpu = time.process_time() - c0
        finally:
            sock.close()
        replayed = got["binary"]
        for t in texts:
            frame = json.loads(t)
            if frame.get("type") != "restore_output":
                raise PtyhubError(f"replay ({transport}): a {frame.get('type')!r} frame "
                                  f"before terminal_restored")
            replayed += len(frame["data"].encode())
        return {"seconds": restored - t0, "ready_s": ready - t0 if ready else None,
                "first_output_s": first - t0 if first else None, "replayed_bytes": replayed,
                "wire_bytes": got["wire"], "client_cpu_s": cpu}

    def memory(self, ns: list[int]) -> dict:
        out = {"per_n": {}}
        self.ok("GET", "/v2/pty/sessions")
        time.sleep(0.5)
        base = read_pss(self.proc.pid)
        out["server_base_pss_kib"] = base[0] if base else None
        out["server_base_uss_kib"] = base[2] if base else None
        ids: list[str] = []
        for n in ns:
            before = len(ids)
            t0 = time.perf_counter()
            while len(ids) < n:
                ids.append(self.create(SMALL))
            created_s = time.perf_counter() - t0
            t1 = time.perf_counter()
            for sid in ids:
                self.wait_prompt(sid, timeout=60)
            prompt_s = time.perf_counter() - t1
            metas = [m for m in self.metas() if not m.get("closed")]
            holders = [m["holder_pid"] for m in metas if m.get("holder_pid")]
            shells = [m["pid"] for m in metas if m.get("pid")]
            source = "meta.json"
            if len(holders) < n:
                holders = self.holder_pids_from_proc()
                source = "/proc scan (meta.json had fewer holder_pid entries)"
            settle = wait_cpu_settled(lambda: [self.proc.pid] + holders + shells)
            time.sleep(1.0)
            hpss, hrss, huss, hfound = sum_pss(holders)
            spss, srss, suss, sfound = sum_pss(shells)
            server = read_pss(self.proc.pid)
            out["per_n"][n] = {
                "n": n, "new": n - before, "found_holders": hfound, "found_shells": sfound,
                "holder_pid_source": source, "create_s": created_s, "prompt_wait_s": prompt_s,
                "holder_pss_kib": hpss, "holder_rss_kib": hrss, "holder_uss_kib": huss,
                "shell_pss_kib": spss, "shell_rss_kib": srss, "shell_uss_kib": suss,
                "server_pss_kib": server[0] if server else None,
                "server_rss_kib": server[1] if server else None,
                "server_uss_kib": server[2] if server else None,
                "settle_s": settle,
            }
        return out


# --------------------------------------------------------------------------------------------
# binary
# --------------------------------------------------------------------------------------------

def resolve_binary(arg: str | None) -> tuple[Path, str]:
    if arg:
        return Path(arg).resolve(), "--ptyhub"
    if os.environ.get("PTYHUB_BIN"):
        return Path(os.environ["PTYHUB_BIN"]).resolve(), "$PTYHUB_BIN"
    if os.environ.get("CARGO_TARGET_DIR"):
        return (Path(os.environ["CARGO_TARGET_DIR"]) / "release" / "ptyhub").resolve(), \
            "$CARGO_TARGET_DIR/release/ptyhub"
    return REPO / "target" / "release" / "ptyhub", "target/release/ptyhub"


def newest_source_mtime() -> float:
    newest = 0.0
    for pattern in ("crates/**/*.rs", "crates/**/Cargo.toml", "Cargo.toml", "Cargo.lock"):
        for p in REPO.glob(pattern):
            try:
                newest = max(newest, p.stat().st_mtime)
            except OSError:
                pass
    return newest


def ensure_binary(path: Path, how: str, force_build: bool, notes: list[str]) -> Path | None:
    explicit = how in ("--ptyhub", "$PTYHUB_BIN")
    if force_build or (not path.exists() and not explicit):
        log(f"building ptyhub (cargo build --release -p ptyhub); this takes minutes")
        r = subprocess.run(["cargo", "build", "--release", "-p", "ptyhub"], cwd=REPO)
        if r.returncode != 0:
            notes.append(f"cargo build --release -p ptyhub failed (exit {r.returncode})")
            return None
    if not path.exists():
        notes.append(f"ptyhub binary not found at {path}")
        return None
    if newest_source_mtime() > path.stat().st_mtime:
        notes.append("the ptyhub binary is older than the newest source file under crates/ "
                     "(run with --build to rebuild)")
    return path


# --------------------------------------------------------------------------------------------
# the benchmark
# --------------------------------------------------------------------------------------------

class Run:
    def __init__(self, args):
        self.args = args
        self.env = Env(keep=args.keep_tmp)
        self.errors: list[dict] = []
        self.notes: list[str] = []
        self.results: dict = {"throughput": {}, "roundtrip": {}, "memory": {}, "fanout": {},
                              "replay": {}}
        self.binary = None

    def err(self, system: str, workload: str, e: BaseException | str, round_=None):
        msg = e if isinstance(e, str) else short_error(e)
        self.errors.append({"system": system, "workload": workload, "round": round_,
                            "error": msg})
        log(f"ERROR {system}/{workload} round {round_}: {msg}")

    def order(self, r: int) -> list[str]:
        systems = [s for s in SYSTEMS if s in self.systems]
        k = r % len(systems) if systems else 0
        return systems[k:] + systems[:k]

    # ---- throughput
    def throughput(self):
        a = self.args
        mixed = self.env.data / "mixed.txt"
        log(f"generating {a.cat_mb} MB mixed ANSI/UTF-8 file")
        info = generate_mixed_file(mixed, int(a.cat_mb * 1_000_000))
        self.results["throughput_file"] = info
        workloads = {
            f"seq 1 {a.seq_n}": f"seq 1 {a.seq_n}",
            f"cat {a.cat_mb:g} MB mixed": f"cat {shlex.quote(str(mixed))}",
        }
        res = {w: {s: {"seconds": [], "bytes": None, "errors": 0, "cpu_s": {}}
                   for s in self.systems} for w in workloads}
        self.results["throughput"] = res
        hub = None
        if "ptyhub" in self.systems:
            hub = self.hub("throughput")
        tm = Tmux(self.env, "tmux throughput") if "tmux" in self.systems else None
        bare = Bare(self.env)
        drivers = {"bare": bare, "tmux": tm, "ptyhub": hub}
        for r in range(a.rounds):
            for w, cmd in workloads.items():
                for s in self.order(r):
                    d = drivers.get(s)
                    if d is None:
                        continue
                    try:
                        out = d.throughput(cmd)
                        res[w][s]["seconds"].append(out["seconds"])
                        if out.get("bytes"):
                            res[w][s]["bytes"] = out["bytes"]
                        for k, v in (out.get("cpu_s") or {}).items():
                            res[w][s]["cpu_s"].setdefault(k, []).append(v)
                        log(f"throughput r{r + 1} {w:<22} {s:<7} {out['seconds']:.3f}s")
                    except Exception as e:
                        res[w][s]["errors"] += 1
                        self.err(s, f"throughput {w}", e, r + 1)
                        if s == "ptyhub" and hub is not None and hub.proc.poll() is not None:
                            self.err(s, "throughput", "ptyhub server died; restarting", r + 1)
                            hub = drivers["ptyhub"] = self.hub("throughput")
        if hub is not None:
            hub.stop()
        if tm is not None:
            tm.kill_server()

    def hub(self, label: str):
        try:
            return Ptyhub(self.env, self.binary, label)
        except Exception as e:
            self.err("ptyhub", label, e)
            return None

    # ---- round trip
    def roundtrip(self):
        a = self.args
        variants = []
        if "bare" in self.systems:
            variants.append(("bare", "bare PTY bash (sentinel)"))
        if "tmux" in self.systems:
            variants += [("tmux_ctl", "tmux control mode"),
                         ("tmux_poll", "tmux send-keys + capture-pane")]
        if "ptyhub" in self.systems:
            variants.append(("ptyhub", "ptyhub POST exec (keep-alive)"))
        res = {v: {"label": label, "ms": [], "round_p50_ms": [], "errors": 0,
                   "error_samples": []} for v, label in variants}
        self.results["roundtrip"] = res
        hub = self.hub("roundtrip") if "ptyhub" in self.systems else None
        tm = Tmux(self.env, "tmux roundtrip") if "tmux" in self.systems else None
        for r in range(a.rounds):
            names = [v for v, _ in variants]
            k = r % len(names)
            for v in names[k:] + names[:k]:
                try:
                    if v == "bare":
                        d = Bare(self.env)
                        d.rt_open()
                        op, close = d.rt_op, d.rt_close
                    elif v == "tmux_ctl":
                        tm.rt_open()
                        tm.ctl_open()
                        op, close = tm.ctl_op, tm.rt_close
                    elif v == "tmux_poll":
                        tm.rt_open()
                        op, close = tm.poll_op, tm.rt_close
                    else:
                        if hub is None:
                            raise PtyhubError("no ptyhub server")
                        hub.rt_open()
                        op, close = hub.rt_op, hub.rt_close
                except Exception as e:
                    res[v]["errors"] += 1
                    self.err(v, "roundtrip open", e, r + 1)
                    continue
                times = []
                try:
                    for _ in range(a.warmup_ops):
                        op(10**6 + _)
                    for i in range(a.ops):
                        secs, e = op(i)
                        if e:
                            res[v]["errors"] += 1
                            if len(res[v]["error_samples"]) < 5:
                                res[v]["error_samples"].append(e)
                        times.append(secs * 1000)
                except Exception as e:
                    res[v]["errors"] += 1
                    self.err(v, "roundtrip", e, r + 1)
                finally:
                    try:
                        close()
                    except Exception as e:
                        self.err(v, "roundtrip close", e, r + 1)
                res[v]["ms"] += times
                if times:
                    res[v]["round_p50_ms"].append(percentile(times, 50))
                    log(f"roundtrip r{r + 1} {v:<10} p50 {percentile(times, 50):.3f} ms "
                        f"p99 {percentile(times, 99):.3f} ms ({len(times)} ops)")
        if hub is not None:
            if getattr(hub, "rt_sample", None):
                self.results["roundtrip_ptyhub_sample"] = hub.rt_sample
            hub.stop()
        if tm is not None:
            tm.kill_server()

    # ---- memory
    def memory(self):
        a = self.args
        ns = sorted(set(a.mem_n))
        res = {s: {"rounds": []} for s in self.systems}
        self.results["memory"] = res
        self.results["memory_ns"] = ns
        for r in range(a.mem_rounds):
            for s in self.order(r):
                log(f"memory r{r + 1} {s}: N={ns}")
                d = None
                try:
                    if s == "bare":
                        out = Bare(self.env).memory(ns)
                    elif s == "tmux":
                        d = Tmux(self.env, f"tmux memory r{r + 1}")
                        out = d.memory(ns)
                    else:
                        d = Ptyhub(self.env, self.binary, f"memory-r{r + 1}")
                        out = d.memory(ns)
                    res[s]["rounds"].append(out)
                    for n, v in out["per_n"].items():
                        log(f"memory r{r + 1} {s:<7} N={n}: shells {v['shell_pss_kib']} KiB, "
                            f"holders {v['holder_pss_kib']} KiB, server "
                            f"{v['server_pss_kib']} KiB, created in {v['create_s']:.2f}s")
                except Exception as e:
                    self.err(s, "memory", e, r + 1)
                finally:
                    if d is not None:
                        try:
                            if s == "tmux":
                                d.kill_server()
                            else:
                                d.stop()
                        except Exception as e:
                            self.err(s, "memory cleanup", e, r + 1)
                time.sleep(0.5)

    # ---- live fan-out
    def fanout(self):
        a = self.args
        path = self.env.data / "fanout.txt"
        log(f"generating the {a.fanout_mb:g} MB fan-out file")
        self.results["fanout_file"] = generate_mixed_file(path, int(a.fanout_mb * 1_000_000))
        content = path.read_bytes()
        expected = content.replace(b"\n", b"\r\n")  # what leaves the PTY (`onlcr`)
        del content
        cmd = f"cat {shlex.quote(str(path))} && {FANOUT_END_CMD}"
        ws = sorted(set(a.fanout_watchers))
        variants = []
        if "ptyhub" in self.systems:
            variants += [f"ptyhub_{k}" for k in a.fanout_clients]
        if "tmux" in self.systems:
            variants.append("tmux")
        res = {v: {w: {"seconds": [], "errors": 0, "runs": []} for w in ws
                   if w > 0 or v in ("tmux", f"ptyhub_{a.fanout_clients[0]}")}
               for v in variants}
        self.results["fanout"] = res
        self.results["fanout_watchers"] = ws
        self.results["fanout_expected_bytes"] = len(expected)
        hub = self.hub("fanout") if "ptyhub" in self.systems else None
        tm = Tmux(self.env, "tmux fanout") if "tmux" in self.systems else None
        for r in range(a.rounds):
            for w in (ws if r % 2 == 0 else ws[::-1]):
                k = r % len(variants) if variants else 0
                for v in variants[k:] + variants[:k]:
                    if w not in res[v]:
                        continue
                    try:
                        if v == "tmux":
                            out = tm.fanout(w, cmd)
                        else:
                            if hub is None:
                                raise PtyhubError("no ptyhub server")
                            out = hub.fanout(w, v.split("_", 1)[1], cmd, len(expected), expected)
                        res[v][w]["seconds"].append(out["seconds"])
                        res[v][w]["runs"].append(out)
                        extra = ""
                        if "last_watcher_s" in out:
                            extra = (f", last watcher {out['last_watcher_s']:.3f}s, lagged "
                                     f"{out['lagged_watchers']}/{w}")
                        log(f"fanout r{r + 1} W={w:<3} {v:<10} {out['seconds']:.3f}s{extra}; "
                            f"cpu " + " ".join(f"{c} {x:.2f}" for c, x in out["cpu_s"].items()))
                    except Exception as e:
                        res[v][w]["errors"] += 1
                        self.err(v, f"fanout W={w}", e, r + 1)
                        if v != "tmux" and hub is not None and hub.proc.poll() is not None:
                            self.err("ptyhub", "fanout", "ptyhub server died; restarting", r + 1)
                            hub = self.hub("fanout")
        if hub is not None:
            hub.stop()
        if tm is not None:
            tm.kill_server()

    # ---- replay
    def replay(self):
        a = self.args
        if "ptyhub" not in self.systems:
            return
        path = self.env.data / "replay.txt"
        log(f"generating the {a.replay_mb:g} MB replay file")
        self.results["replay_file"] = generate_mixed_file(path, int(a.replay_mb * 1_000_000))
        res = {t: [] for t in ("json", "binary")}
        self.results["replay"] = {"runs": res, "errors": 0,
                                  "replay_bytes_asked": a.replay_bytes}
        hub = self.hub("replay")
        if hub is None:
            return
        try:
            sid = hub.replay_terminal(f"cat {shlex.quote(str(path))}")
            for i in range(a.replay_runs):
                for t in (("json", "binary") if i % 2 == 0 else ("binary", "json")):
                    try:
                        out = hub.replay_once(sid, t, a.replay_bytes)
                        res[t].append(out)
                        log(f"replay {i + 1} {t:<6} {out['seconds'] * 1000:.1f} ms "
                            f"({out['replayed_bytes']} bytes, first output "
                            f"{(out['first_output_s'] or 0) * 1000:.1f} ms)")
                    except Exception as e:
                        self.results["replay"]["errors"] += 1
                        self.err("ptyhub", f"replay {t}", e, i + 1)
        except Exception as e:
            self.results["replay"]["errors"] += 1
            self.err("ptyhub", "replay", e)
        finally:
            hub.stop()

    # ---- driver
    def run(self):
        a = self.args
        self.systems = [s for s in SYSTEMS if s in a.systems]
        started = datetime.now(timezone.utc)
        self.loadavg = [os.getloadavg()]
        if "ptyhub" in self.systems:
            path, how = resolve_binary(a.ptyhub)
            self.binary_how = how
            add_scrub(path.parent, f"<{how.rsplit('/', 1)[0]}>")
            self.binary = ensure_binary(path, how, a.build, self.notes)
            if self.binary is None:
                self.err("ptyhub", "setup", "; ".join(self.notes) or "no binary")
                self.systems.remove("ptyhub")
        if "tmux" in self.systems and not shutil.which("tmux"):
            self.err("tmux", "setup", "tmux not on PATH (apt-get install -y tmux)")
            self.systems.remove("tmux")
        add_scrub(REPO, "<repo>")
        add_scrub(str(Path.home()), "~")
        for w in WORKLOADS:
            if w not in a.workloads:
                continue
            log(f"== {w}")
            try:
                getattr(self, w)()
            except Exception as e:
                self.err("harness", w, e)
        finished = datetime.now(timezone.utc)
        self.loadavg.append(os.getloadavg())
        self.meta = self.describe(started, finished)

    def describe(self, started, finished) -> dict:
        def out(cmd):
            try:
                return subprocess.run(cmd, capture_output=True, text=True, timeout=10,
                                      cwd=REPO).stdout.strip()
            except Exception:
                return None
        cpu = None
        try:
            for line in open("/proc/cpuinfo"):
                if line.startswith("model name"):
                    cpu = line.split(":", 1)[1].strip()
                    break
        except OSError:
            pass
        commit = out(["git", "rev-parse", "--short", "HEAD"])
        dirty = out(["git", "status", "--porcelain", "--", "crates", "Cargo.toml", "Cargo.lock"])
        binary = None
        if self.binary:
            st = self.binary.stat()
            binary = {
                "found_via": self.binary_how,
                "mtime_utc": datetime.fromtimestamp(st.st_mtime, timezone.utc).isoformat(
                    timespec="seconds"),
                "size": st.st_size,
            }
        return {
            "started_utc": started.isoformat(timespec="seconds"),
            "finished_utc": finished.isoformat(timespec="seconds"),
            "duration_s": round((finished - started).total_seconds(), 1),
            "args": {k: v for k, v in vars(self.args).items() if k != "ptyhub"},
            "git_commit": commit, "git_dirty_sources": bool(dirty),
            "ptyhub_binary": binary,
            "machine": {"cpus": os.cpu_count(), "cpu": cpu, "kernel": platform.release(),
                        "python": platform.python_version(),
                        "tmux": out(["tmux", "-V"]),
                        "bash": (out(["bash", "--version"]) or "").split("\n")[0]},
            "systems": self.systems,
            "loadavg_start_end": [[round(x, 2) for x in la] for la in self.loadavg],
            "notes": self.notes,
        }


# --------------------------------------------------------------------------------------------
# report
# --------------------------------------------------------------------------------------------

def verdict(ok) -> str:
    return "n/a" if ok is None else ("**met**" if ok else "**MISSED**")


def summarize(run: Run) -> tuple[dict, str]:
    R = run.results
    a = run.args
    md: list[str] = []
    summary: dict = {"throughput": {}, "roundtrip": {}, "memory": {}, "fanout": {},
                     "replay": {}, "targets": []}
    targets = summary["targets"]
    m = run.meta
    md.append(f"# ptyhub benchmark — {m['started_utc']}")
    md.append("")
    mach = m["machine"]
    md.append(f"- machine: {mach['cpus']} CPUs ({mach['cpu']}), Linux {mach['kernel']}, "
              f"Python {mach['python']}, {mach['tmux']}, {mach['bash']}")
    bin_ = m["ptyhub_binary"]
    md.append(f"- ptyhub: commit {m['git_commit']}"
              f"{' (+ uncommitted changes under crates/)' if m['git_dirty_sources'] else ''}"
              + (f", binary built {bin_['mtime_utc']} (found via {bin_['found_via']})"
                 if bin_ else ", binary: none"))
    md.append(f"- rounds: {a.rounds} (memory: {a.mem_rounds}); systems in rotating order per "
              f"round; duration {m['duration_s']} s; mode: {'quick' if a.quick else 'full'}")
    la = m.get("loadavg_start_end") or []
    if la:
        md.append(f"- load average (1/5/15 min) at start {la[0]}, at end {la[-1]} (the machine is "
                  f"shared: other work runs beside the benchmark)")
    md.append("- every shell is `bash -i` with an empty `$HOME/.bashrc` (ptyhub adds its "
              "shell-integration rc on top); terminals 200x50 for throughput and round trip, "
              "80x24 for memory; tmux `-f /dev/null` (history-limit 2000)")
    for n in m["notes"]:
        md.append(f"- note: {n}")
    md.append("")

    # ---- throughput
    tp = R.get("throughput") or {}
    if tp:
        f = R.get("throughput_file") or {}
        md.append("## (a) Output throughput")
        md.append("")
        md.append("Wall time from releasing the producer until its whole output was consumed "
                  "(bare: Python reader got EIO on the master; tmux: the pane-died hook fired "
                  "(`remain-on-exit on`, awaited with `wait-for`); ptyhub: `POST …/exec` "
                  "returned `completed`, exit 0). Medians over rounds; MB/s are bytes out of "
                  "the PTY (after `onlcr`) as counted by the bare reader.")
        md.append("")
        md.append("| workload | bytes out | bare s | tmux s | ptyhub s | ptyhub MB/s "
                  "| ptyhub/bare time | ptyhub/tmux time | ptyhub throughput vs bare "
                  "| vs tmux |")
        md.append("|---|---|---|---|---|---|---|---|---|---|")
        for w, per in tp.items():
            med = {s: median(per[s]["seconds"]) for s in per}
            nbytes = per.get("bare", {}).get("bytes")
            ph = med.get("ptyhub")
            row = {
                "bytes_out": nbytes,
                "median_s": med,
                "rounds_s": {s: per[s]["seconds"] for s in per},
                "errors": {s: per[s]["errors"] for s in per},
                "ptyhub_over_bare_time": ratio(ph, med.get("bare")),
                "ptyhub_over_tmux_time": ratio(ph, med.get("tmux")),
                "ptyhub_mb_s": (nbytes / ph / 1e6) if (nbytes and ph) else None,
                "bare_mb_s": (nbytes / med["bare"] / 1e6) if (nbytes and med.get("bare"))
                else None,
                "tmux_mb_s": (nbytes / med["tmux"] / 1e6) if (nbytes and med.get("tmux"))
                else None,
            }
            speed_bare = ratio(med.get("bare"), ph)
            speed_tmux = ratio(med.get("tmux"), ph)
            row["ptyhub_throughput_vs_bare"] = speed_bare
            row["ptyhub_throughput_vs_tmux"] = speed_tmux
            summary["throughput"][w] = row
            md.append(f"| `{w}` | {fmt(nbytes / 1e6 if nbytes else None, 3, ' MB')} "
                      f"| {fmt(med.get('bare'))} | {fmt(med.get('tmux'))} | {fmt(ph)} "
                      f"| {fmt(row['ptyhub_mb_s'])} "
                      f"| {fmt_ratio(row['ptyhub_over_bare_time'])} "
                      f"| {fmt_ratio(row['ptyhub_over_tmux_time'])} "
                      f"| {fmt_ratio(speed_bare)} | {fmt_ratio(speed_tmux)} |")
            targets.append({"target": f"throughput `{w}`: ptyhub ≥ 0.8x bare-PTY throughput",
                            "value": speed_bare,
                            "met": None if speed_bare is None else speed_bare >= 0.8})
            targets.append({"target": f"throughput `{w}`: ptyhub ≥ 2x tmux throughput",
                            "value": speed_tmux,
                            "met": None if speed_tmux is None else speed_tmux >= 2.0})
        md.append("")
        md.append("CPU seconds used during the timed run by the system's own processes "
                  "(medians; the producer's CPU is not included): ")
        md.append("")
        md.append("| workload | bare: Python reader | tmux: server | ptyhub: server "
                  "| ptyhub: holder |")
        md.append("|---|---|---|---|---|")
        for w, per in tp.items():
            def c(s, k, per=per):
                return median(per.get(s, {}).get("cpu_s", {}).get(k, []))
            cpu = {"bare_reader": c("bare", "reader"), "tmux_server": c("tmux", "server"),
                   "ptyhub_server": c("ptyhub", "server"), "ptyhub_holder": c("ptyhub", "holder")}
            summary["throughput"][w]["median_cpu_s"] = cpu
            md.append(f"| `{w}` | {fmt(cpu['bare_reader'])} | {fmt(cpu['tmux_server'])} "
                      f"| {fmt(cpu['ptyhub_server'])} | {fmt(cpu['ptyhub_holder'])} |")
        md.append("")
        md.append("Per-round seconds (in round order):")
        md.append("")
        for w, per in tp.items():
            for s in per:
                vals = ", ".join(f"{x:.3f}" for x in per[s]["seconds"]) or "none"
                e = per[s]["errors"]
                md.append(f"- `{w}` {s}: {vals}" + (f" ({e} failed)" if e else ""))
        md.append("")
        md.append(f"The mixed file: {fmt(f.get('bytes', 0) / 1e6, 4, ' MB')}, sha256 "
                  f"`{(f.get('sha256') or '')[:16]}…`, ~{f.get('esc_per_mb_sample')} ESC and "
                  f"~{f.get('cr_per_mb_sample')} CR per MB (coloured words, long wrapping "
                  f"lines, CR progress bars, accents/combining marks/CJK/emoji, log lines).")
        md.append("")

    # ---- round trip
    rt = R.get("roundtrip") or {}
    if rt:
        md.append(f"## (b) Round trip: `echo hi` + exit code ({a.ops} ops x {a.rounds} rounds "
                  f"per system, {a.warmup_ops} warm-up ops per round not counted)")
        md.append("")
        md.append("| system | ops | p50 ms | p99 ms | mean ms | per-round p50 ms | errors |")
        md.append("|---|---|---|---|---|---|---|")
        for v, d in rt.items():
            ms = d["ms"]
            row = {"label": d["label"], "ops": len(ms), "p50_ms": percentile(ms, 50),
                   "p99_ms": percentile(ms, 99),
                   "mean_ms": statistics.fmean(ms) if ms else None,
                   "round_p50_ms": d["round_p50_ms"], "errors": d["errors"],
                   "error_samples": d["error_samples"]}
            summary["roundtrip"][v] = row
            md.append(f"| {d['label']} | {len(ms)} | {fmt(row['p50_ms'])} "
                      f"| {fmt(row['p99_ms'])} | {fmt(row['mean_ms'])} "
                      f"| {', '.join(f'{x:.3g}' for x in d['round_p50_ms'])} "
                      f"| {d['errors']} |")
        md.append("")
        php = summary["roundtrip"].get("ptyhub", {}).get("p50_ms")
        ctl = summary["roundtrip"].get("tmux_ctl", {}).get("p50_ms")
        poll = summary["roundtrip"].get("tmux_poll", {}).get("p50_ms")
        bare = summary["roundtrip"].get("bare", {}).get("p50_ms")
        summary["roundtrip"]["ratios"] = {
            "ptyhub_over_bare_p50": ratio(php, bare),
            "ptyhub_over_tmux_ctl_p50": ratio(php, ctl),
            "ptyhub_over_tmux_poll_p50": ratio(php, poll),
        }
        md.append(f"p50 ratios: ptyhub/bare {fmt_ratio(ratio(php, bare))}, ptyhub/tmux control "
                  f"mode {fmt_ratio(ratio(php, ctl))}, ptyhub/tmux send-keys+capture-pane "
                  f"{fmt_ratio(ratio(php, poll))}.")
        for v, d in summary["roundtrip"].items():
            if isinstance(d, dict) and d.get("error_samples"):
                md.append(f"- {v} error samples: "
                          + "; ".join(f"`{x[:150]}`" for x in d["error_samples"][:3]))
        md.append("")
        r1 = ratio(php, ctl)
        r2 = ratio(php, poll)
        targets.append({"target": "round trip: ptyhub p50 ≤ tmux control-mode p50",
                        "value": r1, "met": None if r1 is None else r1 <= 1.0})
        targets.append({"target": "round trip: ptyhub p50 ≤ 0.1x tmux send-keys+capture-pane "
                                  "p50", "value": r2, "met": None if r2 is None else r2 <= 0.1})

    # ---- memory
    mem = R.get("memory") or {}
    if mem:
        ns = R.get("memory_ns") or []
        md.append(f"## (c) Memory per idle terminal ({a.mem_rounds} round(s), medians)")
        md.append("")
        md.append("PSS (and USS = private pages) from `/proc/PID/smaps_rollup` once every "
                  "terminal shows a prompt, CPU has settled, plus 1 s. *server Δ* = (server at "
                  "N − server with no terminal) / N. bare = N `bash -i` on PTYs held by the "
                  "harness (the floor: only the shells); tmux = one server, one `new-session -d` "
                  "call per session; ptyhub = one `POST /v2/pty/sessions` per terminal (holder "
                  "and shell pids from meta.json). *create/s* times only the create calls "
                  "(ptyhub's answer comes once the holder is ready; tmux and bare return after "
                  "the fork). PSS divides shared pages (libc, bash text) among all processes "
                  "mapping them, so the server's PSS can fall as shells are added; USS does not.")
        md.append("")
        md.append("| system | N | create/s | holder PSS | holder USS | shell PSS | server Δ PSS "
                  "| server Δ USS | overhead PSS | total PSS | server PSS |")
        md.append("|---|---|---|---|---|---|---|---|---|---|---|")
        for s, d in mem.items():
            rounds = d["rounds"]
            if not rounds:
                md.append(f"| {s} | – | failed | | | | | | | | |")
                continue
            summary["memory"][s] = {}
            for n in ns:
                pairs = [(rd["per_n"].get(n), rd) for rd in rounds if rd["per_n"].get(n)]
                if not pairs:
                    continue
                vals = [v for v, _ in pairs]

                def per_term(key, vals=vals, n=n):
                    xs = [v.get(key) for v in vals]
                    m_ = median(xs)
                    return None if m_ is None else m_ / n

                def delta(key, pairs=pairs, n=n):
                    xs = []
                    for v, rd in pairs:
                        base = rd.get(key.replace("server_", "server_base_"))
                        if v.get(key) is not None and base is not None:
                            xs.append((v[key] - base) / n)
                    return median(xs)

                is_srv = s != "bare"
                row = {
                    "n": n,
                    "create_per_s": median([v["new"] / v["create_s"] for v in vals
                                            if v["create_s"]]),
                    "holder_pss_kib_per_term": per_term("holder_pss_kib") or 0.0,
                    "holder_uss_kib_per_term": per_term("holder_uss_kib") or 0.0,
                    "shell_pss_kib_per_term": per_term("shell_pss_kib"),
                    "shell_uss_kib_per_term": per_term("shell_uss_kib"),
                    "server_delta_pss_kib_per_term": delta("server_pss_kib") if is_srv else 0.0,
                    "server_delta_uss_kib_per_term": delta("server_uss_kib") if is_srv else 0.0,
                    "server_pss_kib": median([v.get("server_pss_kib") for v in vals])
                    if is_srv else None,
                    "server_base_pss_kib": median([rd.get("server_base_pss_kib")
                                                   for _, rd in pairs]) if is_srv else None,
                    "found": {k: [v.get(k) for v in vals] for k in
                              ("found_holders", "found_shells") if k in vals[0]},
                    "raw": vals,
                }
                row["overhead_pss_kib_per_term"] = (row["holder_pss_kib_per_term"]
                                                    + (row["server_delta_pss_kib_per_term"]
                                                       or 0.0))
                row["total_pss_kib_per_term"] = sum(
                    x or 0.0 for x in (row["holder_pss_kib_per_term"],
                                       row["shell_pss_kib_per_term"],
                                       row["server_delta_pss_kib_per_term"]))
                if s == "ptyhub":
                    row["holder_pid_source"] = vals[0].get("holder_pid_source")
                summary["memory"][s][n] = row
                hub = s == "ptyhub"
                md.append(
                    f"| {s} | {n} | {fmt(row['create_per_s'])} "
                    f"| {fmt(row['holder_pss_kib_per_term']) if hub else '–'} "
                    f"| {fmt(row['holder_uss_kib_per_term']) if hub else '–'} "
                    f"| {fmt(row['shell_pss_kib_per_term'])} "
                    f"| {fmt(row['server_delta_pss_kib_per_term']) if is_srv else '–'} "
                    f"| {fmt(row['server_delta_uss_kib_per_term']) if is_srv else '–'} "
                    f"| {fmt(row['overhead_pss_kib_per_term']) if is_srv else '–'} "
                    f"| {fmt(row['total_pss_kib_per_term'])} "
                    f"| {fmt(row['server_pss_kib']) if is_srv else '–'} |")
                for k, v in row["found"].items():
                    if any(x != n for x in v):
                        md.append(f"| ⚠ {s} N={n}: {k} = {v} (expected {n}) | | | | | | | | | | |")
            if len(ns) >= 2 and ns[0] in summary["memory"][s] and ns[-1] in summary["memory"][s]:
                lo = summary["memory"][s][ns[0]]["raw"]
                hi = summary["memory"][s][ns[-1]]["raw"]
                dn = ns[-1] - ns[0]

                def marg(key, lo=lo, hi=hi, dn=dn):
                    return median([(y[key] - x[key]) / dn for x, y in zip(lo, hi)
                                   if x.get(key) is not None and y.get(key) is not None])
                mg = {k: marg(k) for k in ("holder_pss_kib", "holder_uss_kib", "shell_pss_kib",
                                           "server_pss_kib", "server_uss_kib")}
                mg["overhead_pss_kib"] = (mg["holder_pss_kib"] or 0.0) + (mg["server_pss_kib"]
                                                                          or 0.0)
                summary["memory"][s]["marginal"] = mg
        md.append("")
        md.append("All values KiB per terminal except *server PSS* (KiB, whole process). "
                  "*overhead* = holder + server Δ (what the system adds on top of the shell); "
                  "it is robust to shared pages (the ptyhub binary, libc) moving between the "
                  "server's and the holders' PSS as holders start, which the split columns "
                  "are not: a negative server Δ means the server's share of shared pages fell.")
        md.append("")
        margs = {s: v.get("marginal") for s, v in summary["memory"].items() if v.get("marginal")}
        if margs:
            md.append(f"Marginal cost of one more terminal between N={ns[0]} and N={ns[-1]} "
                      f"(KiB, medians over rounds):")
            md.append("")
            md.append("| system | holder PSS | holder USS | shell PSS | server PSS | server USS "
                      "| overhead PSS |")
            md.append("|---|---|---|---|---|---|---|")
            for s, v in margs.items():
                hub = s == "ptyhub"
                srv = s != "bare"
                md.append(f"| {s} | {fmt(v['holder_pss_kib']) if hub else '–'} "
                          f"| {fmt(v['holder_uss_kib']) if hub else '–'} "
                          f"| {fmt(v['shell_pss_kib'])} "
                          f"| {fmt(v['server_pss_kib']) if srv else '–'} "
                          f"| {fmt(v['server_uss_kib']) if srv else '–'} "
                          f"| {fmt(v['overhead_pss_kib']) if srv else '–'} |")
            md.append("")
        ph = summary["memory"].get("ptyhub") or {}
        tmux_mem = summary["memory"].get("tmux") or {}
        if ph and tmux_mem:
            md.append("ptyhub/tmux total PSS per terminal: " + ", ".join(
                f"N={n}: {fmt_ratio(ratio(ph[n]['total_pss_kib_per_term'], tmux_mem[n]['total_pss_kib_per_term']))}"
                for n in ns if n in ph and n in tmux_mem) + ".")
            md.append("")
        if "ptyhub" in mem:
            for n in ns:
                row = ph.get(n) or {}
                h = row.get("holder_pss_kib_per_term")
                sd = row.get("server_delta_pss_kib_per_term")
                targets.append({"target": f"memory N={n}: holder ≤ 300 KiB PSS per terminal",
                                "value": h, "met": None if h is None else h <= 300})
                targets.append({"target": f"memory N={n}: server ≤ 1 MiB PSS per terminal",
                                "value": sd, "met": None if sd is None else sd <= 1024})

    # ---- live fan-out
    fo = R.get("fanout") or {}
    if fo:
        ws = R.get("fanout_watchers") or []
        f = R.get("fanout_file") or {}
        first_hub = next((v for v in fo if v.startswith("ptyhub_")), None)
        labels = {"ptyhub_ws": "ptyhub, WebSocket watchers", "ptyhub_cli":
                  "ptyhub, `terminal watch` processes", "tmux": "tmux, `attach -r` clients"}
        md.append(f"## (d) Live fan-out: `cat` of a {a.fanout_mb:g} MB mixed file with W "
                  f"watchers ({a.rounds} rounds, medians)")
        md.append("")
        md.append(
            f"The producer `cat FILE && {FANOUT_END_CMD}` ({fmt(f.get('bytes', 0) / 1e6, 3)} MB "
            f"of the same kind of mixed ANSI/UTF-8 text as (a); "
            f"{fmt(R.get('fanout_expected_bytes', 0) / 1e6, 3)} MB out of the PTY) runs in a "
            f"200x50 terminal with W watchers attached and live before it starts. Time = "
            f"from starting the producer until it is done: ptyhub `POST …/exec` answered "
            f"`completed` (every byte logged and screen-emulated; watchers are fed from memory "
            f"or the log and never hold the PTY back); tmux: the producer's own `tmux wait-for -S` "
            f"after its last line (one tmux client start, a few ms; the pane then stays alive: "
            f"a pane that dies while tmux is behind loses the output not yet read, seen with "
            f"10 clients). *last watcher* "
            f"= until the last watcher had the end marker. Watchers: *WebSocket* = one Python "
            f"process (bench/live_client.py) multiplexing W `mode=watch&protocol=binary` "
            f"connections on the local socket; *terminal watch* = W `ptyhub terminal watch T` "
            f"processes (stdin /dev/null) whose stdout that process drains; tmux = W "
            f"`tmux attach -r` clients, each on its own 200x51 PTY drained the same way. "
            f"Every ptyhub watcher is checked: the end marker arrived, no error frame, equal "
            f"byte counts ≥ the producer's output, and the first and last watcher's streams "
            f"hold the producer's bytes contiguously; a run failing a check counts as an error, "
            f"not a time. tmux clients get screen updates, not the byte stream: each must have "
            f"drawn the marker line. *×alone* = time(W) / time(W=0) of the same system.")
        md.append("")
        head = ["W"]
        for v in fo:
            head += [f"{labels.get(v, v)} s", "×alone"]
            if v != "tmux":
                head += ["last watcher s", "lagged watchers (median, max)"]
        hubs = [v for v in fo if v != "tmux"]
        if "tmux" in fo:
            head += [f"{v.split('_', 1)[1]}/tmux time" for v in hubs]
        md.append("| " + " | ".join(head) + " |")
        md.append("|" + "---|" * len(head))
        summary["fanout"] = {"watchers": ws, "per_system": {}}
        alone = {}
        for v in fo:
            a0 = fo[v].get(0) or fo[v].get("0")
            if a0 is None and first_hub and v.startswith("ptyhub_"):
                a0 = fo[first_hub].get(0)
            alone[v] = median(a0["seconds"]) if a0 else None
        for w in ws:
            row = [str(w)]
            meds = {}
            for v in fo:
                d = fo[v].get(w)
                if d is None and w == 0 and v.startswith("ptyhub_") and first_hub:
                    d = fo[first_hub].get(0)
                if d is None:
                    row += ["–", "–"] + (["–", "–"] if v != "tmux" else [])
                    continue
                med = median(d["seconds"])
                meds[v] = med
                runs = d["runs"]
                last = median([x.get("last_watcher_s") for x in runs])
                lagged = median([x.get("lagged_watchers") for x in runs])
                lagged_max = max([x.get("lagged_watchers") or 0 for x in runs], default=None)
                cpu = {}
                for x in runs:
                    for k, c in x["cpu_s"].items():
                        cpu.setdefault(k, []).append(c)
                cpu = {k: median(c) for k, c in cpu.items()}
                cpu["machine_busy"] = median([x.get("machine_busy_s") for x in runs])
                cpu["machine_all"] = median([x.get("machine_all_s") for x in runs])
                slow = ratio(med, alone.get(v))
                summary["fanout"]["per_system"].setdefault(v, {})[w] = {
                    "median_s": med, "x_alone": slow, "rounds_s": d["seconds"],
                    "errors": d["errors"], "last_watcher_median_s": last,
                    "lagged_watchers_median": lagged, "lagged_watchers_max": lagged_max,
                    "median_cpu_s": cpu,
                    "pane_size": runs[0].get("pane_size") if runs else None}
                row += [fmt(med), fmt_ratio(slow)]
                if v != "tmux":
                    row += [fmt(last) if w else "–",
                            f"{fmt(lagged)}, {fmt(lagged_max)}" if w else "–"]
                if d["errors"]:
                    row[-2 if v == "tmux" else -4] += f" ({d['errors']} failed)"
            if "tmux" in fo:
                row += [fmt_ratio(ratio(meds.get(v), meds.get("tmux"))) for v in hubs]
            md.append("| " + " | ".join(row) + " |")
        md.append("")
        md.append("CPU seconds during the timed run (medians). ptyhub: *producer* = the shell "
                  "with the `cat` it reaped; *watchers* = the watcher process plus any "
                  "`terminal watch` processes. tmux: *watchers* = the draining process plus the "
                  "`attach -r` clients (the producer's CPU is not visible there). *machine* = "
                  "busy CPU of the whole machine (shared with other work) out of the wall time "
                  "× CPUs.")
        md.append("")
        md.append("| system | W | wall s | server | holder | producer | watchers | accounted "
                  "| machine busy / all |")
        md.append("|---|---|---|---|---|---|---|---|---|")
        for v, per in summary["fanout"]["per_system"].items():
            for w, row in per.items():
                if w == 0 and v != first_hub and v != "tmux":
                    continue  # the same runs as the first ptyhub row's W=0
                c = row["median_cpu_s"]
                acc = sum(c.get(k) or 0.0 for k in ("server", "holder", "producer", "watchers"))
                md.append(f"| {v} | {w} | {fmt(row['median_s'])} | {fmt(c.get('server'))} "
                          f"| {fmt(c.get('holder'))} | {fmt(c.get('producer'))} "
                          f"| {fmt(c.get('watchers'))} | {fmt(acc)} "
                          f"| {fmt(c.get('machine_busy'))} / {fmt(c.get('machine_all'))} |")
        md.append("")
        md.append("Per-round seconds (in round order):")
        md.append("")
        for v in fo:
            for w in ws:
                d = fo[v].get(w)
                if d is None:
                    continue
                vals = ", ".join(
                    f"{x['seconds']:.3f}" + (f" ({x['lagged_watchers']} lagged, server "
                                             f"{x['cpu_s'].get('server', 0):.2f} CPU-s)"
                                             if x.get("lagged_watchers") else "")
                    for x in d["runs"]) or "none"
                md.append(f"- {v} W={w}: {vals}" + (f" ({d['errors']} failed)"
                                                   if d["errors"] else ""))
        md.append("")
        md.append("A watcher that falls more than 128 events behind the live broadcast is told it "
                  "`lagged` and reads on from the event log; such runs are marked above with the "
                  "server's CPU, since that path costs far more than fan-out from memory.")
        md.append("")
        top = max(ws) if ws else None
        tmux_slow = (summary["fanout"]["per_system"].get("tmux", {}).get(top) or {}).get("x_alone")
        for v in hubs:
            row = summary["fanout"]["per_system"].get(v, {}).get(top) or {}
            x = row.get("x_alone")
            targets.append({"target": f"fan-out ({labels.get(v, v)}): producer with {top} "
                                      f"watchers ≤ 2x alone", "value": x,
                            "met": None if x is None else x <= 2.0})
        if tmux_slow is not None:
            md.append(f"tmux with {top} clients: {fmt_ratio(tmux_slow)} its time alone.")
            md.append("")
        ncpu = run.meta["machine"]["cpus"] or 1
        for v in hubs:
            per = summary["fanout"]["per_system"].get(v, {})
            hi, lo = per.get(top) or {}, per.get(0) or {}
            if not hi or not lo or hi.get("x_alone") is None or hi["x_alone"] <= 2.0:
                continue
            c, c0 = hi["median_cpu_s"], lo["median_cpu_s"]
            extra = (c.get("server") or 0) - (c0.get("server") or 0) + (c.get("watchers") or 0)
            md.append(
                f"Why {labels.get(v, v)} misses 2x at W={top} (CPU from /proc, medians): the "
                f"run took {fmt(hi['median_s'])} s against {fmt(lo['median_s'])} s alone; the "
                f"server used {fmt(c.get('server'))} CPU-s (alone {fmt(c0.get('server'))}), the "
                f"watchers {fmt(c.get('watchers'))}, holder + producer "
                f"{fmt((c.get('holder') or 0) + (c.get('producer') or 0))} (alone "
                f"{fmt((c0.get('holder') or 0) + (c0.get('producer') or 0))}); the fan-out's "
                f"extra CPU (the server's increase + the watchers) is {fmt(extra)} CPU-s, "
                f"{fmt(extra / ncpu)} s of all {ncpu} CPUs, against {fmt(lo['median_s'])} s "
                f"of slack that 2x alone allows.")
            busy, total = c.get("machine_busy"), c.get("machine_all")
            if busy is not None and total and busy >= 0.9 * total:
                md[-1] += f" The machine was busy {fmt(busy)} of {fmt(total)} CPU-s (other " \
                          f"work included): the run is CPU-bound"
                if extra / ncpu >= 0.5 * lo["median_s"]:
                    md[-1] += (", the fan-out's own CPU is the bulk of the extra time, and the "
                               "producer's path (holder, the server's actor and screen thread) "
                               "waits for CPU behind it.")
                else:
                    md[-1] += (", but the fan-out's own CPU is a small part of the extra time: "
                               "other work on the machine took the rest.")
            else:
                md[-1] += (f" The machine was busy only {fmt(busy)} of {fmt(total)} CPU-s: "
                           f"CPU alone does not explain this slowdown.")
            md.append("")

    # ---- replay
    rp = R.get("replay") or {}
    if rp.get("runs"):
        asked = rp.get("replay_bytes_asked")
        f = R.get("replay_file") or {}
        md.append(f"## (e) Replay: `mode=watch&restore=true&replay_bytes={asked}`")
        md.append("")
        md.append(f"One terminal that printed a {fmt(f.get('bytes', 0) / 1e6, 3)} MB mixed file "
                  f"(`cat`, via exec); then, one after another, watchers connect over TCP "
                  f"(bearer token), alternating JSON and binary transport. Time = from before "
                  f"the TCP connect until the `terminal_restored` frame has arrived (handshake "
                  f"and reading every replay frame included; JSON frames are decoded only after "
                  f"the clock stops). *replayed* = output bytes in the replay frames (JSON: the "
                  f"UTF-8 of `data`); *wire* = bytes received; *client CPU* = this Python "
                  f"client's CPU during the timed part.")
        md.append("")
        md.append("| transport | runs | median ms | min ms | max ms | ready ms | first output ms "
                  "| replayed MiB | wire MiB | client CPU ms |")
        md.append("|---|---|---|---|---|---|---|---|---|---|")
        summary["replay"] = {}
        for t, runs in rp["runs"].items():
            if not runs:
                md.append(f"| {t} | 0 | failed | | | | | | | |")
                continue

            def med(k, runs=runs):
                return median([r[k] for r in runs if r.get(k) is not None])
            row = {"runs": len(runs), "median_ms": med("seconds") * 1000,
                   "min_ms": min(r["seconds"] for r in runs) * 1000,
                   "max_ms": max(r["seconds"] for r in runs) * 1000,
                   "ready_ms": (med("ready_s") or 0) * 1000,
                   "first_output_ms": (med("first_output_s") or 0) * 1000,
                   "replayed_bytes": [min(r["replayed_bytes"] for r in runs),
                                      max(r["replayed_bytes"] for r in runs)],
                   "wire_bytes": med("wire_bytes"), "client_cpu_ms": med("client_cpu_s") * 1000,
                   "rounds_ms": [r["seconds"] * 1000 for r in runs]}
            summary["replay"][t] = row
            md.append(f"| {t} | {len(runs)} | {fmt(row['median_ms'])} | {fmt(row['min_ms'])} "
                      f"| {fmt(row['max_ms'])} | {fmt(row['ready_ms'])} "
                      f"| {fmt(row['first_output_ms'])} "
                      f"| {fmt(row['replayed_bytes'][0] / 1048576, 4)}"
                      f"{'' if row['replayed_bytes'][0] == row['replayed_bytes'][1] else '…' + fmt(row['replayed_bytes'][1] / 1048576, 4)} "
                      f"| {fmt(row['wire_bytes'] / 1048576)} | {fmt(row['client_cpu_ms'])} |")
            targets.append({"target": f"replay ({t}): {asked} bytes restored in < 100 ms "
                                      f"(median)", "value": row["median_ms"],
                            "shown": f"{row['median_ms']:.1f} ms",
                            "met": row["median_ms"] < 100})
            lo, hi = row["replayed_bytes"]
            ok = lo >= asked - 512 * 1024 and hi <= asked
            targets.append({"target": f"replay ({t}): replayed bytes within [asked − 512 KiB, "
                                      f"asked]", "value": lo, "shown": f"{lo}…{hi} bytes",
                            "met": ok})
        md.append("")
        md.append("Per-run ms: " + "; ".join(
            f"{t}: " + ", ".join(f"{x:.1f}" for x in row["rounds_ms"])
            for t, row in summary["replay"].items()) + ".")
        md.append("")

    # ---- targets
    md.append("## Targets")
    md.append("")
    md.append("| target | measured | result |")
    md.append("|---|---|---|")
    for t in targets:
        v = t["value"]
        if t.get("shown"):
            shown = t["shown"]
        elif v is None:
            shown = "n/a"
        elif "memory" in t["target"]:
            shown = f"{v:.1f} KiB"
        else:
            shown = fmt_ratio(v)
        md.append(f"| {t['target']} | {shown} | {verdict(t['met'])} |")
    md.append("")
    md.append("Throughput ratios are time(other)/time(ptyhub) (higher is better for ptyhub); "
              "round-trip ratios are p50(ptyhub)/p50(other) (lower is better).")
    md.append("")

    if run.errors:
        md.append("## Errors")
        md.append("")
        for e in run.errors:
            md.append(f"- {e['system']} / {e['workload']}"
                      + (f" / round {e['round']}" if e["round"] else "")
                      + f": `{e['error'][:400]}`")
        md.append("")
    return summary, "\n".join(md)


# --------------------------------------------------------------------------------------------

def parse_args(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--quick", action="store_true",
                   help="2 rounds, 50 round-trip ops, memory at N=20 and 50")
    p.add_argument("--ptyhub", help="ptyhub binary (default $PTYHUB_BIN, "
                   "$CARGO_TARGET_DIR/release/ptyhub, target/release/ptyhub)")
    p.add_argument("--build", action="store_true",
                   help="run `cargo build --release -p ptyhub` first (default: only if missing)")
    p.add_argument("--rounds", type=int, help="rounds (default 5, quick 2)")
    p.add_argument("--ops", type=int, help="round-trip ops per round (default 200, quick 50)")
    p.add_argument("--warmup-ops", type=int, default=5)
    p.add_argument("--mem-n", type=int, nargs="+",
                   help="terminal counts for memory (default 100 500, quick 20 50)")
    p.add_argument("--mem-rounds", type=int, help="memory rounds (default 3, quick 1)")
    p.add_argument("--seq-n", type=int, default=3_000_000)
    p.add_argument("--cat-mb", type=float, default=100.0, help="size of the mixed file in MB")
    p.add_argument("--fanout-watchers", type=int, nargs="+",
                   help="watcher counts for fanout (default 0 1 10 50 100, quick 0 1 10)")
    p.add_argument("--fanout-mb", type=float, default=10.0,
                   help="size of the fan-out producer's file in MB (a mixed file like cat's)")
    p.add_argument("--fanout-clients", nargs="+", choices=("ws", "cli"), default=["ws", "cli"],
                   help="ptyhub watchers: ws = one process multiplexing WebSockets, cli = "
                        "`ptyhub terminal watch` processes")
    p.add_argument("--replay-runs", type=int, help="replays per transport (default 10, quick 3)")
    p.add_argument("--replay-mb", type=float, default=16.0,
                   help="output of the replayed terminal in MB (at least the replay)")
    p.add_argument("--replay-bytes", type=int, default=10 * 1024 * 1024)
    p.add_argument("--workloads", "--only", nargs="+", choices=WORKLOADS, default=list(WORKLOADS),
                   help="run only some workloads (e.g. --only fanout replay)")
    p.add_argument("--systems", nargs="+", choices=SYSTEMS, default=list(SYSTEMS))
    p.add_argument("--out", help="results directory (default bench/results next to this script)")
    p.add_argument("--keep-tmp", action="store_true", help="keep temp dirs (debugging)")
    a = p.parse_args(argv)
    a.rounds = a.rounds or (2 if a.quick else 5)
    a.ops = a.ops or (50 if a.quick else 200)
    a.mem_n = a.mem_n or ([20, 50] if a.quick else [100, 500])
    a.mem_rounds = a.mem_rounds or (1 if a.quick else 3)
    a.fanout_watchers = a.fanout_watchers or ([0, 1, 10] if a.quick else [0, 1, 10, 50, 100])
    a.replay_runs = a.replay_runs or (3 if a.quick else 10)
    return a


def main(argv=None) -> int:
    a = parse_args(argv)
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    want = min(hard, max(soft, 4 * max(a.mem_n) + 256))
    if want > soft:
        resource.setrlimit(resource.RLIMIT_NOFILE, (want, hard))

    def on_term(signum, frame):
        raise KeyboardInterrupt(f"signal {signum}")
    signal.signal(signal.SIGTERM, on_term)
    signal.signal(signal.SIGHUP, on_term)

    run = Run(a)
    try:
        run.run()
    except KeyboardInterrupt:
        log("interrupted; cleaning up")
        return 130
    finally:
        run.env.cleanup()
    summary, md = summarize(run)
    out_dir = Path(a.out) if a.out else HERE / "results"
    out_dir.mkdir(parents=True, exist_ok=True)
    stamp = datetime.now(timezone.utc).strftime("%Y%m%dT%H%M%SZ")
    doc = {"meta": run.meta, "summary": summary, "raw": run.results, "errors": run.errors}
    (out_dir / f"{stamp}.json").write_text(json.dumps(scrub(doc), indent=1, default=str) + "\n")
    md = scrub(md)
    (out_dir / f"{stamp}.md").write_text(md + "\n")
    print(md)
    try:
        shown = (out_dir / f"{stamp}.md").resolve().relative_to(Path.cwd())
    except ValueError:
        shown = out_dir / f"{stamp}.md"
    log(f"wrote {shown} and .json")
    return 0


if __name__ == "__main__":
    sys.exit(main())
