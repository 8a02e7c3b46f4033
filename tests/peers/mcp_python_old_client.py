"""Drive an MCP server with an old-generation official MCP Python SDK client
(`mcp` 1.9.x on PyPI, which speaks MCP 2025-03-26; pinned in
tests/peers/requirements-old.txt, installed by scripts/peers into .peers/venv-old).

Usage:
    mcp_python_old_client.py --stdio PROGRAM [ARG...]   spawn the server, newline-delimited stdio
    mcp_python_old_client.py --http URL                 streamable HTTP

The same sequence and report as mcp_python_client.py (which drives `mcp` 2.x),
through the 1.x API: `ClientSession` over `stdio_client` /
`streamablehttp_client`, `initialize`, `tools/list`, `tools/call
evidence_query`, docs search, `resources/list`, `resources/read`,
`resources/templates/list`, an unknown resource, a call with bad arguments and
a call of an unknown tool; every request and response as they went over the
wire in `exchanges`. Exit status 0 = every check here held, 1 = one failed,
2 = usage.
"""

import asyncio
import hashlib
import json
import sys
from contextlib import asynccontextmanager
from datetime import timedelta
from importlib.metadata import version as package_version

from pydantic import AnyUrl

from mcp import ClientSession, StdioServerParameters
from mcp.client.stdio import stdio_client
from mcp.client.streamable_http import streamablehttp_client
from mcp.shared.exceptions import McpError

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


def text_items(result):
    return [item.text for item in result.content if item.type == "text"]


@asynccontextmanager
async def streams(target):
    """The SDK's (read, write) streams for `target`."""
    if isinstance(target, StdioServerParameters):
        async with stdio_client(target) as (read_stream, write_stream):
            yield read_stream, write_stream
    else:
        async with streamablehttp_client(target) as (read_stream, write_stream, _session_id):
            yield read_stream, write_stream


async def run(target, report):
    recorder = Recorder()
    report.update(sdk="mcp (Python)", sdk_version=package_version("mcp"), mode="initialize")
    try:
        async with streams(target) as (read_stream, write_stream):
            read_stream, write_stream = recorder.wrap(read_stream, write_stream)
            async with ClientSession(
                read_stream, write_stream, read_timeout_seconds=timedelta(seconds=20)
            ) as session:
                await exercise(session, report)
    finally:
        report["exchanges"] = recorder.exchanges


async def exercise(session, report):
    initialized = await session.initialize()
    report["protocol_version"] = initialized.protocolVersion
    report["server_name"] = initialized.serverInfo.name
    capabilities = initialized.capabilities
    check(capabilities.tools is not None, "server did not announce the tools capability")

    listing = await session.list_tools()
    report["tools"] = [dump(tool) for tool in listing.tools]
    names = [tool.name for tool in listing.tools]
    check("evidence_query" in names, f"tools/list lacks evidence_query: {names}")
    for tool in listing.tools:
        check(tool.description, f"tool {tool.name} has no description")
        check(tool.inputSchema.get("type") == "object", f"tool {tool.name} inputSchema is not an object schema")

    arguments = {
        "query": {"provider_id": "evidence-wire", "check_id": "time_now"},
        "context": CONTEXT,
    }
    result = await session.call_tool("evidence_query", arguments)
    check(not result.isError, f"evidence_query failed: {dump(result)}")
    texts = text_items(result)
    check(len(texts) == 1, f"expected exactly one text item, got {[item.type for item in result.content]}")
    evidence = json.loads(texts[0])
    # 1.9 has no `structuredContent` field; a server that sent one anyway
    # would show up among the model's extras.
    structured = (result.model_extra or {}).get("structuredContent")
    value = evidence.get("value") or {}
    digest = evidence.get("evidence_hash") or {}
    if value.get("kind") == "json":
        ours = hashlib.sha256(canonical(value.get("value")).encode("utf-8")).hexdigest()
        if digest:
            check(digest.get("value") == ours, f"evidence_hash {digest} is not sha256 of canonical value ({ours})")
        report["computed_hash"] = ours
    report["evidence"] = {
        "structured_content": structured,
        "text": texts[0],
        "content_types": [item.type for item in result.content],
    }

    docs = await session.call_tool("decision_gate_docs_search", {"query": "evidence hash", "max_sections": 2})
    check(not docs.isError, f"docs search failed: {dump(docs)}")
    report["docs_search"] = {
        "structured_content": (docs.model_extra or {}).get("structuredContent"),
        "content_types": [item.type for item in docs.content],
        "text": next(iter(text_items(docs)), None),
    }

    check(capabilities.resources is not None, "server did not announce the resources capability")
    resources = await session.list_resources()
    report["resources"] = [dump(resource) for resource in resources.resources]
    check(resources.resources, "resources/list is empty")
    read = await session.read_resource(resources.resources[0].uri)
    contents = [dump(item) for item in read.contents]
    check(len(contents) == 1, f"resources/read returned {len(contents)} items")
    report["resource_read"] = {
        "uri": contents[0].get("uri"),
        "mime_type": contents[0].get("mimeType"),
        "text": contents[0].get("text"),
    }
    templates = await session.list_resource_templates()
    report["resource_templates"] = [dump(template) for template in templates.resourceTemplates]
    try:
        await session.read_resource(AnyUrl("decision-gate://docs/no-such-document"))
        report["unknown_resource_error"] = None
    except McpError as error:
        report["unknown_resource_error"] = error.error.code

    try:
        bad = await session.call_tool("evidence_query", {"query": arguments["query"], "context": BAD_CONTEXT})
        report["bad_arguments"] = {"is_error": bad.isError, "texts": text_items(bad)}
    except McpError as error:
        report["bad_arguments"] = {"error_code": error.error.code, "error_data": error.error.data}

    try:
        unknown = await session.call_tool("no_such_tool", {})
        report["unknown_tool"] = {"result": dump(unknown)}
    except McpError as error:
        report["unknown_tool"] = {"error_code": error.error.code, "message": error.error.message}


def main(argv):
    if len(argv) >= 2 and argv[0] == "--stdio":
        target = StdioServerParameters(command=argv[1], args=argv[2:])
    elif len(argv) == 2 and argv[0] == "--http":
        target = argv[1]
    else:
        print(__doc__, file=sys.stderr)
        return 2
    report = {}
    try:
        asyncio.run(run(target, report))
    except Exception as failure:  # reported with what went over the wire so far
        while isinstance(failure, BaseExceptionGroup) and len(failure.exceptions) == 1:
            failure = failure.exceptions[0]
        what = "check failed" if isinstance(failure, CheckFailed) else "error"
        print(f"mcp_python_old_client: {what}: {failure!r}", file=sys.stderr)
        print(f"partial report: {json.dumps(report, sort_keys=True)}", file=sys.stderr)
        if not isinstance(failure, CheckFailed):
            raise
        return 1
    print(json.dumps(report, sort_keys=True))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
