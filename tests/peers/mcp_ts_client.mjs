// Drive an MCP server with the official MCP TypeScript SDK client
// (@modelcontextprotocol/sdk): the current one from .peers/node, or with
// EVIDENCE_WIRE_PEERS_NODE=.peers/node-old the pinned old-generation 1.12.x
// (MCP 2025-03-26); the API used here is the same in both.
//
// Usage:
//   node mcp_ts_client.mjs --stdio PROGRAM [ARG...]   spawn the server, newline-delimited stdio
//   node mcp_ts_client.mjs --http URL                 streamable HTTP
//
// The same sequence as mcp_python_client.py: initialize, tools/list,
// tools/call evidence_query (parsed by the SDK's result schema),
// tools/call decision_gate_docs_search, resources/list, resources/read,
// resources/templates/list, an unknown resource, a call with bad arguments
// and an unknown tool. Checks that need only the SDK's view are made here;
// the report (one JSON line on stdout) carries the SDK's view and every
// request and response as they went over the wire (`exchanges`) to the Rust
// test. Exit status 0 = every check here held, 1 = one failed, 2 = usage.

import { createHash } from "node:crypto";
import { readFileSync } from "node:fs";
import { join } from "node:path";
import { peerFolder, peerRequire } from "./peer_modules.mjs";

const require = peerRequire();
const { Client } = require("@modelcontextprotocol/sdk/client/index.js");
const { StdioClientTransport } = require("@modelcontextprotocol/sdk/client/stdio.js");
const { StreamableHTTPClientTransport } = require("@modelcontextprotocol/sdk/client/streamableHttp.js");
const { McpError } = require("@modelcontextprotocol/sdk/types.js");

const TRIGGER_TIME = 1710000000000;
const CONTEXT = {
  tenant_id: 1,
  namespace_id: 1,
  run_id: "run-1",
  scenario_id: "s",
  stage_id: "st",
  trigger_id: "t",
  trigger_time: { kind: "unix_millis", value: TRIGGER_TIME },
  correlation_id: null,
};
// Bad arguments: `tenant_id` 0 is outside the schema (an integer >= 1).
const BAD_CONTEXT = { ...CONTEXT, tenant_id: 0 };
const TIMEOUT = { timeout: 20000 };

class CheckFailed extends Error {}

function check(condition, message) {
  if (!condition) throw new CheckFailed(message);
}

// RFC 8785 for the values used here (ASCII strings, safe integers, objects).
function canonical(value) {
  if (Array.isArray(value)) return `[${value.map(canonical).join(",")}]`;
  if (value !== null && typeof value === "object") {
    const keys = Object.keys(value).sort();
    return `{${keys.map((key) => `${JSON.stringify(key)}:${canonical(value[key])}`).join(",")}}`;
  }
  return JSON.stringify(value);
}

function deepEqual(a, b) {
  return canonical(a) === canonical(b);
}

// Write down every message `transport` carries, as sent: each request with
// its response (matched by id), in order.
function record(transport) {
  const exchanges = [];
  const byId = new Map();
  const send = transport.send.bind(transport);
  transport.send = async (message, options) => {
    if (message.method !== undefined) {
      const exchange = { method: message.method, params: message.params ?? null };
      if (message.id !== undefined) {
        exchange.id = message.id;
        byId.set(JSON.stringify(message.id), exchange);
      } else {
        exchange.notification = true;
      }
      exchanges.push(exchange);
    }
    return send(message, options);
  };
  let handler;
  Object.defineProperty(transport, "onmessage", {
    configurable: true,
    get: () => handler,
    set: (next) => {
      handler =
        typeof next === "function"
          ? (message, extra) => {
              if (message.method === undefined) {
                const exchange = byId.get(JSON.stringify(message.id));
                if (exchange === undefined) exchanges.push({ method: null, unmatched_response: message });
                else if (message.error !== undefined) exchange.error = message.error;
                else exchange.result = message.result;
              }
              return next(message, extra);
            }
          : next;
    },
  });
  return exchanges;
}

async function run(transport, report) {
  report.sdk = "@modelcontextprotocol/sdk (TypeScript)";
  report.sdk_version = JSON.parse(
    readFileSync(join(peerFolder(), "node_modules/@modelcontextprotocol/sdk/package.json"), "utf8"),
  ).version;
  report.mode = "initialize";
  report.exchanges = record(transport);
  const client = new Client({ name: "evidence-wire-interop", version: "0.0.0" });
  await client.connect(transport, TIMEOUT);
  try {
    // The SDK refuses (and disconnects) a version it does not speak; the
    // one it accepted is in the initialize result.
    const initialize = report.exchanges.find((exchange) => exchange.method === "initialize");
    report.protocol_version = initialize?.result?.protocolVersion ?? null;
    report.server_name = client.getServerVersion()?.name ?? null;
    const capabilities = client.getServerCapabilities() ?? {};
    check(capabilities.tools, "server did not announce the tools capability");
    report.has_resources_capability = Boolean(capabilities.resources);

    const listing = await client.listTools(undefined, TIMEOUT);
    report.tools = listing.tools;
    const names = listing.tools.map((tool) => tool.name);
    check(names.includes("evidence_query"), `tools/list lacks evidence_query: ${names}`);
    for (const tool of listing.tools) {
      check(tool.description, `tool ${tool.name} has no description`);
      check(tool.inputSchema?.type === "object", `tool ${tool.name} inputSchema is not an object schema`);
    }

    const result = await client.callTool(
      {
        name: "evidence_query",
        arguments: { query: { provider_id: "evidence-wire", check_id: "time_now" }, context: CONTEXT },
      },
      undefined,
      TIMEOUT,
    );
    check(!result.isError, `evidence_query failed: ${JSON.stringify(result)}`);
    const texts = result.content.filter((item) => item.type === "text").map((item) => item.text);
    check(texts.length === 1, `expected exactly one text item, got ${result.content.map((item) => item.type)}`);
    const evidence = JSON.parse(texts[0]);
    if (result.structuredContent !== undefined) {
      check(deepEqual(evidence, result.structuredContent), "the text item and structuredContent disagree");
    }
    if (evidence.value?.kind === "json") {
      // The hash computed here, independently of the server; a hash the
      // server sent must agree with it.
      const ours = createHash("sha256").update(canonical(evidence.value.value), "utf8").digest("hex");
      if (evidence.evidence_hash) {
        check(evidence.evidence_hash.value === ours, `evidence_hash is not sha256 of the canonical value (${ours})`);
      }
      report.computed_hash = ours;
    }
    report.evidence = {
      structured_content: result.structuredContent ?? null,
      text: texts[0],
      content_types: result.content.map((item) => item.type),
    };

    const docs = await client.callTool(
      { name: "decision_gate_docs_search", arguments: { query: "evidence hash", max_sections: 2 } },
      undefined,
      TIMEOUT,
    );
    check(!docs.isError, `docs search failed: ${JSON.stringify(docs)}`);
    report.docs_search = {
      structured_content: docs.structuredContent ?? null,
      content_types: docs.content.map((item) => item.type),
      text: docs.content.find((item) => item.type === "text")?.text ?? null,
    };

    check(capabilities.resources, "server did not announce the resources capability");
    const resources = await client.listResources(undefined, TIMEOUT);
    report.resources = resources.resources;
    check(resources.resources.length > 0, "resources/list is empty");
    const first = resources.resources[0];
    const read = await client.readResource({ uri: first.uri }, TIMEOUT);
    check(read.contents.length === 1, `resources/read returned ${read.contents.length} items`);
    report.resource_read = {
      uri: read.contents[0].uri,
      mime_type: read.contents[0].mimeType ?? null,
      text: read.contents[0].text ?? null,
    };
    const templates = await client.listResourceTemplates(undefined, TIMEOUT);
    report.resource_templates = templates.resourceTemplates;
    try {
      await client.readResource({ uri: "decision-gate://docs/no-such-document" }, TIMEOUT);
      report.unknown_resource_error = null;
    } catch (error) {
      check(error instanceof McpError, `unknown resource: not a JSON-RPC error: ${error}`);
      report.unknown_resource_error = error.code;
    }

    try {
      const bad = await client.callTool(
        { name: "evidence_query", arguments: { query: { provider_id: "evidence-wire", check_id: "time_now" }, context: BAD_CONTEXT } },
        undefined,
        TIMEOUT,
      );
      report.bad_arguments = {
        is_error: bad.isError ?? false,
        texts: bad.content.filter((item) => item.type === "text").map((item) => item.text),
      };
    } catch (error) {
      check(error instanceof McpError, `bad arguments: not a JSON-RPC error: ${error}`);
      report.bad_arguments = { error_code: error.code, error_data: error.data ?? null };
    }

    try {
      const unknown = await client.callTool({ name: "no_such_tool", arguments: {} }, undefined, TIMEOUT);
      report.unknown_tool = { result: unknown };
    } catch (error) {
      check(error instanceof McpError, `unknown tool: not a JSON-RPC error: ${error}`);
      report.unknown_tool = { error_code: error.code, message: error.message };
    }
  } finally {
    await client.close();
  }
  return report;
}

async function main(argv) {
  let transport;
  if (argv.length >= 2 && argv[0] === "--stdio") {
    transport = new StdioClientTransport({ command: argv[1], args: argv.slice(2), stderr: "inherit" });
  } else if (argv.length === 2 && argv[0] === "--http") {
    transport = new StreamableHTTPClientTransport(new URL(argv[1]));
  } else {
    console.error("usage: mcp_ts_client.mjs --stdio PROGRAM [ARG...] | --http URL");
    return 2;
  }
  const report = {};
  try {
    await run(transport, report);
    console.log(JSON.stringify(report));
    return 0;
  } catch (error) {
    console.error(`mcp_ts_client: ${error instanceof CheckFailed ? "check failed" : "error"}: ${error?.stack ?? error}`);
    console.error(`partial report: ${JSON.stringify(report)}`);
    return 1;
  }
}

process.exitCode = await main(process.argv.slice(2));
