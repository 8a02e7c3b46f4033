// vscode-jsonrpc (npm) as a Content-Length evidence provider on stdin/stdout,
// for our client to query: it proves our client's framing against an
// independent implementation of the LSP base protocol.
//
// Usage: node vscode_server.mjs [--shape json|structured|text]
//
// Answers `initialize` (MCP handshake, optional), `tools/list` and
// `tools/call evidence_query`. The result shape: `json` (Decision Gate:
// content[0] = {type:"json", json}), `structured` (MCP: text item +
// structuredContent) or `text` (MCP: only the JSON as text). Checks:
//   echo        value = params.value (kind json), evidence_hash computed here
//   echo_bytes  value = UTF-8 bytes of params.text (kind bytes), hash of the raw bytes
//   bad_hash    value = params.value with a wrong evidence_hash (must be rejected)
//   missing     value = null with an EvidenceResult error (expected failure)
//   rpc_error   a JSON-RPC error (-32602)
// Every other check id is a JSON-RPC error too. Nothing else is written to stdout.

import { createHash } from "node:crypto";
import { peerRequire } from "./peer_modules.mjs";

const require = peerRequire();
const rpc = require("vscode-jsonrpc/node");

const shapeIndex = process.argv.indexOf("--shape");
const shape = shapeIndex >= 0 ? process.argv[shapeIndex + 1] : "json";
if (!["json", "structured", "text"].includes(shape)) {
  console.error(`unknown --shape ${shape}`);
  process.exit(2);
}

// RFC 8785 for the values this provider returns (ASCII strings, safe integers, objects, arrays).
function canonical(value) {
  if (Array.isArray(value)) return `[${value.map(canonical).join(",")}]`;
  if (value !== null && typeof value === "object") {
    const keys = Object.keys(value).sort();
    return `{${keys.map((key) => `${JSON.stringify(key)}:${canonical(value[key])}`).join(",")}}`;
  }
  return JSON.stringify(value);
}

function sha256(data) {
  return createHash("sha256").update(data).digest("hex");
}

function evidence(value, hash) {
  return {
    value,
    lane: "verified",
    error: null,
    evidence_hash: hash === null ? null : { algorithm: "sha256", value: hash },
    evidence_ref: null,
    evidence_anchor: null,
    signature: null,
    content_type: "application/json",
  };
}

function answer(query) {
  const params = query.params ?? {};
  switch (query.check_id) {
    case "echo":
      return evidence({ kind: "json", value: params.value }, sha256(Buffer.from(canonical(params.value), "utf8")));
    case "echo_bytes": {
      const bytes = Buffer.from(String(params.text ?? ""), "utf8");
      return evidence({ kind: "bytes", value: [...bytes] }, sha256(bytes));
    }
    case "bad_hash":
      return evidence({ kind: "json", value: params.value }, "0".repeat(64));
    case "missing":
      return {
        ...evidence(null, null),
        error: { code: "not_found", message: "nothing here", details: null },
        content_type: null,
      };
    case "rpc_error":
      throw new rpc.ResponseError(-32602, "rpc_error check: refused on purpose");
    default:
      throw new rpc.ResponseError(-32602, `unknown check ${JSON.stringify(query.check_id)}`);
  }
}

const connection = rpc.createMessageConnection(
  new rpc.StreamMessageReader(process.stdin),
  new rpc.StreamMessageWriter(process.stdout),
);

connection.onRequest("initialize", (params) => ({
  protocolVersion: params?.protocolVersion ?? "2025-06-18",
  capabilities: { tools: { listChanged: false } },
  serverInfo: { name: "vscode-jsonrpc-provider", version: "10.0.0" },
}));
connection.onNotification("notifications/initialized", () => {});
connection.onRequest("tools/list", () => ({
  tools: [
    {
      name: "evidence_query",
      description: "Resolve a Decision Gate evidence query.",
      input_schema: { type: "object" },
      inputSchema: { type: "object" },
    },
  ],
}));
connection.onRequest("tools/call", (params) => {
  if (params?.name !== "evidence_query") {
    throw new rpc.ResponseError(-32601, `unknown tool ${JSON.stringify(params?.name)}`);
  }
  const result = answer(params.arguments?.query ?? {});
  const text = JSON.stringify(result);
  switch (shape) {
    case "structured":
      return { content: [{ type: "text", text }], structuredContent: result };
    case "text":
      return { content: [{ type: "text", text }] };
    default:
      return { content: [{ type: "json", json: result }] };
  }
});
connection.onClose(() => process.exit(0));
connection.listen();
process.stdin.on("end", () => process.exit(0));
