#!/usr/bin/env python3
"""An exec's round trip (or the create rate) for several ptyhub builds side by side, with the
bare shell and tmux control mode (or tmux's `new-session`) beside them, all in one run.

Every system is started once and kept; the run then takes turns in batches (a batch of execs
on each system, the order reversed every other turn), so that all of them meet the same
machine. On a shared VM whose speed drifts by a third within minutes, separate runs before
and after a change cannot tell 10 % apart; builds measured this way can.

    python3 bench/compare_builds.py --ptyhub before=PATH --ptyhub after=PATH
    python3 bench/compare_builds.py --ptyhub after=PATH --batches 60 --per 50

Per build: `POST …/exec {"command": "echo hi"}` on one keep-alive connection (each request in
one write) and `GET /healthz` on the same connection (10 per batch: the HTTP floor). *Own
part* = exec p50 − healthz p50 − the bare shell's p50, as in `run.py`. The report goes to
bench/results/<UTC timestamp>-compare.md (and .json) unless `--out` says otherwise.

`--ws` also measures each build's exec frames on one WebSocket (an `attach` connection with
binary output, as `run.py` does), as system `LABEL ws` with its own server and terminal.
`--ws-local` does the same over the server's local unix socket (`LABEL ws local`): the
transport an agent on the same machine uses, and the one tmux control mode's client has (a
pipe), so the two tables split what TCP on loopback costs from what ptyhub does.

`--shell sh` runs that shell instead of bash in every system (the bare one, tmux's, ptyhub's).

`--workload throughput`: `seq 1 3000000` and `cat` of the 100 MB mixed file (`--seq-n`,
`--cat-mb`) on the bare PTY and each build, `--rounds` rounds (`-throughput.md`).

`--workload create`: each build and tmux create `--create-n` terminals (80x24, kept until the
end), in turns of `--create-batch`, as `run.py`'s create workload does for one build: on this
VM's file system each run is slower than the one before, so builds are only comparable in one.
Report: `-create.md`.

`--workload catchup`: on each build, calls that go through a flood's output (a snapshot right
after `cat` of the mixed file, an observe with a cursor from before one, a send of one), with
`/healthz` and an exec on another terminal every 20 ms beside each: how long the call takes,
and whether the rest of the server waits for it (`-catchup.md`).

`--workload restart`: on each build, three terminals run `cat` of a `--observe-mb` mixed file
and exit, and the server restarts on the same state dir; `/healthz` every 5 ms through its
first 3 s says whether replaying their logs holds the rest of the server (`-restart.md`).
"""

from __future__ import annotations

import argparse
import os
import platform
import shlex
import signal
import sys
import threading
import urllib.parse
import time
from pathlib import Path

from bare import Bare
from common import (BIG, REPO, SMALL, Env, cpu_ns_and_switches, fmt, generate_mixed_file, log,
                    median, percentile)
from ptyhub_system import Ptyhub, PtyhubError, resolve_builds, write_results
from tmux_system import Tmux

HEALTHZ_PER_BATCH = 10
MACHINE_NOTE = (f"- machine: {platform.machine()}, {os.cpu_count()} cores, "
                f"{platform.release()}; a shared machine (other work may run beside it)")


def ws_systems(args) -> list[tuple[str, bool]]:
    """The exec-frame systems asked for: each one's name suffix and whether it connects over
    the server's local unix socket (`--ws-local`) rather than TCP (`--ws`)."""
    return [(suffix, local) for suffix, local, asked in
            (("ws", False, args.ws), ("ws local", True, args.ws_local)) if asked]


def measure(args, binaries: list[tuple[str, Path]]) -> dict:
    env = Env(keep=False)
    ops: dict[str, list[float]] = {}
    errors: dict[str, list[str]] = {}
    try:
        if args.shell:
            env.use_shell(args.shell)
        systems = {}  # name -> (op, close)
        bare = Bare(env)
        bare.rt_open()
        systems["bare shell"] = (bare.rt_op, bare.rt_close)
        tmux = Tmux(env, "tmux compare")
        tmux.rt_open()
        tmux.ctl_open()
        systems["tmux control mode"] = (tmux.ctl_op, tmux.rt_close)
        hubs = {}
        for label, binary in binaries:
            hub = Ptyhub(env, binary, label)
            hub.rt_open()
            hubs[label] = hub
            systems[label] = (hub.rt_op, hub.rt_close)
            for suffix, local in ws_systems(args):
                ws = Ptyhub(env, binary, f"{label}-{suffix.replace(' ', '-')}")
                ws.rt_ws_open(local=local)
                hubs[f"{label} {suffix}"] = ws
                systems[f"{label} {suffix}"] = (ws.rt_ws_op, ws.rt_close)
        names = list(systems)
        for name in names:
            ops[name] = []
            errors[name] = []
            for i in range(args.warmup):
                systems[name][0](10**6 + i)
        for label in hubs:
            ops[f"{label} healthz"] = []
            errors[f"{label} healthz"] = []
        # Each build's processes' CPU (µs) and context switches, summed over its execs.
        usage = {label: {role: [0, 0] for role in hub.rt_pids()} for label, hub in hubs.items()}
        for batch in range(args.batches):
            order = names if batch % 2 == 0 else names[::-1]
            for name in order:
                op = systems[name][0]
                pids = hubs[name].rt_pids() if name in hubs else {}
                before = {role: cpu_ns_and_switches(p) for role, p in pids.items()}
                for i in range(args.per):
                    secs, error = op(batch * args.per + i)
                    ops[name].append(secs * 1000)
                    if error and len(errors[name]) < 5:
                        errors[name].append(error)
                for role, p in pids.items():
                    after = cpu_ns_and_switches(p)
                    usage[name][role][0] += (after[0] - before[role][0]) / 1000
                    usage[name][role][1] += after[1] - before[role][1]
                if name in hubs:
                    for i in range(HEALTHZ_PER_BATCH):
                        secs, error = hubs[name].rt_trivial_op(i)
                        ops[f"{name} healthz"].append(secs * 1000)
                        if error and len(errors[f"{name} healthz"]) < 5:
                            errors[f"{name} healthz"].append(error)
            log(f"batch {batch + 1}/{args.batches}")
        for name in names:
            systems[name][1]()
    finally:
        env.cleanup()
    per_exec = {label: {role: [cpu / len(ops[label]), switches / len(ops[label])]
                        for role, (cpu, switches) in roles.items()}
                for label, roles in usage.items()}
    return {"ops_ms": ops, "errors": errors, "builds": [label for label, _ in binaries],
            "per_exec": per_exec}


def measure_creates(args, binaries: list[tuple[str, Path]]) -> dict:
    """Creates per system in turns of batches; the seconds of each batch."""
    env = Env(keep=False)
    batches: dict[str, list[dict]] = {}
    try:
        tmux = Tmux(env, "tmux create")
        makers = {"tmux new-session": lambda i: tmux.new_session(f"c{i}", SMALL,
                                                                  [env.bash, "-i"])}
        for label, binary in binaries:
            hub = Ptyhub(env, binary, f"create-{label}")
            makers[label] = lambda i, hub=hub: hub.create(SMALL)
        names = list(makers)
        made = {name: 0 for name in names}
        turn = 0
        while any(made[name] < args.create_n for name in names):
            for name in (names if turn % 2 == 0 else names[::-1]):
                count = min(args.create_batch, args.create_n - made[name])
                started = time.perf_counter()
                for i in range(made[name], made[name] + count):
                    makers[name](i)
                batches.setdefault(name, []).append(
                    {"count": count, "seconds": time.perf_counter() - started})
                made[name] += count
            turn += 1
            log(f"turn {turn}: {made}")
    finally:
        env.cleanup()
    return {"batches": batches, "builds": [label for label, _ in binaries]}


def measure_throughput(args, binaries: list[tuple[str, Path]]) -> dict:
    """`seq` and the mixed `cat` on the bare PTY and each build, round after round (the order
    reversed every other round); the seconds and the server's and holder's CPU of each."""
    env = Env(keep=False)
    runs: dict[str, dict[str, list[dict]]] = {}
    try:
        mixed = env.data / "mixed.txt"
        generate_mixed_file(mixed, int(args.cat_mb * 1_000_000))
        workloads = {f"seq 1 {args.seq_n}": f"seq 1 {args.seq_n}",
                     f"cat {args.cat_mb:g} MB mixed": f"cat {shlex.quote(str(mixed))}"}
        systems = {"bare PTY": Bare(env).throughput}
        for label, binary in binaries:
            systems[label] = Ptyhub(env, binary, f"throughput-{label}").throughput
        names = list(systems)
        for r in range(args.rounds):
            for workload, cmd in workloads.items():
                for name in (names if r % 2 == 0 else names[::-1]):
                    out = systems[name](cmd)
                    runs.setdefault(workload, {}).setdefault(name, []).append(
                        {"seconds": out["seconds"], "cpu_s": out.get("cpu_s") or {}})
            log(f"round {r + 1}/{args.rounds}")
    finally:
        env.cleanup()
    return {"runs": runs, "builds": [label for label, _ in binaries]}


CATCHUP_KINDS = ("snapshot", "observe", "send")


def catchup_round(p: Ptyhub, kind: str, cmd: str) -> dict:
    """A call that must go through a flood's output, on a connection of its own; beside it,
    every 20 ms, `/healthz` and an exec on another terminal, which must not wait for it.
    `snapshot`: `cmd` by exec, then at once a snapshot (the screen applies what it lacks).
    `observe`: a cursor, `cmd` by exec, then the output since the cursor. `send`: `cmd` by
    send, which ends with the output since it was typed (the probes run through the flood)."""
    sid = p.create(BIG)
    other = p.create(BIG)
    try:
        p.wait_prompt(sid)
        p.wait_prompt(other)
        q = f"/v2/pty/sessions/{sid}"
        if kind == "snapshot":
            p.exec(sid, cmd, truncate=True, timeout=600)
            call = ("GET", f"{q}/snapshot", None)
        elif kind == "observe":
            cursor = p.ok("GET", f"{q}/observe")["cursor"]
            p.exec(sid, cmd, truncate=True, timeout=600)
            call = ("GET", f"{q}/observe?cursor={urllib.parse.quote(cursor)}", None)
        else:
            call = ("POST", f"{q}/send", {"text": cmd, "submit": True, "deadline": 600})
        timed: dict = {}

        def run():
            conn = p._connect()
            t0 = time.monotonic()
            try:
                timed["status"], _ = p.request(*call, conn=conn)
            finally:
                timed["ms"] = (time.monotonic() - t0) * 1e3
                conn.close()

        thread = threading.Thread(target=run)
        thread.start()
        healthz, execs = [], []
        while thread.is_alive():
            t0 = time.monotonic()
            p.request("GET", "/healthz")
            healthz.append((time.monotonic() - t0) * 1e3)
            t0 = time.monotonic()
            p.exec(other, "true", timeout=60)
            execs.append((time.monotonic() - t0) * 1e3)
            time.sleep(0.02)
        thread.join()
        if timed.get("status") != 200:
            raise PtyhubError(f"{kind}: HTTP {timed.get('status')}")
        return {"call_ms": timed["ms"], "healthz_max_ms": max(healthz, default=0.0),
                "exec_max_ms": max(execs, default=0.0), "probes": len(healthz)}
    finally:
        p.delete(sid)
        p.delete(other)


def measure_in_turns(args, binaries: list[tuple[str, Path]], prefix: str,
                     files_mb: dict[str, float], turn) -> dict:
    """Each build's server, round after round, the order reversed every other round: `turn(hub,
    files)` is one build's turn and gives its results by kind, kept as `runs[kind][build]`.
    `files` are mixed files of `files_mb` megabytes, by name."""
    env = Env(keep=False)
    runs: dict[str, dict[str, list[dict]]] = {}
    try:
        files = {}
        for name, mb in files_mb.items():
            files[name] = env.data / f"{name}.txt"
            generate_mixed_file(files[name], int(mb * 1_000_000))
        hubs = {label: Ptyhub(env, binary, f"{prefix}-{label}") for label, binary in binaries}
        names = list(hubs)
        for r in range(args.rounds):
            for name in (names if r % 2 == 0 else names[::-1]):
                for kind, out in turn(hubs[name], files).items():
                    runs.setdefault(kind, {}).setdefault(name, []).append(out)
            log(f"round {r + 1}/{args.rounds}")
    finally:
        env.cleanup()
    return {"runs": runs, "builds": [label for label, _ in binaries]}


def measure_catchup(args, binaries: list[tuple[str, Path]]) -> dict:
    """`catchup_round` of each kind in each build's turn. The observe's flood is
    `--observe-mb`: its cursor must stay within what the log keeps (64 MiB of log lines by
    default)."""
    def turn(hub: Ptyhub, files: dict[str, Path]) -> dict:
        big, small = (f"cat {shlex.quote(str(files[n]))}" for n in ("mixed", "observe"))
        cmds = {"snapshot": big, "observe": small, "send": big}
        return {kind: catchup_round(hub, kind, cmds[kind]) for kind in CATCHUP_KINDS}

    return measure_in_turns(args, binaries, "catchup",
                            {"mixed": args.cat_mb, "observe": args.observe_mb}, turn)


def report_head(title: str, runs: str, notes: list[str], columns: list[str]) -> list[str]:
    """A report's title, what each round did (`runs`), the machine, the notes, and the head
    of its table."""
    return [f"# {title}", "", f"- {runs}", MACHINE_NOTE, *[f"- {n}" for n in notes], "",
            "| " + " | ".join(columns) + " |", "|" + "---|" * len(columns)]


def report_catchup(result: dict, args, notes: list[str]) -> str:
    lines = report_head(
        "Calls that go through a flood's output, and the server beside them",
        f"{args.rounds} rounds; in each, on every build and a fresh 200x50 terminal: "
        f"`snapshot` right after `cat` of the {args.cat_mb:g} MB mixed file (by exec); "
        f"`observe` with a cursor taken before `cat` of a {args.observe_mb:g} MB one; `send` "
        f"of `cat` of the {args.cat_mb:g} MB one (the call spans the flood). Beside each call, "
        "every 20 ms, `GET /healthz` and an exec of `true` on another terminal",
        notes,
        ["call", "build", "call ms, median", "slowest /healthz beside it, median ms",
         "slowest exec beside it, median ms", "per round (call / healthz / exec ms)"])
    for kind, per in result["runs"].items():
        for name, items in per.items():
            shown = ", ".join(f"{run['call_ms']:.0f} / {run['healthz_max_ms']:.0f} / "
                              f"{run['exec_max_ms']:.0f}" for run in items)
            lines.append(
                f"| {kind} | {name} | {median([r['call_ms'] for r in items]):.0f} | "
                f"{median([r['healthz_max_ms'] for r in items]):.1f} | "
                f"{median([r['exec_max_ms'] for r in items]):.1f} | {shown} |")
    return "\n".join(lines) + "\n"


def restart_round(p: Ptyhub, cmd: str, terminals: int) -> dict:
    """`terminals` terminals run `cmd` (a flood) and exit; the server restarts on the same
    state dir and replays their logs; `/healthz` every 5 ms through its first 3 s."""
    for _ in range(terminals):
        sid = p.create(BIG)
        p.wait_prompt(sid)
        p.exec(sid, cmd, truncate=True, timeout=600)
        p.request("POST", f"/v2/pty/sessions/{sid}/input", {"input": "exit", "press_enter": True})
    time.sleep(1.5)
    p.conn = None
    p.proc.send_signal(signal.SIGTERM)
    p.proc.wait(timeout=30)
    p.log_file.close()
    p._start()
    started = time.monotonic()
    probes = []
    while time.monotonic() - started < 3.0:
        t0 = time.monotonic()
        p.request("GET", "/healthz")
        probes.append((time.monotonic() - t0) * 1e3)
        time.sleep(0.005)
    for sid in list(p.created):
        p.delete(sid)
    return {"healthz_max_ms": max(probes), "healthz_p50_ms": median(probes),
            "probes": len(probes)}


def measure_restart(args, binaries: list[tuple[str, Path]]) -> dict:
    """`restart_round` in each build's turn, with three terminals."""
    def turn(hub: Ptyhub, files: dict[str, Path]) -> dict:
        return {"restart": restart_round(hub, f"cat {shlex.quote(str(files['mixed']))}", 3)}

    return measure_in_turns(args, binaries, "restart", {"mixed": args.observe_mb}, turn)


def report_restart(result: dict, args, notes: list[str]) -> str:
    lines = report_head(
        "A server restarting beside exited terminals with long logs",
        f"{args.rounds} rounds; in each, on every build: three terminals run `cat` of a "
        f"{args.observe_mb:g} MB mixed file and exit, the server restarts on the same state "
        "dir (it replays their logs), and `GET /healthz` is asked every 5 ms through its "
        "first 3 s",
        notes,
        ["build", "slowest /healthz, median ms", "/healthz p50, median ms",
         "per round (slowest ms)"])
    for name, items in result["runs"]["restart"].items():
        shown = ", ".join(f"{run['healthz_max_ms']:.0f}" for run in items)
        lines.append(
            f"| {name} | {median([r['healthz_max_ms'] for r in items]):.1f} | "
            f"{median([r['healthz_p50_ms'] for r in items]):.2f} | {shown} |")
    return "\n".join(lines) + "\n"


def report_throughput(result: dict, args, notes: list[str]) -> str:
    lines = report_head(
        "Output throughput, builds side by side",
        f"{args.rounds} rounds; in each, every workload on the bare PTY and on each build "
        "(a fresh 200x50 terminal, the timed exec as in `run.py`), the order reversed every "
        "other round",
        notes,
        ["workload", "system", "median s", "/ bare PTY", "server CPU-s", "holder CPU-s",
         "rounds"])
    for workload, per in result["runs"].items():
        bare = median([run["seconds"] for run in per["bare PTY"]])
        for name, items in per.items():
            secs = median([run["seconds"] for run in items])
            cpu = {k: median([run["cpu_s"].get(k) for run in items])
                   for k in ("server", "holder")}
            shown = ", ".join(f"{run['seconds']:.3f}" for run in items)
            lines.append(
                f"| `{workload}` | {name} | {secs:.3f} | {secs / bare:.2f}x | "
                f"{fmt(cpu['server'], 2)} | {fmt(cpu['holder'], 2)} | {shown} |")
    return "\n".join(lines) + "\n"


def report_creates(result: dict, args, notes: list[str]) -> str:
    batches = result["batches"]

    def rate(items):
        return sum(b["count"] for b in items) / sum(b["seconds"] for b in items)

    lines = [
        "# Create rate, builds side by side",
        "",
        f"- {args.create_n} terminals (80x24) per system, kept until the end, created in turns "
        f"of {args.create_batch} (the order reversed every other turn)",
        MACHINE_NOTE,
        *[f"- {n}" for n in notes],
        "",
        "| system | rate, all | rate, the last fifth | all / tmux |",
        "|---|---|---|---|",
    ]
    tmux = rate(batches["tmux new-session"])
    for name, items in batches.items():
        last = items[-max(1, len(items) // 5):]
        lines.append(f"| {name} | {rate(items):.0f} per s | {rate(last):.0f} per s | "
                     f"{rate(items) / tmux:.2f}x |")
    return "\n".join(lines) + "\n"


def report(result: dict, args, notes: list[str]) -> str:
    ops, errors = result["ops_ms"], result["errors"]
    bare = median(ops["bare shell"])
    tmux = median(ops["tmux control mode"])
    lines = [
        "# An exec's round trip, builds side by side",
        "",
        f"- {args.batches} turns of {args.per} ops per system (order reversed every other "
        f"turn), {args.warmup} warm-up ops each; `echo hi` and its exit code; "
        f"{HEALTHZ_PER_BATCH} `GET /healthz` per turn per build; every shell "
        f"`{args.shell or 'bash'} -i`",
        MACHINE_NOTE,
        *[f"- {n}" for n in notes],
        "",
        "| system | ops | p50 ms | p90 ms | p99 ms | errors |",
        "|---|---|---|---|---|---|",
    ]
    for name, values in ops.items():
        lines.append(
            f"| {name} | {len(values)} | {median(values):.3f} | {percentile(values, 90):.3f} | "
            f"{percentile(values, 99):.3f} | {len(errors[name])} |")
    lines += ["", "| build | exec p50 ms | own part ms | exec / tmux control mode | "
              "exec / first build |", "|---|---|---|---|---|"]
    first = median(ops[result["builds"][0]])
    for label in result["builds"]:
        exec_p50 = median(ops[label])
        own = exec_p50 - median(ops[f"{label} healthz"]) - bare
        lines.append(f"| {label} | {exec_p50:.3f} | {own:.3f} | {exec_p50 / tmux:.2f}x | "
                     f"{exec_p50 / first:.3f} |")
    for suffix, local in ws_systems(args):
        what = "exec frame over the local socket" if local else "exec frame"
        lines += ["", f"| build | {what} p50 ms | / tmux control mode | / first build |",
                  "|---|---|---|---|"]
        first_ws = median(ops[f"{result['builds'][0]} {suffix}"])
        for label in result["builds"]:
            ws_p50 = median(ops[f"{label} {suffix}"])
            lines.append(f"| {label} {suffix} | {ws_p50:.3f} | {ws_p50 / tmux:.2f}x | "
                         f"{ws_p50 / first_ws:.3f} |")
    lines += ["", "CPU per exec (µs, each process's threads, from `/proc/PID/task/*/schedstat`, "
              "over all of its execs) and context switches per exec:", "",
              "| build | process | CPU µs/exec | switches/exec |", "|---|---|---|---|"]
    for label in result.get("per_exec", {}):
        for role, (cpu, switches) in result["per_exec"][label].items():
            lines.append(f"| {label} | {role} | {cpu:.1f} | {switches:.2f} |")
    return "\n".join(lines) + "\n"


def main(argv: list[str]) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--ptyhub", action="append", default=[],
                    help="LABEL=PATH of a build (repeatable); default: the release build")
    ap.add_argument("--batches", type=int, default=40)
    ap.add_argument("--per", type=int, default=50, help="execs per system per turn")
    ap.add_argument("--warmup", type=int, default=20)
    ap.add_argument("--ws", action="store_true",
                    help="also each build's exec frames on one WebSocket")
    ap.add_argument("--ws-local", action="store_true",
                    help="also each build's exec frames on one WebSocket over the server's "
                         "local unix socket (the transport tmux control mode's pipe compares to)")
    ap.add_argument("--workload",
                    choices=("roundtrip", "create", "throughput", "catchup", "restart"),
                    default="roundtrip")
    ap.add_argument("--rounds", type=int, default=8, help="throughput and catch-up rounds")
    ap.add_argument("--seq-n", type=int, default=3_000_000)
    ap.add_argument("--cat-mb", type=float, default=100.0)
    ap.add_argument("--observe-mb", type=float, default=40.0,
                    help="the catch-up's observe flood (within what a log keeps)")
    ap.add_argument("--create-n", type=int, default=500)
    ap.add_argument("--create-batch", type=int, default=25)
    ap.add_argument("--shell", help="the shell every system runs for the round trip (default "
                    "bash), e.g. sh")
    ap.add_argument("--out", default=str(REPO / "bench" / "results"))
    args = ap.parse_args(argv)
    binaries, notes = resolve_builds(args.ptyhub)
    # Labels only: no path of this machine goes into the results.
    shown = dict(vars(args), ptyhub=[label for label, _ in binaries], out=None)
    measure_with, report_with, kind = {
        "roundtrip": (measure, report, "compare"),
        "create": (measure_creates, report_creates, "create"),
        "throughput": (measure_throughput, report_throughput, "throughput"),
        "catchup": (measure_catchup, report_catchup, "catchup"),
        "restart": (measure_restart, report_restart, "restart"),
    }[args.workload]
    result = measure_with(args, binaries)
    md = report_with(result, args, notes)
    write_results(args.out, kind, md, {"args": shown, "notes": notes, **result})
    print(md)
    return 1 if any((result.get("errors") or {}).values()) else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
