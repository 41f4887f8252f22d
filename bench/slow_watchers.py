#!/usr/bin/env python3
"""What slow watchers cost the server (docs/websocket.md, *Slow connections*), and whether a
stalled one slows the producer (issue 10: the per-connection budget and L4).

For each configuration, a fresh `ptyhub serve` gets one terminal and N live connections
(`mode=watch`, TCP, the JSON transport by default) that read at a fixed rate (10 KB/s by
default) or not at all, then a flood runs through exec (`seq 1 N`, ~21 MB by default). The
harness samples the server's RSS every 50 ms and reads its PSS before and after; the producer's
time is exec's wall time. Once the flood is over, every watcher reads at full speed and must get
every line of the flood exactly once, in order (it resumes exactly).

    python3 bench/slow_watchers.py                      # N = 0 1 4, trickling at 10 KB/s
    python3 bench/slow_watchers.py --ptyhub before=PATH --ptyhub after=PATH
    python3 bench/slow_watchers.py --rate 0             # watchers that never read (L4)

The report goes to bench/results/<UTC timestamp>-slow-watchers.md (and .json) unless `--out`
says otherwise. Standard library only; it uses the harness's WebSocket client
(`live_client.py`) and its ptyhub driver (`ptyhub_system.py`).
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import socket
import sys
import threading
import time
from pathlib import Path

import live_client
from common import REPO, Env, log, read_pss, wait_cpu_settled
from ptyhub_system import Ptyhub, resolve_builds, write_results

PAGE = 4096


def rss_kib(pid: int) -> int:
    try:
        with open(f"/proc/{pid}/status") as f:
            for line in f:
                if line.startswith("VmRSS:"):
                    return int(line.split()[1])
    except OSError:
        pass
    return 0


class Sampler:
    """Samples a process's RSS every 50 ms in a thread; `peak` is the highest seen."""

    def __init__(self, pid: int):
        self.pid = pid
        self.peak = rss_kib(pid)
        self.stop_flag = threading.Event()
        self.thread = threading.Thread(target=self._run, daemon=True)
        self.thread.start()

    def _run(self):
        while not self.stop_flag.wait(0.05):
            self.peak = max(self.peak, rss_kib(self.pid))

    def stop(self) -> int:
        self.stop_flag.set()
        self.thread.join()
        return self.peak


class Watcher:
    """One live connection read by a thread at `rate` bytes a second (0: not at all) until
    `full_speed` is set; keeps every output byte it parsed."""

    def __init__(self, hub: Ptyhub, sid: str, transport: str, rate: int):
        query = f"mode=watch&protocol={transport}"
        self.sock, rest = live_client.connect(f"/v2/pty/sessions/{sid}/ws?{query}",
                                              tcp=(hub.host, hub.port), token=hub.token)
        # A small receive buffer: what the client's kernel holds is not what is measured, and
        # a slow reader should be slow from the start.
        self.sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 64 * 1024)
        self.transport = transport
        self.rate = rate
        self.data = bytearray()
        self.texts: list[bytes] = []
        self.parser = live_client.FrameParser(self.data.extend)
        self.full_speed = threading.Event()
        self.done = threading.Event()
        self.marker = b""
        self.error = None
        self._feed(rest)
        self.thread = threading.Thread(target=self._run, daemon=True)
        self.thread.start()

    def _feed(self, chunk: bytes):
        for op, payload in self.parser.feed(chunk):
            if op == live_client.OP_TEXT:
                if self.transport == "json":
                    frame = json.loads(payload)
                    if frame.get("type") in ("output", "restore_output"):
                        self.data.extend(frame["data"].encode())
                        continue
                self.texts.append(payload[:200])
            elif op == live_client.OP_PING:
                live_client.send_frame(self.sock, live_client.OP_PONG, payload)
            elif op == live_client.OP_CLOSE:
                self.done.set()

    def _run(self):
        try:
            last_ping = time.monotonic()
            while not self.done.is_set():
                if self.marker and self.marker in self.data[-4096:]:
                    break
                if not self.full_speed.is_set():
                    if self.rate == 0:
                        self.full_speed.wait(1.0)
                        continue
                    # 1 KiB at a time, paced to the rate.
                    self.sock.settimeout(5)
                    try:
                        chunk = self.sock.recv(1024)
                    except socket.timeout:
                        chunk = None
                    if chunk == b"":
                        break
                    if chunk:
                        self._feed(chunk)
                    time.sleep(1024 / self.rate)
                else:
                    self.sock.settimeout(30)
                    chunk = self.sock.recv(256 * 1024)
                    if not chunk:
                        break
                    self._feed(chunk)
                if time.monotonic() - last_ping > 20:
                    # The server closes a connection it has heard nothing from for 90 s.
                    live_client.send_frame(self.sock, live_client.OP_PING, b"")
                    last_ping = time.monotonic()
        except Exception as e:  # reported, not raised: the harness checks the bytes
            self.error = repr(e)
        self.done.set()

    def finish(self, marker: bytes, timeout: float) -> None:
        self.marker = marker
        self.full_speed.set()
        self.done.wait(timeout)

    def close(self):
        try:
            self.sock.close()
        except OSError:
            pass


def check_lines(data: bytes, n: int) -> str | None:
    """None when `data` holds the lines 1..n of `seq 1 n` once each, in order."""
    start = data.find(b"1\r\n2\r\n3\r\n")
    if start < 0:
        return "the flood's first lines are missing"
    expected = 1
    for line in data[start:].split(b"\r\n"):
        if expected > n:
            break
        if line != str(expected).encode():
            return f"line {expected} is {line[:40]!r}"
        expected += 1
    return None if expected == n + 1 else f"only {expected - 1} of {n} lines"


def run_one(env: Env, binary: Path, label: str, watchers: int, args) -> dict:
    hub = Ptyhub(env, binary, f"{label}-w{watchers}")
    try:
        sid = hub.create((200, 50))
        hub.wait_prompt(sid)
        hub.exec(sid, "true")
        conns = [Watcher(hub, sid, args.transport, args.rate) for _ in range(watchers)]
        time.sleep(1.0)
        pid = hub.proc.pid
        base_rss = rss_kib(pid)
        base_pss = (read_pss(pid) or (0, 0, 0))[0]
        sampler = Sampler(pid)
        elapsed, doc, status = hub.exec(sid, f"seq 1 {args.seq_n}", truncate=True, timeout=600)
        # The server goes on working after exec answered (its screen catches up later).
        wait_cpu_settled(lambda: [pid], max_wait=60)
        peak = sampler.stop()
        after_rss = rss_kib(pid)
        after_pss = (read_pss(pid) or (0, 0, 0))[0]
        data = doc.get("data") or {}
        if status != 200 or data.get("exit_code") != 0:
            raise RuntimeError(f"exec: HTTP {status} {json.dumps(doc)[:300]}")
        # Every watcher now reads at full speed up to a marker typed after the flood.
        hub.exec(sid, "echo slow-watchers-$((6 * 7))-end")
        checks = []
        for conn in conns:
            conn.finish(b"slow-watchers-42-end\r\n", args.catch_up_timeout)
            problem = conn.error or check_lines(bytes(conn.data), args.seq_n)
            lagged = sum(1 for t in conn.texts if b'"lagged"' in t)
            errors = [t.decode(errors="replace") for t in conn.texts if b'"error"' in t]
            checks.append({"exact": problem is None, "problem": problem, "lagged": lagged,
                           "errors": errors[:2]})
            conn.close()
        return {
            "binary": label, "watchers": watchers, "rate": args.rate,
            "transport": args.transport, "seq_n": args.seq_n,
            "producer_s": round(elapsed, 3),
            "rss_before_kib": base_rss, "rss_peak_kib": peak, "rss_after_kib": after_rss,
            "pss_before_kib": base_pss, "pss_after_kib": after_pss,
            "peak_delta_kib": peak - base_rss,
            "watchers_exact": all(c["exact"] for c in checks), "checks": checks,
        }
    finally:
        hub.stop()


def report(results: list[dict], args, notes: list[str]) -> str:
    lines = [
        "# Slow watchers: server memory and producer time",
        "",
        f"- flood: `seq 1 {args.seq_n}` through exec; watchers `mode=watch` over TCP, "
        f"`protocol={args.transport}`, reading at "
        + (f"{args.rate} B/s" if args.rate else "0 B/s (never, until the flood is over)"),
        f"- machine: {platform.machine()}, {os.cpu_count()} cores, {platform.release()}; "
        "a shared machine (other builds may run beside it)",
        "- RSS sampled every 50 ms from the flood's start until the server's CPU is quiet "
        "(it goes on after exec answers); *peak delta* = that peak − RSS before the flood (after "
        "the watchers connected); *per watcher* = (peak delta − the same binary's peak delta "
        "with 0 watchers) / N (the first watcher that falls behind also brings the "
        "terminal's live buffer (16 MiB at most, 8 before 2026-12-05), "
        "shared by all its connections); *after* = once quiet, before the watchers catch up",
        *[f"- {n}" for n in notes],
        "",
        "| binary | watchers | producer s | RSS before MiB | peak MiB | peak delta MiB | "
        "per watcher MiB | RSS after MiB | PSS after MiB | lagged | resumed exactly |",
        "|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    zero = {r["binary"]: r["peak_delta_kib"] for r in results if r["watchers"] == 0}
    for r in results:
        per = "–"
        if r["watchers"] and r["binary"] in zero:
            per = f"{(r['peak_delta_kib'] - zero[r['binary']]) / r['watchers'] / 1024:.1f}"
        exact = "yes" if r["watchers_exact"] else "NO: " + "; ".join(
            str(c["problem"]) for c in r["checks"] if not c["exact"])[:120]
        if not r["watchers"]:
            exact = "–"
        lines.append(
            f"| {r['binary']} | {r['watchers']} | {r['producer_s']:.2f} | "
            f"{r['rss_before_kib'] / 1024:.1f} | {r['rss_peak_kib'] / 1024:.1f} | "
            f"{r['peak_delta_kib'] / 1024:.1f} | {per} | {r['rss_after_kib'] / 1024:.1f} | "
            f"{r['pss_after_kib'] / 1024:.1f} | "
            f"{sum(1 for c in r['checks'] if c['lagged'])}/{r['watchers']} | {exact} |")
    return "\n".join(lines) + "\n"


def main(argv: list[str]) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--ptyhub", action="append", default=[],
                    help="LABEL=PATH of a binary to measure (repeatable); default: the release build")
    ap.add_argument("--watchers", type=int, nargs="+", default=[0, 1, 4])
    ap.add_argument("--rate", type=int, default=10_000, help="bytes a second each watcher reads (0: none)")
    ap.add_argument("--transport", choices=("json", "binary"), default="json")
    ap.add_argument("--seq-n", type=int, default=3_000_000)
    ap.add_argument("--rounds", type=int, default=1)
    ap.add_argument("--catch-up-timeout", type=float, default=300)
    ap.add_argument("--out", default=str(REPO / "bench" / "results"))
    args = ap.parse_args(argv)
    binaries, notes = resolve_builds(args.ptyhub)
    env = Env(keep=False)
    results = []
    try:
        for _ in range(args.rounds):
            for label, binary in binaries:
                for w in args.watchers:
                    log(f"{label}: {w} watchers")
                    r = run_one(env, binary, label, w, args)
                    log(f"  producer {r['producer_s']:.2f} s, peak delta "
                        f"{r['peak_delta_kib'] / 1024:.1f} MiB, exact {r['watchers_exact']}")
                    results.append(r)
    finally:
        env.cleanup()
    md = report(results, args, notes)
    # Labels and file names only: no path of this machine goes into the results.
    shown = dict(vars(args), ptyhub=[label for label, _ in binaries], out=None)
    write_results(args.out, "slow-watchers", md,
                  {"args": shown, "notes": notes, "results": results})
    print(md)
    return 0 if all(r["watchers_exact"] or not r["watchers"] for r in results) else 1


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
