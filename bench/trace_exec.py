#!/usr/bin/env python3
"""Where one exec's time goes: every system call and scheduler switch of the four processes an
exec passes through (the benchmark's client, the server, the holder and the shell), recorded
with `perf record` while the client runs `echo hi` execs one after the other, cut into the
hops of each exec and reported as medians.

    sudo python3 bench/trace_exec.py --ptyhub target/release/ptyhub [--ws | --bare] [--ops 80]

The hops of one exec, each found from the trace (no wall clock of the client's own):

1. *request*: the client's send returns → the server has read the request;
2. *to typing*: → the server's write of the command's bytes to the PTY has returned (HTTP
   or frame parsing, the exec use case, the actor, the typing connection's records; the
   kernel's PTY worker, which hands the bytes on to the shell, often runs on the writer's
   CPU before the write returns);
3. *shell wakes*: → the shell's first read of them;
4. *shell*: → the shell's last write before the holder's read that carries the command's
   end mark (line editing, running `echo`, the shell integration's marks, the kernel's PTY
   worker between the shell's writes, and whatever else runs on the two CPUs meanwhile);
5. *to holder*: → the holder has read that last piece from the PTY;
6. *to server*: → the server has read the holder's line of it;
7. *answer*: → the server's send of the answer returns;
8. *to client*: → the client has read it.

Tracing costs a few microseconds per system call, so every hop reads longer than it is without
it (the op's p50 is printed beside the untraced figures of `run.py` to compare); the split, not
the sum, is the finding. Needs `perf` (Debian: `linux-perf`) and the right to trace (root, or
`kernel.perf_event_paranoid` ≤ 1). Results: `bench/results/<stamp>-trace-exec[-ws].md`.
"""

from __future__ import annotations

import argparse
import os
import re
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

from bare import Bare  # noqa: E402
from common import Env, log  # noqa: E402
from ptyhub_system import Ptyhub, write_results  # noqa: E402

# x86_64 system call numbers of the calls the hops are found by.
READS = {0, 45}  # read, recvfrom
WRITES = {1, 20, 44, 46}  # write, writev, sendto, sendmsg
# The bytes an exec of `echo hi` types: bracketed paste around the command, then Enter.
TYPED_BYTES = len(b"\x1b[200~echo hi\x1b[201~\r")

HOPS = ("request", "to typing", "shell wakes", "shell", "to holder", "to server", "answer",
        "to client")
# The bare shell's round trip (`run.py`'s sentinel: the client writes the line to the PTY
# itself and reads until the shell printed `$?`): the same shell hops, nothing between.
BARE_HOPS = ("shell wakes", "shell", "to client")

ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
ap.add_argument("--ptyhub", help="the ptyhub binary to trace")
ap.add_argument("--ws", action="store_true", help="exec frames on one WebSocket, not REST")
ap.add_argument("--bare", action="store_true",
                help="the bare shell's round trip instead (its hops, for the shell's share)")
ap.add_argument("--ops", type=int, default=80, help="traced execs")
ap.add_argument("--warmup", type=int, default=200, help="execs before tracing starts")
ap.add_argument("--out", default=str(HERE / "results"))


class Call:
    """One system call's exit: when, by whom, which call, what it returned."""

    __slots__ = ("t", "role", "nr", "ret")

    def __init__(self, t: float, role: str, nr: int, ret: int):
        self.t, self.role, self.nr, self.ret = t, role, nr, ret


def roles_of(pids: dict[str, list[int]]) -> dict[int, str]:
    """Every thread of each process, by the role of its process."""
    roles = {}
    for role, group in pids.items():
        for pid in group:
            for task in Path(f"/proc/{pid}/task").iterdir():
                roles[int(task.name)] = role
    return roles


def calls_of(data: Path, roles: dict[int, str]) -> list[Call]:
    script = subprocess.run(["perf", "script", "-i", str(data), "-F", "tid,time,event,trace"],
                            capture_output=True, text=True, check=True).stdout
    calls = []
    pattern = re.compile(r"\s*(\d+)\s+([\d.]+):\s+raw_syscalls:sys_exit:\s+NR (\d+) = (-?\d+)")
    for line in script.splitlines():
        m = pattern.match(line)
        if m and int(m.group(1)) in roles:
            calls.append(Call(float(m.group(2)) * 1e6, roles[int(m.group(1))],
                              int(m.group(3)), int(m.group(4))))
    return calls


def hops_of(op: list[Call]) -> list[float] | None:
    """The hops of one exec (its calls, from the client's send to the next), or None when
    the trace of it is incomplete."""
    start = op[0]

    def first(after: float, role: str, nrs: set[int], pred=lambda c: c.ret > 0):
        return next((c for c in op if c.t >= after and c.role == role and c.nr in nrs
                     and pred(c)), None)

    def last(before: float, role: str, nrs: set[int], pred=lambda c: c.ret > 0):
        return next((c for c in reversed(op) if c.t <= before and c.role == role
                     and c.nr in nrs and pred(c)), None)

    received = first(start.t, "server", READS, lambda c: c.ret == start.ret)
    typed = received and first(received.t, "server", WRITES, lambda c: c.ret == TYPED_BYTES)
    woke = typed and first(typed.t, "shell", READS)
    answered = last(op[-1].t, "client", READS)
    sent = answered and last(answered.t, "server", WRITES)
    from_holder = sent and last(sent.t, "server", READS)
    holder_sent = from_holder and last(from_holder.t, "holder", WRITES)
    holder_read = holder_sent and last(holder_sent.t, "holder", READS)
    shell_wrote = holder_read and last(holder_read.t, "shell", WRITES)
    marks = [start, received, typed, woke, shell_wrote, holder_read, from_holder, sent, answered]
    if not all(marks) or any(b.t < a.t for a, b in zip(marks, marks[1:])):
        return None
    return [b.t - a.t for a, b in zip(marks, marks[1:])]


def bare_hops_of(op: list[Call]) -> list[float] | None:
    """The hops of one bare round trip: the client's write, the shell's first read, its last
    write before the client's last read, that read."""
    start = op[0]
    woke = next((c for c in op if c.role == "shell" and c.nr in READS and c.ret > 0), None)
    answered = next((c for c in reversed(op) if c.role == "client" and c.nr in READS
                     and c.ret > 0), None)
    wrote = answered and next((c for c in reversed(op) if c.t <= answered.t
                               and c.role == "shell" and c.nr in WRITES and c.ret > 0), None)
    marks = [start, woke, wrote, answered]
    if not all(marks) or any(b.t < a.t for a, b in zip(marks, marks[1:])):
        return None
    return [b.t - a.t for a, b in zip(marks, marks[1:])]


def trace(args, env: Env) -> dict:
    hub = Bare(env) if args.bare else Ptyhub(env, Path(args.ptyhub), "trace")
    try:
        if args.ws and not args.bare:
            hub.rt_ws_open()
            op = hub.rt_ws_op
        else:
            hub.rt_open()
            op = hub.rt_op
        for i in range(args.warmup):
            op(i)
        pids = {k: [p for p in v if p] for k, v in hub.rt_pids().items()}
        pids["client"] = [os.getpid()]
        roles = roles_of(pids)
        data = Path(tempfile.mkdtemp(prefix="ptyhub-trace-")) / "perf.data"
        perf = subprocess.Popen(
            ["perf", "record", "-q", "-e", "raw_syscalls:sys_exit", "-o", str(data),
             "-p", ",".join(str(p) for v in pids.values() for p in v)],
            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        time.sleep(1.0)
        secs, errors = [], []
        for i in range(args.ops):
            s, err = op(10_000 + i)
            secs.append(s)
            if err:
                errors.append(err)
        time.sleep(0.2)
        perf.send_signal(signal.SIGINT)
        perf.wait()
        calls = calls_of(data, roles)
        shutil.rmtree(data.parent, ignore_errors=True)
    finally:
        hub.rt_close() if args.bare else hub.stop()
    starts = [i for i, c in enumerate(calls) if c.role == "client" and c.nr in WRITES
              and c.ret > 0]
    # An exec is everything from the client's send to its next; the first is before tracing.
    ops = [calls[a:b] for a, b in zip(starts, starts[1:])]
    cut, names = (bare_hops_of, BARE_HOPS) if args.bare else (hops_of, HOPS)
    hops = [h for h in (cut(o) for o in ops) if h]
    return {"ops": len(ops), "found": len(hops), "errors": errors,
            "p50_traced_ms": statistics.median(secs) * 1e3,
            "hops_us": {name: statistics.median(h[i] for h in hops) for i, name in
                        enumerate(names)} if hops else {}}


def report(result: dict, args) -> str:
    kind = ("the bare shell's round trip (`echo hi; echo __D$?`)" if args.bare else
            "exec frames on one WebSocket" if args.ws else "REST exec (keep-alive)")
    lines = [f"# Where one exec's time goes: {kind}", "",
             f"- {result['found']} of {result['ops']} traced execs of `echo hi` cut into hops "
             f"(system-call exits of the client, server, holder and shell; `perf record`)",
             f"- p50 of the traced execs: {result['p50_traced_ms']:.3f} ms (tracing adds a few "
             "µs per system call; `run.py` has the untraced figures)",
             f"- machine: {os.cpu_count()} CPUs; errors: {len(result['errors'])}", "",
             "| hop | median µs | cumulative µs |", "|---|---|---|"]
    total = 0.0
    for name, us in result["hops_us"].items():
        total += us
        lines.append(f"| {name} | {us:.1f} | {total:.1f} |")
    return "\n".join(lines) + "\n"


def main(argv: list[str]) -> int:
    args = ap.parse_args(argv)
    if not args.bare and not args.ptyhub:
        ap.error("--ptyhub is needed (or --bare)")
    if not shutil.which("perf"):
        print("trace_exec.py needs perf (Debian: apt-get install linux-perf)", file=sys.stderr)
        return 2
    env = Env(keep=False)
    try:
        result = trace(args, env)
    finally:
        env.cleanup()
    md = report(result, args)
    shown = dict(vars(args), ptyhub=args.ptyhub and Path(args.ptyhub).name, out=None)
    suffix = "trace-bare" if args.bare else "trace-exec-ws" if args.ws else "trace-exec"
    write_results(args.out, suffix, md,
                  {"args": shown, **result})
    print(md)
    log("done")
    return 1 if result["errors"] or not result["found"] else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
