"""An MCP client for tests/mcp_server.rs, built on the official Python MCP SDK (`mcp` on PyPI,
installed by scripts/mcp-python): it starts `PEGASUSCTL --home HOME mcp` over stdio, says the
handshake, and then runs the calls it reads from stdin, one JSON object a line, each as its
own task (so a call that waits does not hold up the next ones on the same session):

    {"id": "x", "list_tools": true}
    {"id": "y", "tool": "send_message", "arguments": {...}, "progress": true}

For each it writes one JSON line to stdout with the same `id`: the tools (`tools`: name,
description, inputSchema), or the call's `is_error`, `text` (its text blocks joined),
`structured` and, with "progress", the progress messages that came before the result. The
first line is the handshake's (`id` "init": the protocol version and server name). It exits
when stdin ends and every call has answered.

    usage: mcp_client.py PEGASUSCTL HOME
"""

import json
import os
import sys

import anyio
from mcp import ClientSession
from mcp.client.stdio import StdioServerParameters, stdio_client


def emit(value):
    sys.stdout.write(json.dumps(value) + "\n")
    sys.stdout.flush()


async def call(session, cmd):
    if cmd.get("list_tools"):
        listed = await session.list_tools()
        emit(
            {
                "id": cmd["id"],
                "tools": [
                    {
                        "name": t.name,
                        "description": t.description,
                        "inputSchema": t.input_schema,
                    }
                    for t in listed.tools
                ],
            }
        )
        return
    messages = []

    async def on_progress(progress, total, message):
        messages.append(message)

    result = await session.call_tool(
        cmd["tool"],
        cmd.get("arguments", {}),
        progress_callback=on_progress if cmd.get("progress") else None,
    )
    emit(
        {
            "id": cmd["id"],
            "is_error": bool(result.is_error),
            "text": "".join(c.text for c in result.content if c.type == "text"),
            "structured": result.structured_content,
            "progress": messages,
        }
    )


async def main():
    ctl, home = sys.argv[1], sys.argv[2]
    params = StdioServerParameters(
        command=ctl, args=["--home", home, "mcp"], env=dict(os.environ)
    )
    async with stdio_client(params) as (read, write):
        async with ClientSession(read, write) as session:
            init = await session.initialize()
            emit(
                {
                    "id": "init",
                    "protocolVersion": init.protocol_version,
                    "server": init.server_info.name,
                }
            )
            stdin = anyio.wrap_file(sys.stdin)
            async with anyio.create_task_group() as tasks:
                async for line in stdin:
                    if line.strip():
                        tasks.start_soon(call, session, json.loads(line))


anyio.run(main)
