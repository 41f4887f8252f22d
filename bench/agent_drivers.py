"""The agent benchmark's drivers: how an agent harness drives a terminal through each system.

- `ptyhub` (REST v2): shell commands with `exec`, programs that talk back with `send`; the
  answer's wait reason, exit code and screen state say what happened (one call per step).
- `ptyhub-mcp`: the same through `ptyhub mcp` (stdio) and the official MCP client SDK.
- `tmux`: what agent harnesses do with tmux today: `send-keys`, then `capture-pane` once a
  second until the screen is still for two captures (or the step's deadline), then judge the
  state from the last line (a prompt means done, anything else means it waits for input), and
  `echo $?` for an exit code.

Each step's result: the state the driver concluded, everything it was given (text), the exit
code it reports, and its calls, calls that returned nothing new, characters returned and wall
time. Characters are those of the answers as the agent receives them (the JSON of a ptyhub
answer, the tool result's text, a capture's screen).
"""

from __future__ import annotations

import asyncio
import json
import re
import shlex
import subprocess
import time
import urllib.parse
from dataclasses import dataclass, field

from agent_scenarios import Scenario, Step

PROMPT_END = re.compile(r"[$#]\s*$")
IDLE_WINDOW = 3.0


@dataclass
class StepResult:
    state: str
    text: str = ""
    exit_code: int | None = None
    calls: int = 0
    empty_calls: int = 0
    chars: int = 0
    seconds: float = 0.0
    notes: list[str] = field(default_factory=list)


def ptyhub_state(answer: dict, via_exec: bool) -> tuple[str, int | None]:
    """The state and exit code an agent reads off a ptyhub answer."""
    if via_exec:
        status = answer.get("status")
        if status in ("completed", "no_change_timeout", "hard_timeout"):
            return "done", answer.get("exit_code")
        if answer.get("wait_reason") == "stdin_read":
            return ("screen" if answer.get("is_full_screen") else "input"), None
        return "busy", None
    reason = answer.get("wait_reason")
    if reason == "session_exit":
        return "exited", answer.get("exit_code")
    if reason == "stdin_read":
        if answer.get("is_at_prompt"):
            return "done", answer.get("command_exit_code")
        return ("screen" if answer.get("is_full_screen") else "input"), None
    return "busy", None


def answer_text(answer: dict) -> str:
    return str(answer.get("output") or answer.get("output_so_far") or "")


class PtyhubRest:
    """ptyhub over REST v2 (one terminal per scenario)."""

    name = "ptyhub"

    def __init__(self, server):
        self.server = server

    def _call(self, method: str, path: str, body: dict) -> tuple[dict, int]:
        status, doc = self.server.request(method, path, body)
        data = doc.get("data") if doc.get("success") else doc
        return data or {}, len(json.dumps(data, separators=(",", ":")))

    def run(self, scenario: Scenario, work) -> list[StepResult]:
        sid = self.server.create((120, 40))
        path = f"/v2/pty/sessions/{urllib.parse.quote(sid)}"
        results = []
        try:
            for step in scenario.steps:
                time.sleep(step.pause_before)
                t0 = time.perf_counter()
                via_exec = step.kind == "command"
                if via_exec:
                    body = {"command": step.text, "timeout": step.deadline}
                    answer, chars = self._call("POST", f"{path}/exec", body)
                else:
                    body = {"text": step.text or "", "submit": step.submit and bool(step.text),
                            "deadline": step.deadline, "idle_window": IDLE_WINDOW}
                    answer, chars = self._call("POST", f"{path}/send", body)
                state, code = ptyhub_state(answer, via_exec)
                text = answer_text(answer)
                results.append(StepResult(state, text, code, 1, int(not text.strip()), chars,
                                          time.perf_counter() - t0))
        finally:
            self.server.delete(sid)
        return results


class PtyhubMcp:
    """ptyhub through `ptyhub mcp` (stdio) and the official MCP client SDK."""

    name = "ptyhub-mcp"

    def __init__(self, binary, socket_path):
        self.binary = str(binary)
        self.socket = socket_path

    def run(self, scenario: Scenario, work) -> list[StepResult]:
        return asyncio.run(self._run(scenario, work))

    async def _run(self, scenario: Scenario, work) -> list[StepResult]:
        from mcp import ClientSession, StdioServerParameters
        from mcp.client.stdio import stdio_client

        params = StdioServerParameters(command=self.binary,
                                       args=["--socket", self.socket, "mcp"])
        results = []
        async with stdio_client(params) as (read, write):
            async with ClientSession(read, write) as session:
                await session.initialize()
                opened = await session.call_tool("terminal_open", {"cwd": str(work)})
                sid = json.loads(opened.content[0].text)["session_id"]
                try:
                    for step in scenario.steps:
                        await asyncio.sleep(step.pause_before)
                        t0 = time.perf_counter()
                        via_exec = step.kind == "command"
                        if via_exec:
                            call = ("terminal_exec",
                                    {"id": sid, "command": step.text, "timeout": step.deadline})
                        else:
                            call = ("terminal_send",
                                    {"id": sid, "text": step.text or "",
                                     "submit": step.submit and bool(step.text),
                                     "deadline": step.deadline, "idle_window": IDLE_WINDOW})
                        result = await session.call_tool(*call)
                        raw = result.content[0].text if result.content else ""
                        try:
                            answer = json.loads(raw)
                        except ValueError:
                            answer = {"error": raw}
                        state, code = ptyhub_state(answer, via_exec)
                        text = answer_text(answer)
                        results.append(StepResult(state, text, code, 1, int(not text.strip()),
                                                  len(raw), time.perf_counter() - t0))
                finally:
                    await session.call_tool("terminal_close", {"id": sid})
        return results


class TmuxScraper:
    """tmux driven as agent harnesses do: send-keys, then capture-pane polling."""

    name = "tmux"
    POLL_EVERY = 1.0

    def __init__(self, tmux):
        self.tmux = tmux

    def _capture(self, session: str) -> str:
        return self.tmux.cmd("capture-pane", "-p", "-t", session).rstrip("\n")

    def _settle(self, session: str, deadline: float, result: StepResult, previous: str) -> str:
        """Captures once a second until two captures in a row are equal, or the deadline."""
        end = time.monotonic() + deadline
        last = None
        while True:
            time.sleep(self.POLL_EVERY)
            screen = self._capture(session)
            result.calls += 1
            result.chars += len(screen)
            if screen == previous or screen == last:
                result.empty_calls += 1
            if screen == last or time.monotonic() >= end:
                return screen
            last = screen

    def run(self, scenario: Scenario, work) -> list[StepResult]:
        session = self.tmux.env.name("agent")
        self.tmux.new_session(session, (120, 40), [self.tmux.env.bash, "-i"])
        time.sleep(0.5)
        results = []
        screen = self._capture(session)
        try:
            self.tmux.cmd("send-keys", "-t", session, "-l", f"cd {shlex.quote(str(work))}")
            self.tmux.cmd("send-keys", "-t", session, "Enter")
            time.sleep(0.3)
            self.tmux.cmd("send-keys", "-t", session, "clear", "Enter")
            time.sleep(0.3)
            screen = self._capture(session)
            for step in scenario.steps:
                time.sleep(step.pause_before)
                t0 = time.perf_counter()
                result = StepResult("busy")
                if step.text:
                    self.tmux.cmd("send-keys", "-t", session, "-l", step.text)
                    result.calls += 1
                if step.submit and step.text:
                    self.tmux.cmd("send-keys", "-t", session, "Enter")
                screen = self._settle(session, step.deadline, result, screen)
                lines = [line for line in screen.splitlines() if line.strip()]
                at_prompt = bool(lines) and bool(PROMPT_END.search(lines[-1]))
                result.state = "done" if at_prompt else "input"
                if at_prompt and step.exit_code is not None:
                    # The harness asks the shell for the exit code.
                    self.tmux.cmd("send-keys", "-t", session, "-l", 'echo "rc=$?"')
                    self.tmux.cmd("send-keys", "-t", session, "Enter")
                    result.calls += 1
                    screen = self._settle(session, 10, result, screen)
                    codes = re.findall(r"^rc=(\d+)", screen, re.M)
                    result.exit_code = int(codes[-1]) if codes else None
                result.text = screen
                result.seconds = time.perf_counter() - t0
                results.append(result)
        finally:
            self.tmux.cmd("kill-session", "-t", session, check=False)
        return results
