"""Fan-out watchers: the process that drains every watcher stream, and the checks that each
watcher got the whole output."""

from __future__ import annotations

import fcntl
import json
import os
import select
import signal
import statistics
import subprocess
import sys
import time
from pathlib import Path

from common import BenchError, Env, HERE, kill_pid


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
