"""Shared pieces of the benchmark: logging, statistics, /proc readings, the run environment
(temporary dirs, cleanup), gates, and the generated mixed ANSI/UTF-8 file."""

from __future__ import annotations

import errno
import fcntl
import hashlib
import math
import os
import random
import shlex
import shutil
import signal
import statistics
import sys
import tempfile
import time
from pathlib import Path


HERE = Path(__file__).resolve().parent
REPO = HERE.parent

SYSTEMS = ("bare", "tmux", "ptyhub")
CLK_TCK = os.sysconf("SC_CLK_TCK")
WORKLOADS = ("throughput", "roundtrip", "memory", "create", "fanout", "replay", "history")

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


def proc_state(pid: int | None) -> str | None:
    """The process's state letter from /proc/PID/stat (`Z` for a zombie); None once it is gone."""
    if not pid:
        return None
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0]
    except (OSError, IndexError):
        return None


def proc_alive(pid: int | None) -> bool:
    return proc_state(pid) not in (None, "Z")


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


def cpu_ns_and_switches(pids) -> tuple[int, int]:
    """CPU time (ns, from each thread's schedstat: exact, not in 10 ms ticks) and context
    switches (voluntary and not) of the processes, summed over their threads."""
    ns = switches = 0
    for pid in pids:
        if not pid:
            continue
        try:
            tids = os.listdir(f"/proc/{pid}/task")
        except OSError:
            continue
        for tid in tids:
            try:
                with open(f"/proc/{pid}/task/{tid}/schedstat") as f:
                    ns += int(f.read().split()[0])
                with open(f"/proc/{pid}/task/{tid}/status") as f:
                    switches += sum(int(line.split()[1]) for line in f
                                    if "ctxt_switches" in line)
            except (OSError, IndexError, ValueError):
                pass
    return ns, switches


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


def is_zombie(pid: int | None) -> bool:
    """Whether the process has exited and waits to be reaped."""
    return proc_state(pid) == "Z"


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

    def use_shell(self, name: str) -> None:
        """Every system runs `name` (found on PATH) instead of bash, e.g. a POSIX `sh`; its
        `ENV` is unset above, so it reads no rc file of the machine either."""
        found = shutil.which(name)
        if not found:
            raise BenchError(f"no shell {name!r} on PATH")
        self.bash = found
        self.env["SHELL"] = found

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
