"""Drive an MCP server with the official MCP Python SDK client (`mcp` on PyPI).

Usage:
    mcp_python_client.py --stdio PROGRAM [ARG...]    spawn the server, newline-delimited stdio
    mcp_python_client.py --http URL                  streamable HTTP

The sequence is what any MCP host does: connect (the SDK probes
`server/discover` and falls back to `initialize`), `tools/list`, `tools/call
evidence_query` (the SDK parses and validates the result), `tools/call
decision_gate_docs_search`, `resources/list`, `resources/read`, and a call of
an unknown tool (which must be a JSON-RPC error). Checks that need only the
SDK's view are made here; the report (one JSON object on the last line of
stdout) goes to the Rust test, which checks the values against independent
expectations. Exit status 0 = every check here held, 1 = one failed (the
reason on stderr), 2 = usage.
"""

import asyncio
import hashlib
import json
import sys

from mcp import Client, MCPError, StdioServerParameters

TRIGGER_TIME = 1710000000000
CONTEXT = {
    "tenant_id": 1,
    "namespace_id": 1,
    "run_id": "run-1",
    "scenario_id": "s",
    "stage_id": "st",
    "trigger_id": "t",
    "trigger_time": {"kind": "unix_millis", "value": TRIGGER_TIME},
    "correlation_id": None,
}


class CheckFailed(Exception):
    """A check made with the SDK's view did not hold."""


def check(condition, message):
    if not condition:
        raise CheckFailed(message)


def canonical(value):
    """RFC 8785 for the values used here (ASCII strings, integers, objects)."""
    return json.dumps(value, sort_keys=True, separators=(",", ":"), ensure_ascii=False)


def dump(model):
    return model.model_dump(mode="json", by_alias=True, exclude_none=True)


async def run(server):
    report = {"sdk": "mcp (Python)"}
    async with Client(server, read_timeout_seconds=20) as client:
        report["protocol_version"] = client.protocol_version
        info = client.server_info
        report["server_name"] = info.name if info is not None else None
        capabilities = client.server_capabilities
        check(capabilities.tools is not None, "server did not announce the tools capability")
        report["has_resources_capability"] = capabilities.resources is not None

        listing = await client.list_tools()
        report["tools"] = [dump(tool) for tool in listing.tools]
        names = [tool.name for tool in listing.tools]
        check("evidence_query" in names, f"tools/list lacks evidence_query: {names}")
        for tool in listing.tools:
            check(tool.description, f"tool {tool.name} has no description")
            check(tool.input_schema.get("type") == "object", f"tool {tool.name} inputSchema is not an object schema")

        arguments = {
            "query": {"provider_id": "evidence-wire", "check_id": "time_now"},
            "context": CONTEXT,
        }
        result = await client.call_tool("evidence_query", arguments)
        check(not result.is_error, f"evidence_query failed: {dump(result)}")
        check(result.structured_content is not None, "evidence_query result has no structuredContent")
        texts = [item.text for item in result.content if item.type == "text"]
        check(len(texts) == 1, f"expected exactly one text item, got {[item.type for item in result.content]}")
        from_text = json.loads(texts[0])
        check(
            from_text == result.structured_content,
            "the text item and structuredContent disagree",
        )
        evidence = result.structured_content
        value = evidence.get("value") or {}
        digest = evidence.get("evidence_hash") or {}
        if value.get("kind") == "json":
            # The hash computed here, independently of the server; a hash the
            # server sent must agree with it.
            ours = hashlib.sha256(canonical(value.get("value")).encode("utf-8")).hexdigest()
            if digest:
                check(digest.get("value") == ours, f"evidence_hash {digest} is not sha256 of canonical value ({ours})")
            report["computed_hash"] = ours
        report["evidence"] = {
            "structured_content": evidence,
            "text": texts[0],
            "content_types": [item.type for item in result.content],
        }

        if "decision_gate_docs_search" in names:
            docs = await client.call_tool(
                "decision_gate_docs_search", {"query": "evidence hash", "max_sections": 2}
            )
            check(not docs.is_error, f"docs search failed: {dump(docs)}")
            report["docs_search"] = {
                "structured_content": docs.structured_content,
                "content_types": [item.type for item in docs.content],
                "text": next((item.text for item in docs.content if item.type == "text"), None),
            }

        if capabilities.resources is not None:
            resources = await client.list_resources()
            report["resources"] = [dump(resource) for resource in resources.resources]
            if resources.resources:
                first = resources.resources[0]
                read = await client.read_resource(first.uri)
                contents = [dump(item) for item in read.contents]
                check(len(contents) == 1, f"resources/read returned {len(contents)} items")
                report["resource_read"] = {
                    "uri": contents[0].get("uri"),
                    "mime_type": contents[0].get("mimeType"),
                    "text": contents[0].get("text"),
                }
            try:
                await client.read_resource("decision-gate://docs/no-such-document")
                report["unknown_resource_error"] = None
            except MCPError as error:
                report["unknown_resource_error"] = error.error.code

        try:
            unknown = await client.call_tool("no_such_tool", {})
            report["unknown_tool"] = {"result": dump(unknown)}
        except MCPError as error:
            report["unknown_tool"] = {"error_code": error.error.code, "message": error.error.message}
    return report


def main(argv):
    if len(argv) >= 2 and argv[0] == "--stdio":
        server = StdioServerParameters(command=argv[1], args=argv[2:])
    elif len(argv) == 2 and argv[0] == "--http":
        server = argv[1]
    else:
        print(__doc__, file=sys.stderr)
        return 2
    try:
        report = asyncio.run(run(server))
    except CheckFailed as failure:
        print(f"mcp_python_client: check failed: {failure}", file=sys.stderr)
        return 1
    print(json.dumps(report, sort_keys=True))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
