"""One benchmark run: every workload for every system, round after round, with the order of
systems rotating."""

from __future__ import annotations

import os
import platform
import shlex
import shutil
import subprocess
import time
import urllib.parse
from datetime import datetime, timezone
from pathlib import Path

from bare import Bare
from common import (BIG, SMALL, Env, REPO, SYSTEMS, WORKLOADS, add_scrub, cpu_ns_and_switches,
                    generate_mixed_file, log, percentile, short_error)
from ptyhub_system import Ptyhub, PtyhubError, ensure_binary, resolve_binary
from tmux_system import Tmux
from watchers import FANOUT_END_CMD

# The throughput workload's ptyhub run with watchers on the terminal.
WATCHED = "ptyhub_w1"
# What the history workload's short-past terminal prints of the same file: a full screen and
# more than the 100 lines of a scrollback page.
HISTORY_SHORT_BYTES = 256 * 1024


# --------------------------------------------------------------------------------------------
# the benchmark
# --------------------------------------------------------------------------------------------

class Run:
    def __init__(self, args):
        self.args = args
        self.env = Env(keep=args.keep_tmp)
        self.errors: list[dict] = []
        self.notes: list[str] = []
        self.results: dict = {"throughput": {}, "roundtrip": {}, "memory": {}, "create": {},
                              "fanout": {}, "replay": {}}
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
        self.results["throughput_watchers"] = a.throughput_watchers
        workloads = {
            f"seq 1 {a.seq_n}": f"seq 1 {a.seq_n}",
            f"cat {a.cat_mb:g} MB mixed": f"cat {shlex.quote(str(mixed))}",
        }
        # "ptyhub_w1": ptyhub again with WebSocket watchers on the terminal (issue: the log,
        # the screen and one watcher).
        systems = list(self.systems)
        if "ptyhub" in self.systems and a.throughput_watchers:
            systems.append(WATCHED)
        res = {w: {s: {"seconds": [], "bytes": None, "errors": 0, "cpu_s": {}, "extra": []}
                   for s in systems} for w in workloads}
        self.results["throughput"] = res
        hub = None
        if "ptyhub" in self.systems:
            hub = self.hub("throughput")
        tm = Tmux(self.env, "tmux throughput") if "tmux" in self.systems else None
        bare = Bare(self.env)
        drivers = {"bare": bare, "tmux": tm, "ptyhub": hub}
        for r in range(a.rounds):
            for w, cmd in workloads.items():
                order = self.order(r)
                if WATCHED in systems:
                    # Right after ptyhub alone, so that the two meet the same machine.
                    order.insert(order.index("ptyhub") + 1, WATCHED)
                for s in order:
                    d = drivers.get("ptyhub" if s == WATCHED else s)
                    if d is None:
                        continue
                    try:
                        if s == WATCHED:
                            out = d.throughput(cmd, watchers=a.throughput_watchers)
                            res[w][s]["extra"].append(
                                {k: out[k] for k in ("exec_seconds", "watcher_s",
                                                     "lagged_watchers", "watcher_bytes")})
                        else:
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
                        if (s in ("ptyhub", WATCHED) and hub is not None
                                and hub.proc.poll() is not None):
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
            variants.append(("ptyhub_trivial", "ptyhub GET /healthz (keep-alive, the HTTP floor)"))
            variants.append(("ptyhub_ws", "ptyhub exec frame (one WebSocket)"))
            variants.append(("ptyhub_send", "ptyhub POST send until stdin_read (keep-alive)"))
        res = {v: {"label": label, "ms": [], "round_p50_ms": [], "errors": 0,
                   "error_samples": [], "cpu_us_per_op": {}, "switches_per_op": {}}
               for v, label in variants}
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
                        if v == "ptyhub_ws":
                            hub.rt_ws_open()
                        else:
                            hub.rt_open()
                        op = {"ptyhub_send": hub.rt_send_op,
                              "ptyhub_ws": hub.rt_ws_op,
                              "ptyhub_trivial": hub.rt_trivial_op}.get(v, hub.rt_op)
                        close = hub.rt_close
                except Exception as e:
                    res[v]["errors"] += 1
                    self.err(v, "roundtrip open", e, r + 1)
                    continue
                times = []
                try:
                    for _ in range(a.warmup_ops):
                        op(10**6 + _)
                    # Each process's CPU and context switches over the ops (the poll variant's
                    # tmux clients are new processes per call, not counted).
                    if v == "bare":
                        pids = d.rt_pids()
                    elif v == "tmux_ctl":
                        pids = tm.rt_pids()
                    elif v == "tmux_poll":
                        pids = {}
                    else:
                        pids = hub.rt_pids()
                    before = {role: cpu_ns_and_switches(p) for role, p in pids.items()}
                    for i in range(a.ops):
                        secs, e = op(i)
                        if e:
                            res[v]["errors"] += 1
                            if len(res[v]["error_samples"]) < 5:
                                res[v]["error_samples"].append(e)
                        times.append(secs * 1000)
                    for role, p in pids.items():
                        ns, sw = cpu_ns_and_switches(p)
                        res[v]["cpu_us_per_op"].setdefault(role, []).append(
                            (ns - before[role][0]) / 1000 / a.ops)
                        res[v]["switches_per_op"].setdefault(role, []).append(
                            (sw - before[role][1]) / a.ops)
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
                        self.stop_driver(s, d, "memory", r + 1)
                time.sleep(0.5)

    # ---- create rate, alternated
    def create(self):
        """ptyhub and tmux create `create_n` terminals each, taking turns batch by batch (the
        first to go alternates), so that both see the same machine: on a shared VM the rate of
        one system moves several-fold between minutes, which a run of each after the other
        turns into a ratio of the two minutes, not of the two systems."""
        a = self.args
        systems = [s for s in ("ptyhub", "tmux") if s in self.systems]
        res = {"n": a.create_n, "batch": a.create_batch, "systems": systems,
               "batches": {s: [] for s in systems}}
        self.results["create"] = res
        drivers = {}
        try:
            if "tmux" in systems:
                drivers["tmux"] = Tmux(self.env, "tmux create")
            if "ptyhub" in systems:
                drivers["ptyhub"] = Ptyhub(self.env, self.binary, "create")
            made = {s: 0 for s in systems}
            batch = 0
            while any(made[s] < a.create_n for s in systems):
                turn = systems if batch % 2 == 0 else list(reversed(systems))
                for s in turn:
                    k = min(a.create_batch, a.create_n - made[s])
                    if k <= 0:
                        continue
                    d = drivers[s]
                    t0 = time.perf_counter()
                    for i in range(made[s], made[s] + k):
                        if s == "tmux":
                            d.new_session(f"c{i + 1}", SMALL, [self.env.bash, "-i"])
                        else:
                            d.create(SMALL)
                    res["batches"][s].append({"after": made[s], "count": k,
                                              "seconds": time.perf_counter() - t0})
                    made[s] += k
                batch += 1
            for s in systems:
                total = sum(b["seconds"] for b in res["batches"][s])
                log(f"create {s:<7} {made[s]} in {total:.2f}s ({made[s] / total:.0f}/s)")
        except Exception as e:
            self.err("harness", "create", e)
        finally:
            for s, d in drivers.items():
                self.stop_driver(s, d, "create")

    def stop_driver(self, system: str, d, workload: str, round_=None):
        """Ends what a tmux or ptyhub driver started (its server, terminals and holders)."""
        try:
            if system == "tmux":
                d.kill_server()
            else:
                d.stop()
        except Exception as e:
            self.err(system, f"{workload} cleanup", e, round_)

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
        for r in range(a.fanout_rounds):
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

    def mixed_file(self, name: str, mb: float) -> Path:
        """A mixed ANSI/UTF-8 file of `mb` MB for a workload; its description goes to the
        results as `<name>_file`."""
        path = self.env.data / f"{name}.txt"
        log(f"generating the {mb:g} MB {name} file")
        self.results[f"{name}_file"] = generate_mixed_file(path, int(mb * 1_000_000))
        return path

    # ---- replay
    def replay(self):
        a = self.args
        if "ptyhub" not in self.systems:
            return
        path = self.mixed_file("replay", a.replay_mb)
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

    # ---- history: does an agent's call cost more on a terminal with a long past?
    def history(self):
        a = self.args
        if "ptyhub" not in self.systems:
            return
        path = self.mixed_file("history", a.history_mb)
        self.results["history_file"]["short_bytes"] = HISTORY_SHORT_BYTES
        res = {"empty": {}, "short": {}, "long": {}, "errors": 0, "log_bytes": {},
               "scrollback_lines": {}}
        self.results["history"] = res
        hub = self.hub("history")
        if hub is None:
            return
        try:
            ids = {}
            for name in ("empty", "short", "long"):
                ids[name] = hub.create(BIG)
                hub.wait_prompt(ids[name])
            # A short past: the start of the same file, enough for a full screen and full
            # scrollback pages, so that its answers are as big as the long terminal's.
            hub.exec(ids["short"], f"head -c {HISTORY_SHORT_BYTES} {shlex.quote(str(path))}",
                     truncate=True, timeout=60)
            t0 = time.perf_counter()
            hub.exec(ids["long"], f"cat {shlex.quote(str(path))}", truncate=True, timeout=600)
            log(f"history: printed {a.history_mb:g} MB in {time.perf_counter() - t0:.1f} s")
            # The screen follows the log in the background; one read makes it catch up.
            for name in ("short", "long"):
                hub.ok("GET", f"/v2/pty/sessions/{urllib.parse.quote(ids[name])}/screen")
            time.sleep(2)
            # A wait (and an exec's answer) returns at most exec's truncated ends of a long
            # output: what does answering the command that printed it all cost?
            res["wait_long_command_ms"] = []
            for _ in range(5):
                t0 = time.perf_counter()
                answer = hub.ok("POST", f"/v2/pty/sessions/{urllib.parse.quote(ids['long'])}/wait",
                                {"seconds": 30})
                res["wait_long_command_ms"].append((time.perf_counter() - t0) * 1e3)
                res["wait_long_command_chars"] = len(answer.get("output") or "")
            log(f"history: wait on the long command "
                f"{percentile(res['wait_long_command_ms'], 50):.1f} ms, "
                f"{res['wait_long_command_chars']} characters")
            for name, sid in ids.items():
                res["log_bytes"][name] = hub.log_bytes(sid)
            names = ["empty", "short", "long"]
            for i in range(a.history_ops):
                for name in (names if i % 2 == 0 else names[::-1]):
                    try:
                        calls = hub.history_calls(ids[name])
                    except Exception as e:
                        res["errors"] += 1
                        self.err("ptyhub", f"history {name}", e, i + 1)
                        continue
                    res["scrollback_lines"][name] = calls.pop("scrollback_total_lines")
                    for kind, ms in calls.items():
                        res[name].setdefault(kind, []).append(ms)
            for kind in res["long"]:
                log(f"history {kind:<18} empty {percentile(res['empty'].get(kind) or [0], 50):.2f}"
                    f" ms, long {percentile(res['long'][kind], 50):.2f} ms")
        except Exception as e:
            res["errors"] += 1
            self.err("ptyhub", "history", e)
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
