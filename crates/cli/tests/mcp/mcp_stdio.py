"""Drives `ptyhub mcp` (stdio) with the official Python MCP client SDK.

Run by the Rust integration test `suite::mcp` with PTYHUB_BIN and PTYHUB_SOCKET pointing at the
binary and a running server's local socket; exits non-zero with the failing check.
"""

import asyncio
import os

from checks import check, is_error, payload
from mcp import ClientSession, StdioServerParameters
from mcp.client.stdio import stdio_client


async def main():
    server = StdioServerParameters(
        command=os.environ["PTYHUB_BIN"],
        args=["--socket", os.environ["PTYHUB_SOCKET"], "mcp"],
    )
    async with stdio_client(server) as (read, write):
        async with ClientSession(read, write) as session:
            info = await session.initialize()
            check("wait_reason" in (info.instructions or ""), "instructions explain wait reasons")
            tools = {tool.name for tool in (await session.list_tools()).tools}
            expected = {
                "terminal_open", "terminal_list", "terminal_exec", "terminal_send",
                "terminal_read", "terminal_signal", "terminal_resize", "terminal_close",
                "terminal_commands",
            }
            check(expected <= tools, f"tools: {sorted(tools)}")

            opened = payload(await session.call_tool("terminal_open", {"id": "mcp-1", "cwd": "/tmp"}))
            check(opened["session_id"] == "mcp-1", f"open: {opened}")
            ran = payload(await session.call_tool("terminal_exec", {"id": "mcp-1", "command": "echo hi; (exit 4)"}))
            check(ran["output"] == "hi" and ran["exit_code"] == 4, f"exec: {ran}")
            check("console" not in ran, f"exec carries no console unless asked: {ran}")
            raw = await session.call_tool("terminal_exec", {"id": "mcp-1", "command": "seq 1 30", "tail": 2})
            check("\n" not in raw.content[0].text, f"tool results are compact JSON: {raw.content[0].text!r}")
            windowed = payload(raw)
            check(windowed["output"] == "29\n30", f"exec tail window: {windowed}")
            check(windowed["window"]["omitted"]["before"]["lines"] == 28, f"omitted: {windowed}")
            grepped = payload(await session.call_tool(
                "terminal_exec",
                {"id": "mcp-1", "command": "seq 1 30", "grep": "^15$", "context": 1, "include_console": True},
            ))
            check(grepped["output"] == "14\n15\n16", f"exec grep window: {grepped}")
            check(len(grepped["console"]) == 3, f"console when asked: {grepped}")
            listed = payload(await session.call_tool("terminal_commands", {"id": "mcp-1"}))
            check([c["command"] for c in listed["commands"]] == ["echo hi; (exit 4)", "seq 1 30", "seq 1 30"],
                  f"timeline: {listed}")
            check(listed["commands"][0]["exit_code"] == 4, f"timeline exit code: {listed}")
            reread = payload(await session.call_tool(
                "terminal_commands", {"id": "mcp-1", "command_id": windowed["command_id"], "grep": "^2[05]$"},
            ))
            check(reread["output"] == "20\n--\n25" and reread["window"]["matches"] == 2, f"re-read: {reread}")
            bad = await session.call_tool("terminal_exec", {"id": "mcp-1", "command": "true", "head": -1})
            check(is_error(bad) and "INVALID_INPUT" in bad.content[0].text, f"bad window: {bad}")

            asked = payload(await session.call_tool(
                "terminal_send",
                {"id": "mcp-1", "text": "read -p 'Proceed? [Y/n] ' a; echo got=$a", "submit": True},
            ))
            check(asked["wait_reason"] == "stdin_read", f"prompt: {asked}")
            answered = payload(await session.call_tool("terminal_send", {"id": "mcp-1", "text": "y", "submit": True}))
            check("got=y" in answered["output"], f"answer: {answered}")

            snapshot = payload(await session.call_tool("terminal_read", {"id": "mcp-1", "mode": "snapshot"}))
            check(any("got=y" in line for line in snapshot["screen"]), f"snapshot: {snapshot}")
            check(snapshot["screen"][-1].strip() != "", f"no trailing empty rows: {snapshot}")
            listed = payload(await session.call_tool("terminal_list", {}))
            check([s["session_id"] for s in listed["sessions"]] == ["mcp-1"], f"list: {listed}")

            missing = await session.call_tool("terminal_exec", {"id": "nope", "command": "true"})
            check(is_error(missing) and "SESSION_NOT_FOUND" in missing.content[0].text, f"error: {missing}")

            closed = payload(await session.call_tool("terminal_close", {"id": "mcp-1"}))
            check(closed["session_id"] == "mcp-1", f"close: {closed}")
    await over_http()
    print("mcp: all checks passed")


async def over_http():
    """The same tools over streamable HTTP at /mcp, with the bearer token."""
    import httpx

    from mcp.client.streamable_http import create_mcp_http_client, streamable_http_client

    url = f"{os.environ['PTYHUB_URL']}/mcp"
    token = os.environ["PTYHUB_TOKEN"]
    client = create_mcp_http_client(headers={"Authorization": f"Bearer {token}"})
    async with client:
        async with streamable_http_client(url, http_client=client) as streams:
            read, write = streams[0], streams[1]
            async with ClientSession(read, write) as session:
                await session.initialize()
                opened = payload(await session.call_tool("terminal_open", {"id": "mcp-http"}))
                check(opened["session_id"] == "mcp-http", f"http open: {opened}")
                ran = payload(await session.call_tool("terminal_exec", {"id": "mcp-http", "command": "echo over-http"}))
                check(ran["output"] == "over-http", f"http exec: {ran}")
                payload(await session.call_tool("terminal_close", {"id": "mcp-http"}))
    denied = httpx.post(url, json={"jsonrpc": "2.0", "id": 1, "method": "tools/list"})
    check(denied.status_code == 401, f"/mcp without a token: {denied.status_code}")


asyncio.run(main())
