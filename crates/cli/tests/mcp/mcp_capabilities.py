"""Drives /mcp (streamable HTTP) with tokens of the config file that hold different
capabilities: terminal_exec and terminal_send answer with output, so they need terminal.read as
well as terminal.write; a refused call is PERMISSION_DENIED and runs nothing. terminal_open
takes no shell or environment of the client's choosing, so it never runs one.

Run by the Rust integration test `suite::capabilities` with PTYHUB_URL, PTYHUB_MARKS (a
directory where a command that ran leaves a file) and PTYHUB_CAP_TOKENS (a JSON list of
{"label", "token", "read", "write"}).
"""

import asyncio
import json
import os
import time

from checks import check, is_error, payload
from mcp import ClientSession
from mcp.client.streamable_http import create_mcp_http_client, streamable_http_client


# What went wrong, collected so that one run shows every cell of the matrix that fails.
failures = []


def expect(condition, what):
    if not condition:
        failures.append(what)


def refused(result, code, what):
    expect(is_error(result) and code in result.content[0].text, f"{what}: expected {code}: {result.content}")


def exists_soon(path, seconds=20.0):
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        if os.path.exists(path):
            return True
        time.sleep(0.05)
    return False


async def one_token(url, marks, grant):
    label = grant["label"]
    may_run = grant["read"] and grant["write"]
    client = create_mcp_http_client(headers={"Authorization": f"Bearer {grant['token']}"})
    async with client:
        async with streamable_http_client(url, http_client=client) as streams:
            async with ClientSession(streams[0], streams[1]) as session:
                await session.initialize()
                terminal = f"mcp-{label}"
                opened = payload(await session.call_tool("terminal_open", {"id": terminal, "cwd": "/tmp"}))
                check(opened["session_id"] == terminal, f"{label}: open: {opened}")

                exec_mark = os.path.join(marks, f"mcp-exec-{label}")
                ran = await session.call_tool("terminal_exec", {"id": terminal, "command": f"touch {exec_mark}"})
                send_mark = os.path.join(marks, f"mcp-send-{label}")
                sent = await session.call_tool(
                    "terminal_send", {"id": terminal, "text": f"touch {send_mark}", "submit": True, "deadline": 10}
                )
                if may_run:
                    payload(ran)
                    payload(sent)
                    check(os.path.exists(exec_mark), f"{label}: exec did not run")
                    check(exists_soon(send_mark), f"{label}: send did not run")
                else:
                    refused(ran, "PERMISSION_DENIED", f"{label}: exec")
                    refused(sent, "PERMISSION_DENIED", f"{label}: send")
                    expect("missing capability terminal." in ran.content[0].text,
                          f"{label}: the refusal names the capability: {ran.content}")

                # The open tool has no shell or env argument: extra arguments run nothing.
                env_mark = os.path.join(marks, f"mcp-env-{label}")
                await session.call_tool(
                    "terminal_open",
                    {"id": f"mcp-env-{label}", "cwd": "/tmp", "env": {"PROMPT_COMMAND": f"touch {env_mark}"}},
                )
                expect(not exists_soon(env_mark, 1.0), f"{label}: open ran the client's PROMPT_COMMAND")

                if not may_run:
                    expect(not os.path.exists(exec_mark) and not exists_soon(send_mark, 0.5),
                          f"{label}: a refused call ran its command")


async def main():
    url = f"{os.environ['PTYHUB_URL']}/mcp"
    marks = os.environ["PTYHUB_MARKS"]
    for grant in json.loads(os.environ["PTYHUB_CAP_TOKENS"]):
        await one_token(url, marks, grant)
    check(not failures, "the capability matrix over /mcp:\n" + "\n".join(failures))
    print("mcp capabilities: all checks passed")


asyncio.run(main())
