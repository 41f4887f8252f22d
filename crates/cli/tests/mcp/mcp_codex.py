"""Drives the Codex tool pair (exec_command, write_stdin) and the wait cap of `ptyhub mcp` with
the official Python MCP client SDK over stdio.

Run by the Rust integration test `suite::mcp` with PTYHUB_BIN and PTYHUB_SOCKET pointing at the
binary and a running server's local socket (PTYHUB_URL and PTYHUB_TOKEN for `/mcp`); `ptyhub
mcp` runs with `--wait-cap-secs 2` and the server with `--mcp-wait-cap-secs 2`, so a capped
wait is quick. Exits non-zero with the failing check.
"""

import asyncio
import os
import re
import time

from checks import check, is_error, payload
from mcp import ClientSession, StdioServerParameters
from mcp.client.stdio import stdio_client


def text(result):
    check(not is_error(result), f"tool failed: {result.content}")
    return result.content[0].text


def session_of(answer):
    found = re.search(r"^Process running with session ID (\d+)$", answer, re.M)
    check(found is not None, f"a running process: {answer!r}")
    return int(found.group(1))


def output_of(answer):
    check("\nOutput:\n" in answer, f"an Output: line: {answer!r}")
    return answer.split("\nOutput:\n", 1)[1]


async def codex_pair(session):
    tools = {tool.name for tool in (await session.list_tools()).tools}
    check({"exec_command", "write_stdin", "terminal_wait"} <= tools, f"tools: {sorted(tools)}")

    ended = text(await session.call_tool("exec_command", {"cmd": "echo hi; exit 3", "workdir": "/tmp"}))
    check(re.match(r"Wall time: \d+\.\d{4} seconds\n", ended), f"wall time first: {ended!r}")
    check("\nProcess exited with code 3\n" in ended, f"exit code: {ended!r}")
    check(output_of(ended) == "hi", f"output: {ended!r}")
    check("Original token count" not in ended, f"nothing was cut: {ended!r}")
    where = text(await session.call_tool("exec_command", {"cmd": "pwd", "workdir": "/tmp"}))
    check(output_of(where) == "/tmp", f"workdir: {where!r}")

    asked = text(await session.call_tool("exec_command", {"cmd": "read -p 'Name: ' n; echo hello $n"}))
    check("Wait reason: stdin_read" in asked, f"asks: {asked!r}")
    check(output_of(asked).endswith("Name: "), f"the question: {asked!r}")
    sid = session_of(asked)
    answered = text(await session.call_tool("write_stdin", {"session_id": sid, "chars": "bob\n"}))
    check("\nProcess exited with code 0\n" in answered, f"answered and ended: {answered!r}")
    check("hello bob" in output_of(answered), f"answer output: {answered!r}")
    check("#" not in output_of(answered) and "$ " not in output_of(answered),
          f"no prompt after the end: {answered!r}")
    gone = await session.call_tool("write_stdin", {"session_id": sid, "chars": ""})
    check(is_error(gone) and "unknown session_id" in gone.content[0].text, f"forgotten: {gone.content}")

    secret = text(await session.call_tool("exec_command", {"cmd": "read -s -p 'Password: ' pw; echo; echo got ${#pw}"}))
    check("Wait reason: stdin_read" in secret and "Password prompt" in secret, f"a password prompt: {secret!r}")
    sid = session_of(secret)
    secret = text(await session.call_tool("write_stdin", {"session_id": sid, "chars": "hunter2\n"}))
    check("\nProcess exited with code 0\n" in secret and "got 7" in output_of(secret), f"answered: {secret!r}")
    check("hunter2" not in secret, f"the secret is not echoed: {secret!r}")

    started = time.monotonic()
    slow = text(await session.call_tool(
        "exec_command", {"cmd": "echo start; sleep 3; echo done", "yield_time_ms": 500},
    ))
    sid = session_of(slow)
    seen = output_of(slow)
    polls = 0
    while "Process exited" not in slow:
        polls += 1
        check(polls <= 5, f"too many polls: {slow!r}")
        slow = text(await session.call_tool("write_stdin", {"session_id": sid}))
        seen += output_of(slow)
    check("\nProcess exited with code 0\n" in slow, f"the long command ended: {slow!r}")
    check("start" in seen and "done" in seen, f"all of its output: {seen!r}")
    check(time.monotonic() - started < 8, "the polls returned when it ended")

    late = text(await session.call_tool("exec_command", {"cmd": "sleep 1", "yield_time_ms": 250}))
    sid = session_of(late)
    await asyncio.sleep(2)
    late = text(await session.call_tool("write_stdin", {"session_id": sid, "chars": "echo oops\n"}))
    check("\nProcess exited with code 0\n" in late and "Input not typed" in late, f"ended before: {late!r}")
    check("oops" not in output_of(late), f"nothing typed into the shell: {late!r}")

    long = text(await session.call_tool(
        "exec_command", {"cmd": "seq 1 2000", "max_output_tokens": 50},
    ))
    count = re.search(r"^Original token count: (\d+)$", long, re.M)
    check(count is not None and int(count.group(1)) > 50, f"token count: {long!r}")
    cut = output_of(long)
    check(cut.startswith("1\n2\n3\n") and cut.endswith("1999\n2000"), f"head and tail: {cut!r}")
    check("tokens truncated" in cut and len(cut) < 260, f"cut to the budget: {cut!r}")

    unknown = await session.call_tool("write_stdin", {"session_id": 987654, "chars": "x"})
    check(is_error(unknown) and "SESSION_NOT_FOUND" in unknown.content[0].text, f"unknown: {unknown.content}")
    empty = await session.call_tool("exec_command", {"cmd": "  "})
    check(is_error(empty) and "INVALID_INPUT" in empty.content[0].text, f"empty cmd: {empty.content}")
    negative = await session.call_tool("exec_command", {"cmd": "true", "max_output_tokens": -1})
    check(is_error(negative) and "max_output_tokens" in negative.content[0].text, f"negative: {negative.content}")


async def wait_cap(session):
    payload(await session.call_tool("terminal_open", {"id": "mcp-cap"}))
    progress = []

    async def on_progress(value, total, message):
        progress.append((value, total, message))

    started = time.monotonic()
    capped = payload(await session.call_tool(
        "terminal_exec", {"id": "mcp-cap", "command": "sleep 5; echo woke"}, progress_callback=on_progress,
    ))
    check(time.monotonic() - started < 4, "the exec was capped")
    check(capped["status"] == "running" and "terminal_wait" in capped.get("note", ""), f"capped: {capped}")
    check(isinstance(capped.get("command_id"), int), f"command_id: {capped}")
    check(len(progress) >= 1 and progress[0][1] == 2, f"progress while capped: {progress}")
    done = None
    for _ in range(4):
        done = payload(await session.call_tool("terminal_wait", {"id": "mcp-cap", "timeout": 30}))
        if done["status"] != "running":
            break
        check("note" in done, f"a capped wait says how to go on: {done}")
    check(done["status"] == "completed" and done["output"] == "woke", f"waited: {done}")
    check("console" not in done, f"wait carries no console: {done}")
    started = time.monotonic()
    sent = payload(await session.call_tool(
        "terminal_send", {"id": "mcp-cap", "text": "sleep 4", "submit": True, "deadline": 30, "idle_window": 20},
    ))
    check(sent["wait_reason"] == "timeout" and time.monotonic() - started < 4, f"send capped: {sent}")
    payload(await session.call_tool("terminal_close", {"id": "mcp-cap"}))


async def over_http_cap():
    """`serve --mcp-wait-cap-secs 2` caps the waits of `/mcp`, with progress while it waits."""
    from mcp.client.streamable_http import create_mcp_http_client, streamable_http_client

    url = f"{os.environ['PTYHUB_URL']}/mcp"
    client = create_mcp_http_client(headers={"Authorization": f"Bearer {os.environ['PTYHUB_TOKEN']}"})
    async with client:
        async with streamable_http_client(url, http_client=client) as streams:
            async with ClientSession(streams[0], streams[1]) as session:
                await session.initialize()
                progress = []

                async def on_progress(value, total, message):
                    progress.append((value, total, message))

                started = time.monotonic()
                capped = text(await session.call_tool(
                    "exec_command", {"cmd": "sleep 4; echo late", "yield_time_ms": 30000},
                    progress_callback=on_progress,
                ))
                check(time.monotonic() - started < 4, f"the /mcp wait was capped: {capped!r}")
                sid = session_of(capped)
                check(len(progress) >= 1 and progress[0][1] == 2, f"progress over /mcp: {progress}")
                # Each poll returns the output since the one before: "late" may come in a poll
                # before the one that says the command ended (on a busy machine it does).
                ended = capped
                printed = output_of(capped) if "\nOutput:\n" in capped else ""
                for _ in range(4):
                    ended = text(await session.call_tool("write_stdin", {"session_id": sid}))
                    printed += output_of(ended)
                    if "Process exited" in ended:
                        break
                check("\nProcess exited with code 0\n" in ended and printed.endswith("late"),
                      f"continued to the end: {ended!r}, printed {printed!r}")


async def main():
    server = StdioServerParameters(
        command=os.environ["PTYHUB_BIN"],
        args=["--socket", os.environ["PTYHUB_SOCKET"], "mcp", "--wait-cap-secs", "2"],
    )
    async with stdio_client(server) as (read, write):
        async with ClientSession(read, write) as session:
            await session.initialize()
            await codex_pair(session)
            await wait_cap(session)
    await over_http_cap()
    print("mcp codex: all checks passed")


asyncio.run(main())
