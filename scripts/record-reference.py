#!/usr/bin/env python3
"""Records the reference terminals that crates/core/tests/suite/reference.rs replays.

Run by hand after a change that is meant to alter what shells print (the test only reads the
checked-in files):

    cargo build -p ptyhub
    python3 scripts/record-reference.py            # every shell and case
    python3 scripts/record-reference.py bash-flood # one case
    PTYHUB_BLESS=1 cargo test -p ptyhub-core --test all -- suite::reference

It starts the built binary ($CARGO_TARGET_DIR/debug/ptyhub, else target/debug/ptyhub) on
throwaway state and runtime dirs, with HOME a fresh directory holding empty rc files and a
minimal environment, so nothing of this machine's user or project reaches a recording. For
each case it opens one terminal over REST v2, waits until the shell is quiet before each exec
and notes the log's last `seq` then (the point where the actor submits the command, which is
what the replay mirrors), drives the case, closes the terminal and writes into
crates/core/tests/ref/<shell>-<case>/:

- events.jsonl: the terminal's event log, as the holder wrote it;
- terminal.json: nonce, shell kind, cols, rows, and each exec with its submission point;
- rest.json: what the REST calls answered while recording (the test compares the replay to
  these answers).

Only the Python standard library is used. Every process it starts is ended before it exits.
"""

import json
import os
import shutil
import signal
import subprocess
import sys
import time
import urllib.error
import urllib.request
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
REF_DIR = ROOT / "crates" / "core" / "tests" / "ref"
TOKEN = "reference-recorder-token"
BASE = Path("/tmp/ptyhub-ref")
COLS, ROWS = 80, 24
# The log counts as quiet once its last seq has not moved for this long.
QUIET_SECS = 0.6
WAIT_LIMIT_SECS = 30

SHELLS = {"bash": "bash", "zsh": "zsh", "sh": "dash"}

MULTI_LINE = 'echo one\necho two\nfor i in 1 2 3; do\n  echo "n=$i"\ndone'
HEREDOC_QUOTED = "cat <<'EOF'\nline one\n  indented $X and `tick`\nEOF"
HEREDOC_PIPED = "cat <<EOF | wc -l\na\nb\nc\nEOF"


def ps1_change(shell):
    # dash's integration lives in PS1 itself: a prompt change keeps the marks by keeping their
    # part of PS1 (replacing PS1 wholesale would lose them; see the report of the recording).
    if shell == "sh":
        return 'PS1="${PS1%\\$ }custom> "'
    return "PS1='custom> '"


def cases(shell):
    """Each case is a list of steps: ("exec", command) waits for the result;
    ("exec_async", command) returns at once; ("input", text); ("wait",) waits for the result."""
    return {
        "multi-line": [("exec", MULTI_LINE), ("exec", "false")],
        "heredoc": [("exec", HEREDOC_QUOTED), ("exec", HEREDOC_PIPED)],
        "ctrl-c": [("exec_async", "sleep 30"), ("input", "\x03"), ("wait",), ("exec", "echo after")],
        "exit": [("exec", "echo before"), ("exec", "exit 3")],
        "ps1": [("exec", ps1_change(shell)), ("exec", "echo after")],
        "flood": [("exec", "seq 1 12000"), ("exec", "echo done")],
    }


class Server:
    def __init__(self, exe, base):
        self.base = base
        self.state = base / "state"
        self.runtime = base / "runtime"
        self.home = base / "home"
        for d in (self.state, self.runtime, self.home):
            d.mkdir(mode=0o700)
        for rc in (".bashrc", ".zshrc", ".profile"):
            (self.home / rc).write_text("")
        env = {
            "PATH": "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin",
            "HOME": str(self.home),
            "LANG": "C.UTF-8",
            "XDG_RUNTIME_DIR": str(self.runtime),
        }
        self.proc = subprocess.Popen(
            [exe, "serve", "--state-dir", str(self.state), "--runtime-dir", str(self.runtime),
             "--listen", "127.0.0.1:0", "--token", TOKEN],
            env=env, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, text=True,
            start_new_session=True,
        )
        self.url = None
        for line in self.proc.stdout:
            line = line.strip()
            if line.startswith("url:"):
                self.url = line[len("url:"):].strip().rstrip("/")
            elif line.startswith("web:"):
                break
        if not self.url:
            raise SystemExit("ptyhub exited before printing its url")
        self.holders = []

    def call(self, method, path, body=None, timeout=120):
        data = None if body is None else json.dumps(body).encode()
        req = urllib.request.Request(self.url + path, data=data, method=method)
        req.add_header("Authorization", "Bearer " + TOKEN)
        req.add_header("Content-Type", "application/json")
        try:
            with urllib.request.urlopen(req, timeout=timeout) as resp:
                return json.loads(resp.read())
        except urllib.error.HTTPError as error:
            return json.loads(error.read())

    def last_seq(self, tid):
        answer = self.call("GET", f"/v2/pty/sessions/{tid}/events?after_seq=0&limit=1")
        return answer["data"]["last_seq"]

    def wait_quiet(self, tid):
        """Waits until the log has not grown for QUIET_SECS; returns its last seq."""
        deadline = time.monotonic() + WAIT_LIMIT_SECS
        last, since = self.last_seq(tid), time.monotonic()
        while time.monotonic() < deadline:
            time.sleep(0.1)
            now = self.last_seq(tid)
            if now != last:
                last, since = now, time.monotonic()
            elif last > 0 and time.monotonic() - since >= QUIET_SECS:
                return last
        raise SystemExit(f"{tid}: the log never went quiet")

    def stop(self):
        for pid in self.holders:
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()


def record(server, shell, case, steps, cwd):
    tid = f"{shell}-{case}"
    created = server.call("POST", "/v2/pty/sessions", {
        "id": tid, "cwd": str(cwd), "shell": SHELLS[shell], "cols": COLS, "rows": ROWS,
    })
    if not created.get("success"):
        raise SystemExit(f"{tid}: cannot create: {created}")
    execs, answers = [], []
    for step in steps:
        kind = step[0]
        if kind in ("exec", "exec_async"):
            command = step[1]
            submitted_after = server.wait_quiet(tid)
            body = {"command": command, "async": kind == "exec_async"}
            answer = server.call("POST", f"/v2/pty/sessions/{tid}/exec", body)
            execs.append({"command": command, "submitted_after_seq": submitted_after})
            answers.append({"exec": len(execs) - 1, "call": "exec", "params": body,
                            "answer": answer})
        elif kind == "input":
            server.wait_quiet(tid)
            body = {"input": step[1]}
            answer = server.call("POST", f"/v2/pty/sessions/{tid}/input", body)
            answers.append({"exec": len(execs) - 1, "call": "input", "params": body,
                            "answer": answer})
        elif kind == "wait":
            body = {"seconds": WAIT_LIMIT_SECS}
            answer = server.call("POST", f"/v2/pty/sessions/{tid}/wait", body)
            answers.append({"exec": len(execs) - 1, "call": "wait", "params": body,
                            "answer": answer})
    server.wait_quiet(tid)
    screen = server.call("GET", f"/v2/pty/sessions/{tid}/screen")
    answers.append({"exec": None, "call": "screen", "params": None, "answer": screen})
    closed = server.call("DELETE", f"/v2/pty/sessions/{tid}")
    answers.append({"exec": None, "call": "close", "params": None, "answer": closed})

    [term_dir] = list(server.state.glob(f"home/*/agent/*/session/*/terminal/{tid}"))
    meta = json.loads((term_dir / "meta.json").read_text())
    if meta.get("holder_pid"):
        server.holders.append(meta["holder_pid"])
    if list(term_dir.glob("events.*.jsonl")):
        raise SystemExit(f"{tid}: the log rotated; keep the recording smaller")
    out = REF_DIR / tid
    if out.exists():
        shutil.rmtree(out)
    out.mkdir(parents=True)
    shutil.copyfile(term_dir / "events.jsonl", out / "events.jsonl")
    terminal = {
        "nonce": meta["integration_nonce"],
        "shell": meta["shell"],
        "cols": meta["cols"],
        "rows": meta["rows"],
        "execs": execs,
    }
    (out / "terminal.json").write_text(json.dumps(terminal, indent=2) + "\n")
    (out / "rest.json").write_text(json.dumps(answers, indent=2, ensure_ascii=False) + "\n")
    check_private(out, [str(ROOT), str(Path.home()), os.environ.get("USER", "")])
    size = (out / "events.jsonl").stat().st_size
    print(f"{tid}: {len(execs)} execs, {size} bytes of log")


def check_private(out, needles):
    """A recording must not name this machine's paths."""
    import base64
    for path in out.iterdir():
        text = path.read_text()
        if path.name == "events.jsonl":
            for line in text.splitlines():
                event = json.loads(line)
                if "data_b64" in event:
                    text += base64.b64decode(event["data_b64"]).decode("utf-8", "replace")
        for needle in needles:
            if needle and needle != "/" and needle in text:
                raise SystemExit(f"{path} contains {needle!r}")


def main():
    target = os.environ.get("CARGO_TARGET_DIR", str(ROOT / "target"))
    exe = os.path.join(target, "debug", "ptyhub")
    if not os.access(exe, os.X_OK):
        raise SystemExit(f"build first: {exe} is missing (cargo build -p ptyhub)")
    wanted = set(sys.argv[1:])
    # A fixed, neutral place: the paths a shell prints (a prompt with the directory, the
    # integration file in the start event) are then the same on every machine.
    base = BASE
    if base.exists():
        shutil.rmtree(base)
    base.mkdir(mode=0o700)
    cwd = base / "cwd"
    cwd.mkdir()
    server = Server(exe, base)
    try:
        for shell in SHELLS:
            for case, steps in cases(shell).items():
                if not wanted or f"{shell}-{case}" in wanted:
                    record(server, shell, case, steps, cwd)
    finally:
        server.stop()
        shutil.rmtree(base, ignore_errors=True)


if __name__ == "__main__":
    main()
