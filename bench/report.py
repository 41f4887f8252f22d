"""The results: medians and ratios, targets met or missed, and the Markdown report."""

from __future__ import annotations

import statistics

from common import fmt, fmt_ratio, median, percentile, ratio
from rounds import Run
from watchers import FANOUT_END_CMD

# The fan-out target: the producer with the most
# watchers at most this many times its time alone, and no watcher lagged in any round.
FANOUT_MAX_X_ALONE = 1.5


# --------------------------------------------------------------------------------------------
# report
# --------------------------------------------------------------------------------------------

def verdict(ok) -> str:
    return "n/a" if ok is None else ("**met**" if ok else "**MISSED**")


def summarize(run: Run) -> tuple[dict, str]:
    R = run.results
    a = run.args
    md: list[str] = []
    summary: dict = {"throughput": {}, "roundtrip": {}, "memory": {}, "create": {}, "fanout": {},
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
    md.append(f"- rounds: {a.rounds} (memory: {a.mem_rounds}, fan-out: {a.fanout_rounds}); "
              f"systems in rotating order per round; duration {m['duration_s']} s; "
              f"mode: {'quick' if a.quick else 'full'}")
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
        watched = {w: per["ptyhub_w1"] for w, per in tp.items() if per.get("ptyhub_w1")}
        if watched:
            n = R.get("throughput_watchers") or 1
            md.append(f"ptyhub with {n} WebSocket watcher{'s' if n > 1 else ''} on the terminal "
                      "(`mode=watch`, binary, connected before the producer starts; the "
                      "command ends with a marker line): the time is until the exec answered "
                      "and every watcher got the marker, whichever is later. With the log and "
                      "the screen, as above.")
            md.append("")
            md.append("| workload | bare s | ptyhub s | ptyhub + watcher s | + watcher / bare "
                      "| exec answered s | watcher got all s | lagged watchers |")
            md.append("|---|---|---|---|---|---|---|---|")
            for w, per in watched.items():
                t = median(per["seconds"])
                bare = median(tp[w].get("bare", {}).get("seconds", []))
                extra = per.get("extra") or []
                r = ratio(t, bare)
                summary["throughput"][w]["ptyhub_watched"] = {
                    "median_s": t, "over_bare_time": r, "rounds": extra}
                lagged = sum(x.get("lagged_watchers") or 0 for x in extra)
                alone = median(tp[w].get("ptyhub", {}).get("seconds", []))
                md.append(f"| `{w}` | {fmt(bare)} | {fmt(alone)} "
                          f"| {fmt(t)} | {fmt_ratio(r)} "
                          f"| {fmt(median([x['exec_seconds'] for x in extra]))} "
                          f"| {fmt(median([x['watcher_s'] for x in extra]))} | {lagged} |")
                targets.append({"target": f"throughput `{w}` with the log, the screen and "
                                          f"{n} watcher: ptyhub ≤ 1.1x the bare PTY's time",
                                "value": r, "met": None if r is None else r <= 1.1})
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
        trivial = summary["roundtrip"].get("ptyhub_trivial", {}).get("p50_ms")
        own = None
        if None not in (php, trivial, bare):
            # What is ptyhub's own in an exec round trip: the total minus this client's trivial
            # request on the same connection minus the bare shell's round trip.
            own = php - trivial - bare
            summary["roundtrip"]["ptyhub_own_p50_ms"] = own
            md.append(f"ptyhub's own part of an exec, p50: exec {php:.3f} − GET /healthz "
                      f"{trivial:.3f} − bare shell {bare:.3f} = **{own:.3f} ms** "
                      f"(target ≤ 0.1 ms).")
        cpu_rows = [(v, d) for v, d in rt.items() if d.get("cpu_us_per_op")]
        if cpu_rows:
            md.append("")
            md.append("CPU per op (µs, each process's threads, from `/proc/PID/task/*/schedstat`; "
                      "median of rounds) and context switches per op (voluntary and not):")
            md.append("")
            md.append("| system | process | CPU µs/op | switches/op |")
            md.append("|---|---|---|---|")
            for v, d in cpu_rows:
                for role, xs in d["cpu_us_per_op"].items():
                    sw = d["switches_per_op"].get(role) or []
                    cpu = statistics.median(xs)
                    sws = statistics.median(sw) if sw else None
                    summary["roundtrip"][v].setdefault("cpu_us_per_op", {})[role] = cpu
                    summary["roundtrip"][v].setdefault("switches_per_op", {})[role] = sws
                    md.append(f"| {d['label']} | {role} | {cpu:.1f} | "
                              f"{'' if sws is None else f'{sws:.2f}'} |")
        ws = summary["roundtrip"].get("ptyhub_ws", {}).get("p50_ms")
        if ws is not None:
            summary["roundtrip"]["ratios"]["ptyhub_ws_over_tmux_ctl_p50"] = ratio(ws, ctl)
            summary["roundtrip"]["ratios"]["ptyhub_ws_over_bare_p50"] = ratio(ws, bare)
            md.append(f"exec over one WebSocket (exec frames), p50 {ws:.3f} ms: "
                      f"{fmt_ratio(ratio(ws, ctl))} tmux control mode, "
                      f"{fmt_ratio(ratio(ws, bare))} the bare shell.")
        send = summary["roundtrip"].get("ptyhub_send", {}).get("p50_ms")
        if send is not None and php is not None:
            # exec of the same command answers when its end mark arrives: what send adds to
            # it is how long it takes to see that the shell reads again.
            summary["roundtrip"]["send_over_exec_ms"] = send - php
            md.append(f"send until `stdin_read` − exec of the same command, p50: "
                      f"{send - php:.1f} ms (target ≤ 10 ms).")
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
        r3 = ratio(ws, ctl)
        if r3 is not None:
            targets.append({"target": "round trip over a persistent connection (exec frame) "
                                      "p50 ≤ tmux control-mode p50",
                            "value": r3, "met": r3 <= 1.0})
        if own is not None:
            targets.append({"target": "round trip: ptyhub's own part of exec (p50) ≤ 0.1 ms",
                            "value": own, "shown": f"{own:.3f} ms", "met": own <= 0.1})
        extra = summary["roundtrip"].get("send_over_exec_ms")
        if extra is not None:
            targets.append({"target": "send: stdin_read within 10 ms (p50) of exec's answer",
                            "value": extra, "shown": f"{extra:.1f} ms",
                            "met": extra <= 10.0})

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
        lat_rows = []
        for n in ns:
            row = (summary["memory"].get("ptyhub") or {}).get(n)
            if not row:
                continue
            lats = [v.get("latency_ms") for v in row["raw"] if v.get("latency_ms")]
            if lats:
                lat_rows.append((n, {k: median([x.get(k) for x in lats])
                                     for k in ("list", "snapshot", "exec", "send")}))
                row["latency_ms"] = lat_rows[-1][1]
        if lat_rows:
            md.append("ptyhub with N idle terminals, their screens asleep (medians in ms over 5 "
                      "calls and the rounds): *list* = `GET /v2/pty/sessions` of all N; "
                      "*snapshot* = `GET …/screen` of a cold terminal (its screen woken from "
                      "its dump); *exec* = `POST …/exec {\"command\": \"true\"}` in a cold "
                      "terminal; *send* = `POST …/send` of `true` until `stdin_read` in a cold "
                      "terminal.")
            md.append("")
            md.append("| N | list ms | list ms per terminal | snapshot ms (cold) | exec ms (cold) "
                      "| send ms (cold) |")
            md.append("|---|---|---|---|---|---|")
            for n, v in lat_rows:
                per = None if v["list"] is None else v["list"] / n
                md.append(f"| {n} | {fmt(v['list'])} | {fmt(per)} | {fmt(v['snapshot'])} "
                          f"| {fmt(v['exec'])} | {fmt(v.get('send'))} |")
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
                  f"watchers ({a.fanout_rounds} rounds, medians)")
        md.append("")
        md.append(
            f"The producer `cat FILE && {FANOUT_END_CMD}` ({fmt(f.get('bytes', 0) / 1e6, 3)} MB "
            f"of the same kind of mixed ANSI/UTF-8 text as (a); "
            f"{fmt(R.get('fanout_expected_bytes', 0) / 1e6, 3)} MB out of the PTY) runs in a "
            f"200x50 terminal with W watchers attached and live before it starts. Time = "
            f"from starting the producer until it is done: ptyhub `POST …/exec` answered "
            f"`completed` (every byte logged and parsed, the screen following in the "
            f"background; watchers are fed from memory or the log and never hold the PTY "
            f"back); tmux: the producer's own `tmux wait-for -S` "
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
            lagged = row.get("lagged_watchers_max")
            targets.append({"target": f"fan-out ({labels.get(v, v)}): producer with {top} "
                                      f"watchers ≤ {FANOUT_MAX_X_ALONE}x alone, no watcher "
                                      f"lagged", "value": x,
                            "met": None if x is None else x <= FANOUT_MAX_X_ALONE
                            and not lagged})
        if tmux_slow is not None:
            md.append(f"tmux with {top} clients: {fmt_ratio(tmux_slow)} its time alone.")
            md.append("")
        ncpu = run.meta["machine"]["cpus"] or 1
        for v in hubs:
            per = summary["fanout"]["per_system"].get(v, {})
            hi, lo = per.get(top) or {}, per.get(0) or {}
            if not hi or not lo or hi.get("x_alone") is None or \
                    hi["x_alone"] <= FANOUT_MAX_X_ALONE:
                continue
            c, c0 = hi["median_cpu_s"], lo["median_cpu_s"]
            extra = (c.get("server") or 0) - (c0.get("server") or 0) + (c.get("watchers") or 0)
            md.append(
                f"Why {labels.get(v, v)} misses {FANOUT_MAX_X_ALONE}x at W={top} (CPU from "
                f"/proc, medians): the "
                f"run took {fmt(hi['median_s'])} s against {fmt(lo['median_s'])} s alone; the "
                f"server used {fmt(c.get('server'))} CPU-s (alone {fmt(c0.get('server'))}), the "
                f"watchers {fmt(c.get('watchers'))}, holder + producer "
                f"{fmt((c.get('holder') or 0) + (c.get('producer') or 0))} (alone "
                f"{fmt((c0.get('holder') or 0) + (c0.get('producer') or 0))}); the fan-out's "
                f"extra CPU (the server's increase + the watchers) is {fmt(extra)} CPU-s, "
                f"{fmt(extra / ncpu)} s of all {ncpu} CPUs, against "
                f"{fmt(lo['median_s'] * (FANOUT_MAX_X_ALONE - 1))} s of slack that "
                f"{FANOUT_MAX_X_ALONE}x alone allows.")
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

    # ---- history
    hi = R.get("history") or {}
    if hi.get("long"):
        f = R.get("history_file") or {}
        logs = hi.get("log_bytes") or {}
        lines = hi.get("scrollback_lines") or {}
        md.append("## (f) Long history: a terminal with a long past against one with a short one")
        md.append("")
        md.append(f"Three terminals of one server: a fresh one; one that printed the first "
                  f"{fmt(f.get('short_bytes', 256 * 1024) / 1024, 3)} KiB of a "
                  f"{fmt(f.get('bytes', 0) / 1e6, 3)} MB mixed file (`head -c`, via exec), so "
                  f"that its screen and its scrollback pages are full; and one that printed all "
                  f"of it (`cat`): event logs of {fmt(logs.get('empty', 0) / 1e6, 3)}, "
                  f"{fmt(logs.get('short', 0) / 1e6, 3)} and {fmt(logs.get('long', 0) / 1e6, 3)}"
                  f" MB, scrollback {lines.get('empty', 0)}, {lines.get('short', 0)} and "
                  f"{lines.get('long', 0)} lines. Then the calls an agent makes, the terminals in "
                  f"turn: exec of `true`, send of `true` until `stdin_read`, observe (no cursor), "
                  f"snapshot, the newest and the oldest 100 lines of scrollback. Medians in ms. "
                  f"The short and the long terminal give answers of the same size, so their "
                  f"ratio is what the history behind them costs; the fresh terminal's pages and "
                  f"screen are mostly empty rows.")
        md.append("")
        md.append("| call | no history | short history | long history | long / short | "
                  "long / none |")
        md.append("|---|---|---|---|---|---|")
        summary["history"] = {"log_bytes": logs, "scrollback_lines": lines, "calls": {}}
        worst = None
        for kind, xs in hi["long"].items():
            e = percentile(hi["empty"].get(kind) or [], 50)
            sh = percentile((hi.get("short") or {}).get(kind) or [], 50)
            l_ = percentile(xs, 50)
            r = ratio(l_, sh)
            r_empty = ratio(l_, e)
            summary["history"]["calls"][kind] = {"empty_ms": e, "short_ms": sh, "long_ms": l_,
                                                 "ratio": r, "ratio_to_empty": r_empty}
            md.append(f"| {kind} | {fmt(e)} | {fmt(sh)} | {fmt(l_)} | {fmt_ratio(r)} | "
                      f"{fmt_ratio(r_empty)} |")
            if r is not None and (worst is None or r > worst[1]):
                worst = (kind, r)
        md.append("")
        waits = hi.get("wait_long_command_ms") or []
        if waits:
            summary["history"]["wait_long_command"] = {
                "p50_ms": percentile(waits, 50), "chars": hi.get("wait_long_command_chars")}
            md.append(f"`POST …/wait` answering the command that printed the file (it has "
                      f"ended): median {fmt(percentile(waits, 50))} ms of {len(waits)}, "
                      f"{hi.get('wait_long_command_chars')} characters of output in the answer.")
            md.append("")
        if worst is not None:
            targets.append({"target": "long history: every call within 1.2x of the same call "
                                      "on a terminal with a short past (p50)", "value": worst[1],
                            "shown": f"{fmt_ratio(worst[1])} ({worst[0]})",
                            "met": worst[1] <= 1.2})

    # ---- create rate, alternated
    cr = R.get("create") or {}
    if cr.get("batches"):
        n, batch = cr.get("n"), cr.get("batch")
        bs = cr["batches"]
        md.append(f"## (g) Create rate, alternated: {n} terminals each, batches of {batch}")
        md.append("")
        md.append("One server each (ptyhub: `POST /v2/pty/sessions`, answered once the holder "
                  "serves; tmux: `new-session -d`), taking turns batch by batch, the first to go "
                  "alternating, so that both meet the same machine. *rate* = creates / seconds "
                  "of that system's batches; *batch ratio* = ptyhub's rate over tmux's in the "
                  "same turn (median and range), the figure this VM's drift cannot move.")
        md.append("")
        summary["create"] = {}
        def last_fifth(rows):  # the batches at the highest N (at least one)
            return rows[-max(1, len(rows) // 5):]
        md.append("| system | rate, all | rate, the last fifth of the batches |")
        md.append("|---|---|---|")
        for s, rows in bs.items():
            rates = []
            for sel in (rows, last_fifth(rows)):
                secs = sum(b["seconds"] for b in sel)
                rates.append(sum(b["count"] for b in sel) / secs if secs else None)
            summary["create"][s] = {"rate": rates[0], "rate_last_fifth": rates[1]}
            md.append(f"| {s} | {fmt(rates[0])} per s | {fmt(rates[1])} per s |")
        md.append("")
        if "ptyhub" in bs and "tmux" in bs:
            pairs = [(p, t) for p, t in zip(bs["ptyhub"], bs["tmux"])
                     if p["seconds"] > 0 and t["seconds"] > 0]
            rs = [(p["count"] / p["seconds"]) / (t["count"] / t["seconds"]) for p, t in pairs]
            last = last_fifth(rs)
            if rs:
                med, med_last = statistics.median(rs), statistics.median(last) if last else None
                summary["create"]["batch_ratio"] = {"median": med, "min": min(rs),
                                                    "max": max(rs), "median_last_fifth": med_last}
                md.append(f"ptyhub/tmux batch ratio: median {fmt_ratio(med)} (range "
                          f"{fmt_ratio(min(rs))}–{fmt_ratio(max(rs))}), in the last fifth "
                          f"{fmt_ratio(med_last)}. Per batch (ptyhub, tmux creates/s): " +
                          ", ".join(f"{p['count'] / p['seconds']:.0f}/{t['count'] / t['seconds']:.0f}"
                                    for p, t in pairs) + ".")
                md.append("")
                if med_last is not None:
                    targets.append({"target": f"create: ptyhub's rate at least tmux's up to N={n} "
                                              "(median batch ratio, last fifth)",
                                    "value": med_last, "shown": fmt_ratio(med_last),
                                    "met": med_last >= 1.0})

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
