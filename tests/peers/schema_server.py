"""A minimal MCP stdio server (Python standard library only) that lists one
tool with the input and output schemas read from two files, so that schema
tooling (MCP Inspector's `--strict` lint) can be pointed at any schema pair,
independently of evidence-wire.

Usage:
    schema_server.py INPUT_SCHEMA.json OUTPUT_SCHEMA.json

Newline-delimited JSON-RPC on stdin/stdout: `initialize` (echoes the client's
revision when it is one this server names, else 2025-11-25), `ping`,
`tools/list`; every other request is -32601, notifications are ignored. Ends
at end of input.
"""

import json
import sys

REVISIONS = ("2024-11-05", "2025-03-26", "2025-06-18", "2025-11-25")


def main(argv):
    if len(argv) != 2:
        print(__doc__, file=sys.stderr)
        return 2
    with open(argv[0], encoding="utf-8") as file:
        input_schema = json.load(file)
    with open(argv[1], encoding="utf-8") as file:
        output_schema = json.load(file)
    tool = {
        "name": "evidence_query",
        "description": "The schemas under test.",
        "inputSchema": input_schema,
        "outputSchema": output_schema,
    }
    for line in sys.stdin:
        if not line.strip():
            continue
        message = json.loads(line)
        if "id" not in message or "method" not in message:
            continue
        method = message["method"]
        if method == "initialize":
            asked = (message.get("params") or {}).get("protocolVersion")
            result = {
                "protocolVersion": asked if asked in REVISIONS else REVISIONS[-1],
                "capabilities": {"tools": {}},
                "serverInfo": {"name": "schema-server", "version": "0"},
            }
            reply = {"jsonrpc": "2.0", "id": message["id"], "result": result}
        elif method == "ping":
            reply = {"jsonrpc": "2.0", "id": message["id"], "result": {}}
        elif method == "tools/list":
            reply = {"jsonrpc": "2.0", "id": message["id"], "result": {"tools": [tool]}}
        else:
            error = {"code": -32601, "message": f"method {method!r} not served"}
            reply = {"jsonrpc": "2.0", "id": message["id"], "error": error}
        sys.stdout.write(json.dumps(reply) + "\n")
        sys.stdout.flush()
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
