// vscode-jsonrpc (npm, Microsoft's LSP base protocol implementation) as a
// Content-Length client driving a stdio provider.
//
// Usage: node vscode_client.mjs PROGRAM [ARG...]
//
// Two connections, each to a fresh child:
//  1. Decision Gate dialect (no handshake): tools/list (expects
//     `input_schema`), three pipelined tools/call evidence_query with
//     different trigger times (each answer must carry its own value: ids
//     matched), an unknown tool (JSON-RPC error), an unknown method (-32601),
//     a notification (never answered), then stdin closed: the child must exit 0.
//  2. MCP dialect over Content-Length: initialize, notifications/initialized,
//     tools/call evidence_query (text item + structuredContent).
// The report (one JSON line on stdout) goes to the Rust test. Exit status
// 0 = every check here held, 1 = one failed, 2 = usage.

import { spawn } from "node:child_process";
import { createHash } from "node:crypto";
import { peerRequire } from "./peer_modules.mjs";

const require = peerRequire();
const rpc = require("vscode-jsonrpc/node");

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

function sha256(text) {
  return createHash("sha256").update(text, "utf8").digest("hex");
}

function context(triggerTime) {
  return {
    tenant_id: 1,
    namespace_id: 1,
    run_id: "run-1",
    scenario_id: "s",
    stage_id: "st",
    trigger_id: "t",
    trigger_time: { kind: "unix_millis", value: triggerTime },
    correlation_id: null,
  };
}

function evidenceCall(triggerTime) {
  return {
    name: "evidence_query",
    arguments: { query: { provider_id: "evidence-wire", check_id: "time_now" }, context: context(triggerTime) },
  };
}

function withTimeout(promise, what, ms = 15000) {
  let timer;
  const timeout = new Promise((_, reject) => {
    timer = setTimeout(() => reject(new CheckFailed(`${what}: no answer within ${ms} ms`)), ms);
  });
  return Promise.race([promise, timeout]).finally(() => clearTimeout(timer));
}

function start(argv) {
  const child = spawn(argv[0], argv.slice(1), { stdio: ["pipe", "pipe", "inherit"] });
  const exited = new Promise((resolve) => child.on("exit", (code, signal) => resolve({ code, signal })));
  const connection = rpc.createMessageConnection(
    new rpc.StreamMessageReader(child.stdout),
    new rpc.StreamMessageWriter(child.stdin),
  );
  const unexpected = [];
  connection.onNotification((method, params) => unexpected.push({ method, params }));
  connection.onError(([error]) => unexpected.push({ error: String(error) }));
  connection.listen();
  return { child, exited, connection, unexpected };
}

async function errorCode(promise, what) {
  try {
    const result = await withTimeout(promise, what);
    return { result };
  } catch (error) {
    if (error instanceof CheckFailed) throw error;
    check(error instanceof rpc.ResponseError, `${what}: not a JSON-RPC error: ${error}`);
    return { code: error.code, message: error.message };
  }
}

async function decisionGateDialect(argv) {
  const report = {};
  const { child, exited, connection, unexpected } = start(argv);
  const listing = await withTimeout(connection.sendRequest("tools/list", {}), "tools/list");
  report.tools = listing.tools;
  const tool = listing.tools.find((entry) => entry.name === "evidence_query");
  check(tool, "tools/list lacks evidence_query");
  check(tool.input_schema?.type === "object", "Decision Gate dialect: evidence_query lacks input_schema");

  const times = [1710000000000, 1710000000001, 1700000000000];
  const answers = await withTimeout(
    Promise.all(times.map((time) => connection.sendRequest("tools/call", evidenceCall(time)))),
    "pipelined tools/call",
  );
  report.pipelined = [];
  answers.forEach((answer, index) => {
    check(answer.content?.length >= 1, `answer ${index} has no content`);
    const item = answer.content[0];
    check(item.type === "json", `Decision Gate dialect: content[0] is ${item.type}, not json`);
    const evidence = item.json;
    check(evidence.value?.value === times[index], `answer ${index} carries ${evidence.value?.value}, not ${times[index]} (ids mixed up?)`);
    const ours = sha256(canonical(evidence.value.value));
    if (evidence.evidence_hash) {
      check(evidence.evidence_hash.value === ours, `answer ${index}: evidence_hash is not sha256 of the canonical value`);
    }
    report.pipelined.push({ evidence, computed_hash: ours });
  });

  report.unknown_tool = await errorCode(
    connection.sendRequest("tools/call", { name: "no_such_tool", arguments: {} }),
    "unknown tool",
  );
  report.unknown_method = await errorCode(connection.sendRequest("no/such/method", {}), "unknown method");
  await connection.sendNotification("notifications/cancelled", { requestId: 999, reason: "interop test" });
  // A ping after the notification proves the stream is still in sync and
  // that the notification was not answered (an answer would surface as an
  // error on the connection).
  report.after_notification = await errorCode(connection.sendRequest("ping", {}), "ping");

  child.stdin.end();
  const exit = await withTimeout(exited, "child exit after stdin closed");
  report.exit = exit;
  report.unexpected = unexpected;
  connection.dispose();
  return report;
}

async function mcpDialect(argv) {
  const report = {};
  const { child, exited, connection, unexpected } = start(argv);
  const init = await withTimeout(
    connection.sendRequest("initialize", {
      protocolVersion: "2025-06-18",
      capabilities: {},
      clientInfo: { name: "vscode-jsonrpc-interop", version: "10.0.0" },
    }),
    "initialize",
  );
  report.initialize = init;
  await connection.sendNotification("notifications/initialized");
  const listing = await withTimeout(connection.sendRequest("tools/list"), "tools/list without params");
  check(
    listing.tools.some((entry) => entry.name === "evidence_query" && entry.inputSchema?.type === "object"),
    "MCP dialect: evidence_query lacks inputSchema",
  );
  const answer = await withTimeout(connection.sendRequest("tools/call", evidenceCall(1710000000000)), "tools/call");
  const text = answer.content?.find((item) => item.type === "text")?.text;
  check(text !== undefined, "MCP dialect: no text item");
  check(canonical(JSON.parse(text)) === canonical(answer.structuredContent), "MCP dialect: text and structuredContent disagree");
  report.evidence = answer.structuredContent;
  report.content_types = answer.content.map((item) => item.type);
  child.stdin.end();
  report.exit = await withTimeout(exited, "child exit after stdin closed");
  report.unexpected = unexpected;
  connection.dispose();
  return report;
}

async function main(argv) {
  if (argv.length < 1) {
    console.error("usage: vscode_client.mjs PROGRAM [ARG...]");
    return 2;
  }
  try {
    const report = {
      peer: "vscode-jsonrpc",
      decision_gate: await decisionGateDialect(argv),
      mcp: await mcpDialect(argv),
    };
    console.log(JSON.stringify(report));
    return 0;
  } catch (error) {
    console.error(`vscode_client: ${error instanceof CheckFailed ? "check failed" : "error"}: ${error?.stack ?? error}`);
    return 1;
  }
}

process.exitCode = await main(process.argv.slice(2));
process.exit();
