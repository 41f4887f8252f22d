"""tmux as a system under test: sessions, throughput, round trips (send-keys and control
mode), memory, and read-only clients for fan-out."""

from __future__ import annotations

import os
import re
import select
import shlex
import signal
import subprocess
import time

from bare import spawn_on_pty
from common import (BIG, BenchError, CLK_TCK, Env, SMALL, cpu_ticks, gated, is_zombie, kill_pid,
                    machine_ticks, open_gate_writer, proc_alive, read_pss, sum_pss,
                    wait_cpu_settled)
from watchers import FANOUT_MARKER, Watchers, check_streams


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
            pane = int(self.cmd("display-message", "-p", "-t", s, "#{pane_pid}").strip())
            wfd = open_gate_writer(fifo)
            c0 = cpu_ticks([self.server_pid])
            t0 = time.perf_counter()
            os.write(wfd, b"\n")
            os.close(wfd)
            # Debian's tmux links libutempter, whose helper's SIGCHLD handler can take the
            # signal of the pane's exit: the pane's shell stays a zombie that tmux never reaps
            # (about 1 run in 10), and pane-died never fires. A second SIGCHLD makes it reap at
            # once; looking every 10 ms keeps what that adds to tmux's time under 10 ms.
            kicks = 0
            deadline = time.monotonic() + 120
            while True:
                try:
                    waiter.wait(timeout=0.01)
                    break
                except subprocess.TimeoutExpired:
                    pass
                if is_zombie(pane):
                    kicks += 1
                    kill_pid(self.server_pid, signal.SIGCHLD)
                if time.monotonic() > deadline:
                    waiter.kill()
                    raise BenchError("tmux: pane did not die within 120 s (a lost pane-died hook)")
            t1 = time.perf_counter()
            c1 = cpu_ticks([self.server_pid])
            state = self.cmd("display-message", "-p", "-t", s,
                             "#{pane_dead} #{pane_dead_status}").split()
            if state != ["1", "0"]:
                raise BenchError(f"tmux: pane state after run {state} (want dead, status 0)")
            out = {"seconds": t1 - t0, "cpu_s": {"server": (c1 - c0) / CLK_TCK}}
            if kicks:
                out["sigchld_kicks"] = kicks
            return out
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

    def rt_pids(self) -> dict[str, list[int]]:
        """The processes a control-mode round trip runs through, by role."""
        shell = int(self.cmd("display-message", "-p", "-t", self.rt_session, "#{pane_pid}").strip())
        return {"server": [self.server_pid], "shell": [shell], "control client": [self.ctl.pid]}

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
