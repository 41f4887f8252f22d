#!/usr/bin/env python3
"""The server-memory benchmark: what terminals cost the server while they live, what a close
gives back, and whether repeated create→exec→close returns to a steady state.

Usage: python3 bench/memory.py [--ptyhub PATH] [--label NAME] [--flood-n 20] [--flood-mib 5]
       [--cycles 500] [--soak-secs 60] [--soak-n 10] [--workloads flood cycles soak]
       [--out DIR]

One fresh release server per workload (`ptyhub serve`, as bench/run.py starts it), driven over
REST v2; every figure is read from the server's /proc (smaps_rollup: Rss, Pss, Anonymous;
status: Threads; fd: descriptors) and from its terminals' meta.json (holders still running).

  flood   N terminals each print M MiB through exec (base64 lines of 76 characters, the
          common case of a build log), then a small exec in each (the last big command's
          text is let go), then every terminal is closed. Per-terminal cost = (server Rss
          with the N terminals open - baseline) / N.
  cycles  C create → exec (`echo hi`) → close cycles, one after the other; Rss, threads,
          fds and live holders at the baseline, every 100 cycles and at the end (after the
          idle reaper's trim, a few seconds later).
  soak    N terminals each run execs of 1 MiB of output back to back for S seconds; Rss
          sampled every few seconds (start, peak, end, growth over the second half).

Where the memory goes (which part of a terminal holds it) is measured in-process by the
example `crates/core/examples/memory_parts.rs` (a counting allocator around the VT screen, the
command tracker and the plain-text capture fed the same bytes), run with `--parts`; the server
figures here are its totals.

Writes bench/results/<UTC timestamp>-memory[-LABEL].md and .json and prints the Markdown.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import threading
import time
import urllib.parse
from datetime import datetime, timezone
from pathlib import Path

from common import HERE, REPO, SMALL, Env, log, proc_alive, scrub
from ptyhub_system import Ptyhub, ensure_binary, resolve_binary

WORKLOADS = ("flood", "cycles", "soak")


def server_facts(pid: int) -> dict:
    """Rss, Pss, Anonymous (KiB), threads and open descriptors of process `pid`."""
    facts: dict = {}
    with open(f"/proc/{pid}/smaps_rollup") as f:
        for line in f:
            key = line.split(":", 1)[0]
            if key in ("Rss", "Pss", "Anonymous"):
                facts[key.lower() + "_kib"] = int(line.split()[1])
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith("Threads:"):
                facts["threads"] = int(line.split()[1])
    facts["fds"] = len(os.listdir(f"/proc/{pid}/fd"))
    return facts


def live_holders(server: Ptyhub) -> int:
    return sum(1 for m in server.metas() if m.get("holder_pid") and proc_alive(m["holder_pid"])
               and not m.get("closed"))


def settle(server: Ptyhub, seconds: float = 1.0) -> dict:
    """Waits until the server is quiet (its screen thread caught up), then reads its facts."""
    from common import wait_cpu_settled
    wait_cpu_settled(lambda: [server.proc.pid], quiet_ticks=1, interval=0.5, max_wait=120)
    time.sleep(seconds)
    return server_facts(server.proc.pid)


def quote(sid: str) -> str:
    return urllib.parse.quote(sid)


def exec_ok(server: Ptyhub, sid: str, command: str, conn=None, **extra) -> dict:
    _, doc, status = server.exec(sid, command, conn=conn, timeout=600, **extra)
    data = doc.get("data") or {}
    if status >= 300 or data.get("status") != "completed" or data.get("exit_code") != 0:
        raise RuntimeError(f"exec {command!r} -> HTTP {status}: {json.dumps(doc)[:300]}")
    return data


def flood_command(mib: float) -> str:
    return f"head -c {int(mib * 1024 * 1024 * 3 / 4)} /dev/urandom | base64"


def flood(server: Ptyhub, n: int, mib: float) -> dict:
    out = {"n": n, "mib_each": mib}
    server.ok("GET", "/v2/pty/sessions")
    out["baseline"] = settle(server)
    ids = [server.create(SMALL) for _ in range(n)]
    for sid in ids:
        server.wait_prompt(sid, timeout=60)
    out["created"] = settle(server)
    t0 = time.perf_counter()
    # Two producers at a time, as an agent with a couple of builds would run them.
    errors: list[str] = []

    def produce(chunk: list[str]):
        conn = server._connect()  # one connection per producer
        try:
            for sid in chunk:
                try:
                    exec_ok(server, sid, flood_command(mib), conn=conn, truncate=True)
                except Exception as e:  # reported below; the run goes on
                    errors.append(str(e))
        finally:
            conn.close()

    threads = [threading.Thread(target=produce, args=(ids[i::2],)) for i in range(2)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    out["flood_s"] = time.perf_counter() - t0
    out["errors"] = errors[:3]
    out["flooded"] = settle(server, 2.0)
    # A screen is read once (a snapshot) so every screen has applied all of its output.
    for sid in ids:
        server.ok("GET", f"/v2/pty/sessions/{quote(sid)}/screen")
    out["flooded_read"] = settle(server, 1.0)
    for sid in ids:
        exec_ok(server, sid, "true")
    out["after_small_exec"] = settle(server, 2.0)
    for sid in ids:
        server.delete(sid)
    out["closed"] = settle(server, 2.0)
    time.sleep(5)
    out["closed_later"] = server_facts(server.proc.pid)
    out["live_holders_after"] = live_holders(server)
    base = out["baseline"]["rss_kib"]
    out["per_terminal_kib"] = (out["flooded_read"]["rss_kib"] - base) / n
    return out


def cycles(server: Ptyhub, count: int) -> dict:
    out = {"cycles": count, "samples": []}
    server.ok("GET", "/v2/pty/sessions")
    base = settle(server)
    base["holders"] = live_holders(server)
    out["baseline"] = base
    t0 = time.perf_counter()
    for i in range(1, count + 1):
        sid = server.create(SMALL)
        exec_ok(server, sid, "echo hi")
        server.delete(sid)
        if i % 100 == 0 or i == count:
            facts = server_facts(server.proc.pid)
            facts.update(cycle=i, holders=live_holders(server), s=time.perf_counter() - t0)
            out["samples"].append(facts)
            log(f"cycles: {i}: rss {facts['rss_kib']} KiB, threads {facts['threads']}, "
                f"fds {facts['fds']}")
    end = settle(server, 5.0)
    end["holders"] = live_holders(server)
    out["end"] = end
    out["rss_growth_pct"] = 100.0 * (end["rss_kib"] - base["rss_kib"]) / base["rss_kib"]
    return out


def soak(server: Ptyhub, n: int, secs: float) -> dict:
    out = {"n": n, "secs": secs, "samples": []}
    server.ok("GET", "/v2/pty/sessions")
    out["baseline"] = settle(server)
    ids = [server.create(SMALL) for _ in range(n)]
    for sid in ids:
        server.wait_prompt(sid, timeout=60)
    stop = time.monotonic() + secs
    counts = [0] * 2
    errors: list[str] = []

    def produce(k: int, chunk: list[str]):
        conn = server._connect()  # one connection per producer
        try:
            while time.monotonic() < stop:
                for sid in chunk:
                    _, doc, status = server.exec(sid, flood_command(1), conn=conn,
                                                 truncate=True, timeout=600)
                    if status >= 300 or (doc.get("data") or {}).get("status") != "completed":
                        errors.append(json.dumps(doc)[:200])
                    counts[k] += 1
        finally:
            conn.close()

    threads = [threading.Thread(target=produce, args=(k, ids[k::2])) for k in range(2)]
    t0 = time.monotonic()
    for t in threads:
        t.start()
    while any(t.is_alive() for t in threads):
        time.sleep(5)
        facts = server_facts(server.proc.pid)
        facts["s"] = round(time.monotonic() - t0, 1)
        out["samples"].append(facts)
    for t in threads:
        t.join()
    out["execs"] = sum(counts)
    out["errors"] = errors[:3]
    out["end_open"] = settle(server, 2.0)
    for sid in ids:
        server.delete(sid)
    out["closed"] = settle(server, 5.0)
    rss = [s["rss_kib"] for s in out["samples"]]
    if rss:
        half = rss[len(rss) // 2:]
        out["peak_rss_kib"] = max(rss)
        out["second_half_growth_kib"] = half[-1] - half[0]
    return out


def parts(mib: float) -> dict | None:
    """Runs the in-process breakdown (crates/core/examples/memory_parts.rs)."""
    r = subprocess.run(["cargo", "run", "-q", "-p", "ptyhub-core", "--example",
                        "memory_parts", "--", str(mib)], cwd=REPO, capture_output=True, text=True)
    if r.returncode != 0:
        log(f"memory_parts failed: {r.stderr[-500:]}")
        return None
    return json.loads(r.stdout)


def mib(kib) -> str:
    return f"{kib / 1024:.1f}"


def report(results: dict, meta: dict) -> str:
    out = [f"# Server memory — {meta['when']}{' — ' + meta['label'] if meta['label'] else ''}",
           "", f"Commit {meta['commit']}; {meta['machine']}; binary {meta['binary']}.", ""]
    f = results.get("flood")
    if f:
        out += [f"## Flood: {f['n']} terminals × {f['mib_each']} MiB of output "
                f"({f['flood_s']:.1f} s)", "",
                "| moment | server Rss MiB | Pss MiB | Anonymous MiB | threads | fds |",
                "|---|---|---|---|---|---|"]
        for key, label in (("baseline", "baseline"), ("created", f"{f['n']} terminals idle"),
                           ("flooded", "after the floods"),
                           ("flooded_read", "after a snapshot of each"),
                           ("after_small_exec", "after one small exec in each"),
                           ("closed", "all closed"), ("closed_later", "closed, 5 s later")):
            s = f[key]
            out.append(f"| {label} | {mib(s['rss_kib'])} | {mib(s['pss_kib'])} | "
                       f"{mib(s['anonymous_kib'])} | {s['threads']} | {s['fds']} |")
        out += ["", f"Per terminal while open: {f['per_terminal_kib'] / 1024:.2f} MiB "
                f"(Rss with every screen read, minus the baseline, / {f['n']}). "
                f"Holders still running after the closes: {f['live_holders_after']}."]
        if f["errors"]:
            out.append(f"Errors: {f['errors']}")
        out.append("")
    c = results.get("cycles")
    if c:
        b = c["baseline"]
        out += [f"## {c['cycles']} create → exec → close cycles", "",
                "| cycle | Rss MiB | Pss MiB | threads | fds | live holders |",
                "|---|---|---|---|---|---|",
                f"| baseline | {mib(b['rss_kib'])} | {mib(b['pss_kib'])} | {b['threads']} | "
                f"{b['fds']} | {b['holders']} |"]
        for s in c["samples"]:
            out.append(f"| {s['cycle']} | {mib(s['rss_kib'])} | {mib(s['pss_kib'])} | "
                       f"{s['threads']} | {s['fds']} | {s['holders']} |")
        e = c["end"]
        out += [f"| end (settled) | {mib(e['rss_kib'])} | {mib(e['pss_kib'])} | {e['threads']} | "
                f"{e['fds']} | {e['holders']} |", "",
                f"Rss growth over the baseline: {c['rss_growth_pct']:.1f} %.", ""]
    s = results.get("soak")
    if s:
        out += [f"## Soak: {s['n']} terminals, 1 MiB execs back to back for {s['secs']:.0f} s "
                f"({s['execs']} execs)", "",
                f"Baseline {mib(s['baseline']['rss_kib'])} MiB; samples (s: Rss MiB): "
                + ", ".join(f"{x['s']:.0f}: {mib(x['rss_kib'])}" for x in s["samples"]), "",
                f"Peak {mib(s.get('peak_rss_kib', 0))} MiB; growth over the second half "
                f"{mib(s.get('second_half_growth_kib', 0))} MiB; open and quiet "
                f"{mib(s['end_open']['rss_kib'])} MiB; all closed {mib(s['closed']['rss_kib'])} "
                f"MiB."]
        if s["errors"]:
            out.append(f"Errors: {s['errors']}")
        out.append("")
    p = results.get("parts")
    if p:
        out += [f"## Where a terminal's memory goes ({p['mib']} MiB of output, in-process)", "",
                "| part | live bytes held | peak while fed |", "|---|---|---|"]
        for row in p["parts"]:
            out.append(f"| {row['part']} | {row['held'] / 1024:.0f} KiB | "
                       f"{row['peak'] / 1024:.0f} KiB |")
        out.append("")
    return "\n".join(out) + "\n"


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--ptyhub", help="ptyhub binary (as bench/run.py finds it by default)")
    p.add_argument("--label", default="", help="a word for the result file names (before, after)")
    p.add_argument("--workloads", nargs="*", choices=WORKLOADS, default=list(WORKLOADS))
    p.add_argument("--flood-n", type=int, default=20)
    p.add_argument("--flood-mib", type=float, default=5.0)
    p.add_argument("--cycles", type=int, default=500)
    p.add_argument("--soak-n", type=int, default=10)
    p.add_argument("--soak-secs", type=float, default=60.0)
    p.add_argument("--parts", action="store_true",
                   help="also run crates/core/examples/memory_parts.rs (builds it)")
    p.add_argument("--out", help="results directory (default bench/results)")
    a = p.parse_args(argv)
    notes: list[str] = []
    binary, how = resolve_binary(a.ptyhub)
    if ensure_binary(binary, how, False, notes) is None:
        print("\n".join(notes), file=sys.stderr)
        return 1
    results: dict = {}
    for workload in a.workloads:
        env = Env(keep=False)
        try:
            server = Ptyhub(env, binary, workload)
            log(f"{workload} on server pid {server.proc.pid}")
            if workload == "flood":
                results["flood"] = flood(server, a.flood_n, a.flood_mib)
            elif workload == "cycles":
                results["cycles"] = cycles(server, a.cycles)
            else:
                results["soak"] = soak(server, a.soak_n, a.soak_secs)
        finally:
            env.cleanup()
    if a.parts:
        found = parts(a.flood_mib)
        if found:
            results["parts"] = found
    meta = {"when": datetime.now(timezone.utc).strftime("%Y-%m-%d %H:%M UTC"),
            "commit": _commit(), "machine": f"{os.cpu_count()} cores, Linux {os.uname().release}",
            "label": a.label, "binary": binary.name, "notes": notes}
    text = report(results, meta)
    if notes:
        text += "\n## Notes\n\n" + "\n".join(f"- {n}" for n in notes) + "\n"
    out = Path(a.out) if a.out else HERE / "results"
    out.mkdir(parents=True, exist_ok=True)
    stamp = datetime.now(timezone.utc).strftime("%Y%m%dT%H%M%SZ")
    name = f"{stamp}-memory" + (f"-{a.label}" if a.label else "")
    (out / f"{name}.md").write_text(text)
    (out / f"{name}.json").write_text(json.dumps(scrub({"meta": meta, "results": results}),
                                                 indent=1))
    print(text)
    return 0


def _commit() -> str:
    r = subprocess.run(["git", "-C", str(HERE), "rev-parse", "--short", "HEAD"],
                       capture_output=True, text=True)
    return r.stdout.strip() or "unknown"


if __name__ == "__main__":
    sys.exit(main())
