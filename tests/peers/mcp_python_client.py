"""Drive an MCP server with the official MCP Python SDK client (`mcp` 2.x on PyPI).

Usage:
    mcp_python_client.py [--mode MODE] --stdio PROGRAM [ARG...]   spawn the server, newline-delimited stdio
    mcp_python_client.py [--mode MODE] --http URL                 streamable HTTP

MODE is the SDK's own `Client(mode=...)`: `auto` (the default: probe
`server/discover`, fall back to `initialize` only if the server is not a
2026-07-28 server), `2026-07-28` (pinned: no probe, every request carries the
revision in `_meta`; the script then also sends one `server/discover` itself)
or `legacy` (the `initialize` handshake).

The sequence is what any MCP host does: connect, `tools/list`, `tools/call
evidence_query` (the SDK parses and validates the result), `tools/call
decision_gate_docs_search`, `resources/list`, `resources/read`,
`resources/templates/list`, an unknown resource, a call with bad arguments and
a call of an unknown tool. Checks that need only the SDK's view are made here;
the report (one JSON object on the last line of stdout) carries the SDK's view
and every request and response as they went over the wire (`exchanges`, see
wire_recorder.py) to the Rust test, which checks them against independent
expectations. Exit status 0 = every check here held, 1 = one failed (the
reason on stderr), 2 = usage.
"""

import asyncio
import hashlib
import json
import sys
from contextlib import asynccontextmanager
from importlib.metadata import version as package_version

from mcp import Client, MCPError, StdioServerParameters
from mcp.types import DiscoverResult
from mcp.client.stdio import stdio_client
from mcp.client.streamable_http import streamable_http_client

from wire_recorder import Recorder

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
SERVER_INFO_META = "io.modelcontextprotocol/serverInfo"
# Bad arguments: `tenant_id` 0 is outside the schema (an integer >= 1).
BAD_CONTEXT = dict(CONTEXT, tenant_id=0)


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


@asynccontextmanager
async def recorded(transport, recorder):
    """The SDK transport, with every message also written down."""
    async with transport as (read_stream, write_stream):
        yield recorder.wrap(read_stream, write_stream)


def text_items(result):
    return [item.text for item in result.content if item.type == "text"]


async def run(target, mode, report):
    recorder = Recorder()
    if isinstance(target, StdioServerParameters):
        transport = stdio_client(target)
    else:
        transport = streamable_http_client(target)
    report.update(sdk="mcp (Python)", sdk_version=package_version("mcp"), mode=mode)
    try:
        async with Client(recorded(transport, recorder), mode=mode, read_timeout_seconds=20) as client:
            await exercise(client, mode, report)
    finally:
        report["exchanges"] = recorder.exchanges


async def exercise(client, mode, report):
    report["protocol_version"] = client.protocol_version
    if mode in ("auto", "legacy"):
        info = client.server_info
        report["server_name"] = info.name if info is not None else None
        capabilities = dump(client.server_capabilities)
    else:
        # Pinned: the SDK sends no probe and knows nothing of the server;
        # ask the server itself what it is and speaks.
        discovered = DiscoverResult.model_validate(await client.session.send_discover(mode))
        check(mode in discovered.supported_versions, f"server/discover does not offer {mode}")
        info = discovered.meta.get(SERVER_INFO_META) if discovered.meta else None
        report["server_name"] = info.get("name") if isinstance(info, dict) else None
        capabilities = dump(discovered.capabilities)
    check("tools" in capabilities, "server did not announce the tools capability")

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
    texts = text_items(result)
    check(len(texts) == 1, f"expected exactly one text item, got {[item.type for item in result.content]}")
    from_text = json.loads(texts[0])
    if result.structured_content is not None:
        check(from_text == result.structured_content, "the text item and structuredContent disagree")
    evidence = from_text
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
        "structured_content": result.structured_content,
        "text": texts[0],
        "content_types": [item.type for item in result.content],
    }

    docs = await client.call_tool("decision_gate_docs_search", {"query": "evidence hash", "max_sections": 2})
    check(not docs.is_error, f"docs search failed: {dump(docs)}")
    report["docs_search"] = {
        "structured_content": docs.structured_content,
        "content_types": [item.type for item in docs.content],
        "text": next(iter(text_items(docs)), None),
    }

    check("resources" in capabilities, "server did not announce the resources capability")
    resources = await client.list_resources()
    report["resources"] = [dump(resource) for resource in resources.resources]
    check(resources.resources, "resources/list is empty")
    read = await client.read_resource(resources.resources[0].uri)
    contents = [dump(item) for item in read.contents]
    check(len(contents) == 1, f"resources/read returned {len(contents)} items")
    report["resource_read"] = {
        "uri": contents[0].get("uri"),
        "mime_type": contents[0].get("mimeType"),
        "text": contents[0].get("text"),
    }
    templates = await client.list_resource_templates()
    report["resource_templates"] = [dump(template) for template in templates.resource_templates]
    try:
        await client.read_resource("decision-gate://docs/no-such-document")
        report["unknown_resource_error"] = None
    except MCPError as error:
        report["unknown_resource_error"] = error.error.code

    try:
        bad = await client.call_tool("evidence_query", {"query": arguments["query"], "context": BAD_CONTEXT})
        report["bad_arguments"] = {"is_error": bad.is_error, "texts": text_items(bad)}
    except MCPError as error:
        report["bad_arguments"] = {"error_code": error.error.code, "error_data": error.error.data}

    try:
        unknown = await client.call_tool("no_such_tool", {})
        report["unknown_tool"] = {"result": dump(unknown)}
    except MCPError as error:
        report["unknown_tool"] = {"error_code": error.error.code, "message": error.error.message}


def main(argv):
    mode = "auto"
    if len(argv) >= 2 and argv[0] == "--mode":
        mode, argv = argv[1], argv[2:]
    if len(argv) >= 2 and argv[0] == "--stdio":
        target = StdioServerParameters(command=argv[1], args=argv[2:])
    elif len(argv) == 2 and argv[0] == "--http":
        target = argv[1]
    else:
        print(__doc__, file=sys.stderr)
        return 2
    report = {}
    try:
        asyncio.run(run(target, mode, report))
    except Exception as failure:  # reported with what went over the wire so far
        while isinstance(failure, BaseExceptionGroup) and len(failure.exceptions) == 1:
            failure = failure.exceptions[0]
        what = "check failed" if isinstance(failure, CheckFailed) else "error"
        print(f"mcp_python_client: {what}: {failure!r}", file=sys.stderr)
        print(f"partial report: {json.dumps(report, sort_keys=True)}", file=sys.stderr)
        if not isinstance(failure, CheckFailed):
            raise
        return 1
    print(json.dumps(report, sort_keys=True))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
