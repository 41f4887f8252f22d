"""ptyhub as a system under test: the server over HTTP and its local socket, exec, memory,
fan-out watchers and replay; finding or building the release binary."""

from __future__ import annotations

import fcntl
import glob
import hashlib
import http.client
import json
import os
import signal
import socket
import statistics
import subprocess
import threading
import time
import urllib.parse
from pathlib import Path

import live_client  # bench/live_client.py: the WebSocket client and the watcher process
from common import BIG, BenchError, CLK_TCK, Env, REPO, SMALL, cpu_ticks, kill_pid, log, machine_ticks, proc_alive, proc_cmdline, read_pss, short_error, sum_pss, wait_cpu_settled
from watchers import (FANOUT_END_CMD, FANOUT_MARKER, F_SETPIPE_SZ, Watchers, check_kept,
                      check_streams)


# --------------------------------------------------------------------------------------------
# ptyhub
# --------------------------------------------------------------------------------------------

class OneWriteConnection(http.client.HTTPConnection):
    """http.client with each request sent in one write, head and body together.

    `HTTPConnection` sends the head and the body of a request in two `send` calls; with
    TCP_NODELAY they leave as two segments, and the server wakes for the head, then waits for
    the body while the interpreter gets to its second call. That wait is the client's, yet
    only requests with a body pay it (GET /healthz, the floor an exec's own part is counted
    above, does not), so every request here goes out as one write, as a client that builds
    its request first (curl, hyper) sends it.
    """

    def _send_output(self, message_body=None, encode_chunked=False):
        if not isinstance(message_body, bytes):
            return super()._send_output(message_body, encode_chunked)
        self._buffer.extend((b"", b""))
        head = b"\r\n".join(self._buffer)
        del self._buffer[:]
        self.send(head + message_body)


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
        c = OneWriteConnection(self.host, self.port, timeout=900)
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
            try:
                conn.request(method, self.base + path, body=payload, headers=headers)
                resp = conn.getresponse()
            except (http.client.RemoteDisconnected, BrokenPipeError, ConnectionResetError):
                if not own:
                    raise
                # The server closed the idle keep-alive connection (its header timeout):
                # send again on a fresh one, as HTTP clients do.
                conn.close()
                self.conn = conn = self._connect()
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

    def metric(self, name: str) -> float | None:
        """The value of the unlabelled metric `name` at `/metrics` (None when it has none)."""
        conn = self._connect()
        try:
            conn.request("GET", self.base + "/metrics",
                         headers={"Authorization": f"Bearer {self.token}"})
            text = conn.getresponse().read().decode(errors="replace")
        finally:
            conn.close()
        for line in text.splitlines():
            if line.startswith(name + " "):
                return float(line.split()[1])
        return None

    def wait_screens_asleep(self, n: int, timeout: float = 30) -> float | None:
        """Waits until `n` screens are asleep (an idle terminal's steady state, docs/memory.md);
        seconds waited, or None when the server has no such metric or they did not."""
        t0 = time.perf_counter()
        while time.perf_counter() - t0 < timeout:
            asleep = self.metric("ptyhub_screens_asleep")
            if asleep is None:
                return None
            if asleep >= n:
                return time.perf_counter() - t0
            time.sleep(0.25)
        return None

    def ok(self, method, path, body=None, conn=None) -> dict:
        status, doc = self.request(method, path, body, conn)
        if status >= 300 or not doc.get("success"):
            raise PtyhubError(f"{method} {path} -> HTTP {status}: {json.dumps(doc)[:500]}")
        return doc.get("data") or {}

    def create(self, size) -> str:
        # The native backend (a holder over a PTY), ptyhub's own path: with tmux installed,
        # `auto` would host explicitly created terminals in a tmux server each.
        data = self.ok("POST", "/v2/pty/sessions",
                       {"cwd": str(self.env.work), "cols": size[0], "rows": size[1],
                        "shell": self.env.bash, "backend": "native"})
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
        """Fallback: holders of this binary (its `holder` subcommand, or the `ptyhub-holder`
        beside it) for this server's terminals only (a descriptor open in its state or runtime
        dir), never another's."""
        pids = []
        real = {os.path.realpath(self.binary),
                os.path.realpath(os.path.join(os.path.dirname(self.binary), "ptyhub-holder"))}
        mine = (os.path.realpath(self.state) + os.sep, os.path.realpath(self.runtime) + os.sep)
        for d in os.listdir("/proc"):
            if not d.isdigit():
                continue
            argv = proc_cmdline(int(d))
            if len(argv) >= 2 and argv[1] == "holder":
                try:
                    exe = os.path.realpath(f"/proc/{d}/exe")
                except OSError:
                    continue
                if exe.replace(" (deleted)", "") in real and self._opens_under(int(d), mine):
                    pids.append(int(d))
        return pids

    @staticmethod
    def _opens_under(pid: int, dirs: tuple[str, ...]) -> bool:
        """Whether process `pid` has a descriptor open on a path under one of `dirs`."""
        try:
            fds = os.listdir(f"/proc/{pid}/fd")
        except OSError:
            return False
        for fd in fds:
            try:
                target = os.readlink(f"/proc/{pid}/fd/{fd}")
            except OSError:
                continue
            if target.startswith(dirs):
                return True
        return False

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
    def throughput(self, cmd: str, watchers: int = 0) -> dict:
        """With `watchers`, that many WebSockets (`mode=watch`, binary) follow the terminal
        from before the producer starts; the command then ends with the fan-out marker, and
        the time is until both the exec answered and every watcher got the marker."""
        sid = self.create(BIG)
        streams = None
        try:
            self.wait_prompt(sid)
            holder = [m.get("holder_pid") for m in self.metas() if m.get("id") == sid]
            holder = [holder[0]] if holder and holder[0] else []
            if watchers:
                cmd = f"{cmd} && {FANOUT_END_CMD}"
                streams = Watchers(self.env, dict(
                    marker=FANOUT_MARKER, keep={}, kind="ws", unix=self.socket, n=watchers,
                    path=f"/v2/pty/sessions/{urllib.parse.quote(sid)}/ws"
                         f"?mode=watch&protocol=binary"))
                streams.wait_ready()
            c0 = (cpu_ticks([self.proc.pid]), cpu_ticks(holder))
            t0 = time.monotonic()
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
            out = {"seconds": secs, "output_chars": len(data.get("output") or ""), "cpu_s": cpu}
            if streams is not None:
                seen = check_streams(streams.finish(), t0, None, same_bytes=True)
                out.update(exec_seconds=secs, watcher_s=seen["last_watcher_s"],
                           lagged_watchers=seen["lagged_watchers"],
                           watcher_bytes=seen["watcher_bytes"][0],
                           seconds=max(secs, seen["last_watcher_s"]))
            return out
        finally:
            if streams is not None:
                streams.close()
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

    def log_bytes(self, sid: str) -> int:
        """Bytes of the terminal's event log on disk (every kept segment)."""
        pattern = str(self.state / "home" / "*" / "agent" / "*" / "session" / "*" /
                      "terminal" / sid / "events*.jsonl")
        return sum(os.path.getsize(p) for p in glob.glob(pattern))

    def history_calls(self, sid: str) -> dict:
        """One call of each kind an agent makes of a terminal, each timed (ms)."""
        q = urllib.parse.quote(sid)

        def timed(method, path, body=None, check=None):
            t0 = time.perf_counter()
            data = self.ok(method, path, body)
            ms = (time.perf_counter() - t0) * 1e3
            if check is not None and not check(data):
                raise PtyhubError(f"{method} {path}: unexpected answer {json.dumps(data)[:300]}")
            return ms, data

        out = {}
        out["exec"], _ = timed("POST", f"/v2/pty/sessions/{q}/exec",
                               {"command": "true", "timeout": 30},
                               lambda d: d.get("exit_code") == 0)
        out["send"], _ = timed("POST", f"/v2/pty/sessions/{q}/send",
                               {"text": "true", "submit": True, "deadline": 30},
                               lambda d: d.get("wait_reason") == "stdin_read")
        out["observe"], _ = timed("GET", f"/v2/pty/sessions/{q}/observe")
        out["snapshot"], _ = timed("GET", f"/v2/pty/sessions/{q}/snapshot")
        out["scrollback"], page = timed("GET", f"/v2/pty/sessions/{q}/scrollback?offset=0&lines=100")
        total = int(page.get("total") or 0)
        oldest = max(total - 100, 0)
        out["scrollback oldest"], _ = timed(
            "GET", f"/v2/pty/sessions/{q}/scrollback?offset={oldest}&lines=100")
        out["scrollback_total_lines"] = total
        return out

    def rt_trivial_op(self, i: int) -> tuple[float, str | None]:
        """GET /healthz on the round trip's connection: the HTTP floor of this client and server,
        which an exec's own part is counted above."""
        t0 = time.perf_counter()
        status, doc = self.request("GET", "/healthz", None, self.rt_conn)
        secs = time.perf_counter() - t0
        return secs, None if status == 200 else f"HTTP {status}: {json.dumps(doc)[:300]}"

    def rt_pids(self) -> dict[str, list[int]]:
        """The processes a round trip runs through, by role (for their CPU per op)."""
        meta = next((m for m in self.metas() if m.get("id") == self.rt_sid), {})
        return {"server": [self.proc.pid], "holder": [meta.get("holder_pid")],
                "shell": [meta.get("pid")]}

    def rt_send_op(self, i: int) -> tuple[float, str | None]:
        """`send` of `echo hi` until the shell reads again: what an agent waits for a step."""
        t0 = time.perf_counter()
        status, doc = self.request("POST", f"/v2/pty/sessions/{urllib.parse.quote(self.rt_sid)}/send",
                                   {"text": "echo hi", "submit": True, "deadline": 30},
                                   self.rt_conn)
        secs = time.perf_counter() - t0
        data = doc.get("data") or {}
        err = None
        if status >= 300 or not doc.get("success"):
            err = f"HTTP {status}: {json.dumps(doc)[:300]}"
        elif data.get("wait_reason") != "stdin_read" or data.get("command_exit_code") != 0:
            err = (f"wait_reason={data.get('wait_reason')!r} "
                   f"command_exit_code={data.get('command_exit_code')!r}")
        elif "hi" not in (data.get("output") or "").splitlines():
            err = f"output={data.get('output')!r}"
        return secs, err

    def rt_ws_open(self, local: bool = False):
        """The round trip over a persistent connection: an `attach` WebSocket (binary output,
        no presence) whose `exec` frames run `echo hi` (docs/websocket.md#commands), over TCP
        or, `local`, over the server's local unix socket."""
        self.rt_open()
        path = (f"/v2/pty/sessions/{urllib.parse.quote(self.rt_sid)}/ws"
                f"?mode=attach&protocol=binary&presence=false")
        if local:
            self.rt_ws, self.rt_ws_buf = live_client.connect(path, unix=self.socket)
        else:
            self.rt_ws, self.rt_ws_buf = live_client.connect(path, tcp=(self.host, self.port),
                                                             token=self.token)
            self.rt_ws.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        self.rt_ws_parser = live_client.FrameParser(lambda piece: None)
        self.rt_ws_op(-1)

    def rt_ws_op(self, i: int) -> tuple[float, str | None]:
        rid = str(i)
        frame = json.dumps({"type": "exec", "request_id": rid,
                            "params": {"command": "echo hi", "timeout": 30}}).encode()
        t0 = time.perf_counter()
        live_client.send_frame(self.rt_ws, live_client.OP_TEXT, frame)
        answer = None
        data = self.rt_ws_buf
        self.rt_ws_buf = b""
        while answer is None:
            if not data:
                data = self.rt_ws.recv(live_client.READ_BYTES)
                if not data:
                    return time.perf_counter() - t0, "the connection closed"
            for op, payload in self.rt_ws_parser.feed(data):
                if op == live_client.OP_TEXT and b'"exec_result"' in payload:
                    doc = json.loads(payload)
                    if doc.get("request_id") == rid:
                        answer = doc
                elif op == live_client.OP_CLOSE:
                    return time.perf_counter() - t0, f"closed ({payload!r})"
            data = b""
        secs = time.perf_counter() - t0
        result = answer.get("result") or {}
        err = None
        if answer.get("error"):
            err = f"error {json.dumps(answer['error'])[:300]}"
        elif result.get("status") != "completed" or result.get("exit_code") != 0:
            err = f"status={result.get('status')!r} exit_code={result.get('exit_code')!r}"
        elif (result.get("output") or "").rstrip("\r\n") != "hi":
            err = f"output={result.get('output')!r}"
        return secs, err

    def rt_close(self):
        ws = getattr(self, "rt_ws", None)
        if ws is not None:
            self.rt_ws = None
            try:
                live_client.send_frame(ws, live_client.OP_CLOSE, (1000).to_bytes(2, "big"))
                ws.close()
            except OSError:
                pass
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
            # The prompt checks read (and so woke) every screen: measure once they sleep
            # again, as an idle terminal's do.
            asleep_s = self.wait_screens_asleep(len(metas))
            time.sleep(1.0)
            hpss, hrss, huss, hfound = sum_pss(holders)
            spss, srss, suss, sfound = sum_pss(shells)
            server = read_pss(self.proc.pid)
            latency = self.cold_latencies(ids)
            out["per_n"][n] = {
                "n": n, "new": n - before, "found_holders": hfound, "found_shells": sfound,
                "holder_pid_source": source, "create_s": created_s, "prompt_wait_s": prompt_s,
                "holder_pss_kib": hpss, "holder_rss_kib": hrss, "holder_uss_kib": huss,
                "shell_pss_kib": spss, "shell_rss_kib": srss, "shell_uss_kib": suss,
                "server_pss_kib": server[0] if server else None,
                "server_rss_kib": server[1] if server else None,
                "server_uss_kib": server[2] if server else None,
                "settle_s": settle, "screens_asleep_wait_s": asleep_s, "latency_ms": latency,
            }
        return out

    def cold_latencies(self, ids: list[str], k: int = 5) -> dict:
        """With every terminal idle (their screens asleep): medians in ms of a list of all
        terminals, of a snapshot (`GET …/screen`) of `k` cold terminals, of an exec of `true`
        in `k` other cold ones and of a send of `true` until the shell reads in `k` more (the
        oldest ones: first in, longest asleep)."""
        def timed(method, path, body=None):
            t0 = time.perf_counter()
            self.ok(method, path, body)
            return (time.perf_counter() - t0) * 1e3
        lists = [timed("GET", "/v2/pty/sessions") for _ in range(k)]
        cold = ids[: 3 * k]
        snaps = [timed("GET", f"/v2/pty/sessions/{urllib.parse.quote(sid)}/screen")
                 for sid in cold[:k]]
        execs = [timed("POST", f"/v2/pty/sessions/{urllib.parse.quote(sid)}/exec",
                       {"command": "true"}) for sid in cold[k:2 * k]]
        sends = [timed("POST", f"/v2/pty/sessions/{urllib.parse.quote(sid)}/send",
                       {"text": "true", "submit": True, "deadline": 30})
                 for sid in cold[2 * k:]]
        return {"list": statistics.median(lists), "snapshot": statistics.median(snaps),
                "exec": statistics.median(execs) if execs else None,
                "send": statistics.median(sends) if sends else None}


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


def resolve_builds(specs: list[str]) -> tuple[list[tuple[str, Path]], list[str]]:
    """The builds named by `--ptyhub LABEL=PATH` options (the release build when none),
    and a note on each (its file's time) plus the harness's commit, for a report."""
    builds = []
    for spec in specs or [""]:
        label, _, path = spec.rpartition("=") if "=" in spec else ("ptyhub", "", spec)
        binary, _ = resolve_binary(path or None)
        builds.append((label or "ptyhub", binary))
    notes = [f"build `{label}`: {binary.name}, modified "
             f"{time.strftime('%Y-%m-%d %H:%M', time.gmtime(binary.stat().st_mtime))} UTC"
             for label, binary in builds]
    commit = subprocess.run(["git", "-C", str(REPO), "rev-parse", "--short", "HEAD"],
                            capture_output=True, text=True).stdout.strip()
    if commit:
        notes.append(f"harness at commit {commit}")
    return builds, notes


def write_results(out: str, suffix: str, md: str, doc: dict) -> None:
    """Writes a report as `<out>/<UTC timestamp>-<suffix>.md` and `.json`."""
    folder = Path(out)
    folder.mkdir(parents=True, exist_ok=True)
    stamp = time.strftime("%Y%m%dT%H%M%SZ", time.gmtime())
    (folder / f"{stamp}-{suffix}.md").write_text(md)
    (folder / f"{stamp}-{suffix}.json").write_text(json.dumps(doc, indent=1))


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
