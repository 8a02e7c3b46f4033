"""Ask one evidence query of an MCP server over streamable HTTP with the
official MCP Python SDK client (`mcp` on PyPI), as any MCP host would.

Usage:
    mcp_python_query.py --mode MODE --http URL --query JSON

MODE is the SDK's `Client(mode=...)`: `auto` (probe `server/discover`, fall
back to `initialize`) or `legacy` (the `initialize` handshake). JSON is the
EvidenceQuery (`provider_id`, `check_id`, `params`). The sequence: connect,
`tools/list`, `tools/call evidence_query`. The report (one JSON object on the
last line of stdout) carries the negotiated revision, the tool names, and
the call's `isError`, `structuredContent` and text item, for the Rust test
to verify (the evidence hash is checked there, by the library). Exit status
0 = the calls went through, 1 = one failed (the reason on stderr), 2 =
usage.
"""

import asyncio
import json
import sys

from mcp import Client
from mcp.client.streamable_http import streamable_http_client

CONTEXT = {
    "tenant_id": 1,
    "namespace_id": 1,
    "run_id": "run-1",
    "scenario_id": "s",
    "stage_id": "st",
    "trigger_id": "t",
    "trigger_time": {"kind": "unix_millis", "value": 1710000000000},
    "correlation_id": None,
}


async def run(url, mode, query):
    async with Client(streamable_http_client(url), mode=mode, read_timeout_seconds=20) as client:
        listing = await client.list_tools()
        result = await client.call_tool("evidence_query", {"query": query, "context": CONTEXT})
        texts = [item.text for item in result.content if item.type == "text"]
        return {
            "protocol_version": client.protocol_version,
            "tools": [tool.name for tool in listing.tools],
            "is_error": result.is_error,
            "structured_content": result.structured_content,
            "text": texts[0] if texts else None,
        }


def main(argv):
    try:
        options = dict(zip(argv[0::2], argv[1::2]))
        mode, url, query = options["--mode"], options["--http"], json.loads(options["--query"])
    except (KeyError, ValueError):
        print(__doc__, file=sys.stderr)
        return 2
    try:
        report = asyncio.run(run(url, mode, query))
    except Exception as error:  # the SDK's own failure, whatever its type
        print(f"mcp_python_query: {type(error).__name__}: {error}", file=sys.stderr)
        return 1
    print(json.dumps(report))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
