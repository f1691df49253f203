"""Lizard's MCP server through the official MCP Python SDK (PyPI `mcp`, pinned in
requirements.txt), unmodified: the same flows over Streamable HTTP (`/mcp` on lizard serve) and
stdio (`lizard mcp`). LIZARD_API_URL, LIZARD_API_KEY (a project key), LIZARD_OTHER_KEY (another
project's) and LIZARD_BIN come from mcp.test.mjs. One line per step; the test compares them.
"""

import json
import os
import sys

import anyio
from mcp import ClientSession
from mcp.client.stdio import StdioServerParameters, stdio_client
from mcp.client.streamable_http import streamable_http_client
from mcp.shared._httpx_utils import create_mcp_http_client

URL = os.environ["LIZARD_API_URL"]
KEY = os.environ["LIZARD_API_KEY"]
OTHER = os.environ["LIZARD_OTHER_KEY"]


def text(r):
    return "\n".join(c.text for c in r.content if c.type == "text")


async def flows(session, transport):
    await session.initialize()
    names = {t.name for t in (await session.list_tools()).tools}
    assert {"run_code", "create_sandbox", "read_file", "write_file", "kill_sandbox"} <= names, names
    r = await session.call_tool("run_code", {"code": "x = 41"})
    assert not r.is_error, text(r)
    r = await session.call_tool("run_code", {"code": "x + 1"})
    assert "42" in text(r), text(r)
    r = await session.call_tool(
        "run_code", {"code": "import matplotlib.pyplot as plt\nplt.plot([1, 2])\nplt.show()"}
    )
    assert any(c.type == "image" and c.mime_type == "image/png" for c in r.content), r
    r = await session.call_tool("run_code", {"code": "[1, 2].map((v) => v * 21)[1]", "language": "javascript"})
    assert "42" in text(r), text(r)
    r = await session.call_tool("run_code", {"code": "echo $((6 * 7))", "language": "bash"})
    assert "42" in text(r), text(r)
    seen = []

    async def on_progress(progress, total, message):
        seen.append(message or "")

    r = await session.call_tool(
        "run_code",
        {"code": "import time\nfor i in range(3):\n    print(f'tick {i}', flush=True)\n    time.sleep(0.2)"},
        progress_callback=on_progress,
    )
    assert "tick 2" in "".join(seen), seen
    # Cancelling the call (here: the client gives up waiting) interrupts the cell; state stays.
    with anyio.move_on_after(1.5):
        await session.call_tool("run_code", {"code": "import time\ntime.sleep(60)"})
    r = await session.call_tool("run_code", {"code": "x + 1"})
    assert "42" in text(r), text(r)
    r = await session.call_tool("write_file", {"path": "/home/user/py.txt", "content": "from Python"})
    assert not r.is_error, text(r)
    r = await session.call_tool("read_file", {"path": "/home/user/py.txt"})
    assert text(r) == "from Python", text(r)
    uris = [str(x.uri) for x in (await session.list_resources()).resources]
    uri = next(u for u in uris if u.endswith("/files/home/user/py.txt"))
    contents = (await session.read_resource(uri)).contents
    assert contents[0].text == "from Python", contents
    print(f"ok {transport}", flush=True)


async def main():
    http = create_mcp_http_client(headers={"Authorization": f"Bearer {KEY}"})
    async with http:
        async with streamable_http_client(f"{URL}/mcp", http_client=http) as (read, write):
            async with ClientSession(read, write) as session:
                await flows(session, "http")
    # Another project's key: its session sees none of the first project's sandboxes.
    other = create_mcp_http_client(headers={"Authorization": f"Bearer {OTHER}"})
    async with other:
        async with streamable_http_client(f"{URL}/mcp", http_client=other) as (read, write):
            async with ClientSession(read, write) as session:
                await session.initialize()
                listed = json.loads(text(await session.call_tool("list_sandboxes", {})))
                assert all(s["project"] != "mcp-py" for s in listed), listed
    print("ok scoped", flush=True)
    params = StdioServerParameters(
        command=os.environ["LIZARD_BIN"],
        args=["mcp"],
        env={"LIZARD_API_URL": URL, "LIZARD_API_KEY": KEY},
    )
    async with stdio_client(params, errlog=sys.stderr) as (read, write):
        async with ClientSession(read, write) as session:
            await flows(session, "stdio")
    print("done", flush=True)


anyio.run(main)
