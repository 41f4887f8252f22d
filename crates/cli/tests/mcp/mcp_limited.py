"""Drives /mcp (streamable HTTP) with a token of the config file that acts for another owner
with some capabilities only: a tool call can do what that token may, and nothing more.

Run by the Rust integration test `suite::grants` with PTYHUB_URL, PTYHUB_LIMITED_TOKEN (owner
`bot`: create, read, write) and PTYHUB_FOREIGN_ID (a terminal of the server's own owner).
"""

import asyncio
import os

from checks import check, is_error, payload
from mcp import ClientSession
from mcp.client.streamable_http import create_mcp_http_client, streamable_http_client


def refused(result, code):
    check(is_error(result) and code in result.content[0].text, f"expected {code}: {result.content}")


async def main():
    url = f"{os.environ['PTYHUB_URL']}/mcp"
    foreign = os.environ["PTYHUB_FOREIGN_ID"]
    client = create_mcp_http_client(headers={"Authorization": f"Bearer {os.environ['PTYHUB_LIMITED_TOKEN']}"})
    async with client:
        async with streamable_http_client(url, http_client=client) as streams:
            async with ClientSession(streams[0], streams[1]) as session:
                await session.initialize()
                opened = payload(await session.call_tool("terminal_open", {"id": "bot-mcp", "cwd": "/tmp"}))
                check(opened["owner"] == "bot", f"opened for the token's owner: {opened}")
                ran = payload(await session.call_tool("terminal_exec", {"id": "bot-mcp", "command": "echo as-bot"}))
                check(ran["output"] == "as-bot", f"exec: {ran}")
                listed = payload(await session.call_tool("terminal_list", {}))
                ids = [s["session_id"] for s in listed["sessions"]]
                check(foreign not in ids and "bot-mcp" in ids, f"the bot sees its own terminals only: {ids}")
                refused(await session.call_tool("terminal_exec", {"id": foreign, "command": "true"}), "SESSION_NOT_FOUND")
                refused(await session.call_tool("terminal_signal", {"id": "bot-mcp", "signal": "INT"}), "PERMISSION_DENIED")
                refused(await session.call_tool("terminal_close", {"id": "bot-mcp"}), "PERMISSION_DENIED")
    print("mcp with a limited token: all checks passed")


asyncio.run(main())
