// A Decision Gate-style evidence provider in TypeScript, Node's standard
// library only (run with Node 22's type stripping:
// `node --experimental-strip-types tests/peers/dg_provider.ts`).
//
// Written from the protocol text alone (the "Evidence Provider Protocol"
// source document), independently of evidence-wire's code and of the
// Python peer, so that `evidence-wire wrap` is tested against another
// reading of the protocol in another language:
//
// - stdio, Content-Length framing: a header block of `Name: value` lines
//   ended by an empty line (names case-insensitive, 8 KiB header cap), then
//   exactly Content-Length bytes of UTF-8 JSON (1 MiB cap: a larger body is
//   read and dropped and answered -32600; a body that is not JSON is
//   answered -32700 with "id": null); output `Content-Length: N\r\n\r\n`
//   followed by the compact JSON. One request is answered at a time, in
//   order.
// - `tools/list` lists the one tool, `evidence_query`, with its input schema.
// - `tools/call` of `evidence_query` with `{"query": {...}, "context": {...}}`
//   answers `{"content": [{"type": "json", "json": <EvidenceResult>}]}`.
// - `evidence_hash` is `{"algorithm": "sha256", "value": <lowercase hex>}` of
//   the canonical JSON (RFC 8785) of the inner value, or of the raw bytes
//   for `kind = "bytes"`.
// - Expected failures are an EvidenceResult with `value: null` and `error`;
//   an unsupported check or a malformed request is a JSON-RPC error.
//
// Checks (`check_id`): get, file_size, object, numbers, bytes, no_hash,
// bad_hash, missing, rpc_error, mistyped, slow: the same answers as
// tests/peers/dg_provider.py (see its docstring).
//
// With DG_PROVIDER_RECEIVED=FILE in the environment, one JSON line is
// appended to FILE at start ({"pid": N, "started": true}) and for every
// message read ({"pid": N, "message": <the message>}).
//
// Only erasable TypeScript syntax (types, interfaces, annotations), so that
// Node runs the file as it is, without a compiler.

import { createHash } from "node:crypto";
import { appendFileSync } from "node:fs";

type Json = null | boolean | number | string | Json[] | { [key: string]: Json };

interface EvidenceValue {
  kind: "json" | "bytes";
  value: Json;
}

interface EvidenceError {
  code: string;
  message: string;
  details: Json;
}

interface EvidenceResult {
  value: EvidenceValue | null;
  lane: "verified";
  error: EvidenceError | null;
  evidence_hash: { algorithm: "sha256"; value: string } | null;
  evidence_ref: { uri: string } | null;
  evidence_anchor: { anchor_type: string; anchor_value: string } | null;
  signature: null;
  content_type: string | null;
}

interface JsonRpcError {
  jsonrpc: "2.0";
  id: Json;
  error: { code: number; message: string };
}

const MAX_HEADER_BYTES = 8 * 1024;
const MAX_BODY_BYTES = 1024 * 1024;
const ENV_TABLE: Record<string, string> = { DEPLOY_ENV: "production" };

function log(message: string): void {
  process.stderr.write(`dg_provider.ts: ${message}\n`);
}

function noteReceived(entry: Record<string, Json>): void {
  const path = process.env.DG_PROVIDER_RECEIVED;
  if (!path) {
    return;
  }
  appendFileSync(path, JSON.stringify({ ...entry, pid: process.pid }) + "\n");
}

// ------------------------------------------------------------ canonical JSON

// RFC 8785: ECMAScript's own number and string serialization, members
// sorted by the UTF-16 code units of their names (what `sort()` compares).
function canonical(value: Json): string {
  if (value === null) {
    return "null";
  }
  if (typeof value === "boolean") {
    return value ? "true" : "false";
  }
  if (typeof value === "number") {
    if (!Number.isFinite(value)) {
      throw new Error("NaN and infinities have no JSON form");
    }
    if (Number.isInteger(value) && Math.abs(value) > Number.MAX_SAFE_INTEGER) {
      throw new Error("integer outside the I-JSON range");
    }
    // Number::toString; -0 prints as 0.
    return String(value);
  }
  if (typeof value === "string") {
    return JSON.stringify(value);
  }
  if (Array.isArray(value)) {
    return "[" + value.map(canonical).join(",") + "]";
  }
  const names = Object.keys(value).sort();
  return "{" + names.map((name) => `${JSON.stringify(name)}:${canonical(value[name])}`).join(",") + "}";
}

function sha256Hex(bytes: Uint8Array): string {
  return createHash("sha256").update(bytes).digest("hex");
}

// ------------------------------------------------------------ evidence

interface ResultOptions {
  hash?: "compute" | "none" | string;
  ref?: { uri: string };
  anchor?: { anchor_type: string; anchor_value: string };
  error?: EvidenceError;
}

function evidence(value: EvidenceValue | null, options: ResultOptions = {}): EvidenceResult {
  let hash: string | null = null;
  const mode = options.hash ?? "compute";
  if (mode === "compute" && value !== null) {
    hash =
      value.kind === "bytes"
        ? sha256Hex(Uint8Array.from(value.value as number[]))
        : sha256Hex(Buffer.from(canonical(value.value), "utf8"));
  } else if (mode !== "compute" && mode !== "none") {
    hash = mode;
  }
  return {
    value,
    lane: "verified",
    error: options.error ?? null,
    evidence_hash: hash === null ? null : { algorithm: "sha256", value: hash },
    evidence_ref: options.ref ?? null,
    evidence_anchor: options.anchor ?? null,
    signature: null,
    content_type: value === null ? null : "application/json",
  };
}

class RpcError extends Error {
  code: number;
  constructor(code: number, message: string) {
    super(message);
    this.code = code;
  }
}

function isObject(value: unknown): value is Record<string, Json> {
  return typeof value === "object" && value !== null && !Array.isArray(value);
}

async function evidenceQuery(argumentsValue: Json | undefined): Promise<EvidenceResult> {
  if (!isObject(argumentsValue)) {
    throw new RpcError(-32602, "arguments must be an object");
  }
  const query = argumentsValue.query;
  const context = argumentsValue.context;
  if (!isObject(query) || !isObject(context)) {
    throw new RpcError(-32602, "arguments.query and arguments.context are required objects");
  }
  const check = query.check_id;
  const params: Record<string, Json> = isObject(query.params) ? query.params : {};
  switch (check) {
    case "get": {
      const key = params.key;
      if (typeof key !== "string" || !(key in ENV_TABLE)) {
        return evidence(null, {
          error: { code: "env_not_set", message: `${JSON.stringify(key)} is not set`, details: null },
        });
      }
      return evidence({ kind: "json", value: ENV_TABLE[key] });
    }
    case "file_size": {
      const path = typeof params.path === "string" ? params.path : "report.json";
      return evidence(
        { kind: "json", value: 1024 },
        {
          ref: { uri: `dg+file://evidence-root/${path}` },
          anchor: {
            anchor_type: "file_path_rooted",
            anchor_value: canonical({ path, root_id: "evidence-root", size: 1024 }),
          },
        },
      );
    }
    case "object":
      return evidence({ kind: "json", value: { status: "approved", count: 42 } });
    case "numbers":
      return evidence({ kind: "json", value: JSON.parse('{"b":[1,2.5,{"z":null,"a":"x"}],"a":{"d":1e2,"c":-0}}') });
    case "bytes":
      return evidence({ kind: "bytes", value: Array.from(Buffer.from("hello", "utf8")) });
    case "no_hash":
      return evidence({ kind: "json", value: "hello" }, { hash: "none" });
    case "bad_hash":
      return evidence({ kind: "json", value: "hello" }, { hash: "0".repeat(64) });
    case "missing":
      return evidence(null, {
        error: { code: "not_found", message: "no evidence for this check", details: { check } },
      });
    case "rpc_error":
      throw new RpcError(-32000, "rpc_error: the provider refuses on purpose");
    case "mistyped":
      return evidence({ kind: "json", value: "not a number" });
    case "slow": {
      const requested = typeof params.ms === "number" && Number.isInteger(params.ms) ? params.ms : 0;
      const milliseconds = Math.max(0, Math.min(requested, 5000));
      await new Promise<void>((resolve) => setTimeout(resolve, milliseconds));
      return evidence({ kind: "json", value: { slept_ms: milliseconds } });
    }
    default:
      throw new RpcError(-32602, `unsupported check ${JSON.stringify(check)}`);
  }
}

function errorResponse(id: Json, code: number, message: string): JsonRpcError {
  return { jsonrpc: "2.0", id, error: { code, message } };
}

// One request in, one response out (null for a notification).
async function handle(message: Json): Promise<object | null> {
  if (!isObject(message) || message.jsonrpc !== "2.0" || typeof message.method !== "string") {
    return errorResponse(isObject(message) && message.id !== undefined ? message.id : null, -32600, "Invalid Request");
  }
  if (!("id" in message)) {
    return null;
  }
  const id = message.id;
  const params: Record<string, Json> = isObject(message.params) ? message.params : {};
  try {
    if (message.method === "tools/list") {
      return {
        jsonrpc: "2.0",
        id,
        result: {
          tools: [
            {
              name: "evidence_query",
              description: "Resolve a Decision Gate evidence query.",
              input_schema: {
                type: "object",
                properties: { query: { type: "object" }, context: { type: "object" } },
                required: ["query", "context"],
              },
            },
          ],
        },
      };
    }
    if (message.method === "tools/call") {
      if (params.name !== "evidence_query") {
        throw new RpcError(-32601, `unknown tool ${JSON.stringify(params.name)}`);
      }
      const result = await evidenceQuery(params.arguments);
      return { jsonrpc: "2.0", id, result: { content: [{ type: "json", json: result }] } };
    }
    throw new RpcError(-32601, `method not found: ${message.method}`);
  } catch (failure) {
    if (failure instanceof RpcError) {
      return errorResponse(id, failure.code, failure.message);
    }
    return errorResponse(id, -32603, `internal error: ${String(failure)}`);
  }
}

// ------------------------------------------------------------ framing

class Input {
  private chunks: Buffer = Buffer.alloc(0);
  private ended = false;
  private waiting: (() => void) | null = null;

  constructor(stream: NodeJS.ReadableStream) {
    stream.on("data", (chunk: Buffer) => {
      this.chunks = this.chunks.length === 0 ? chunk : Buffer.concat([this.chunks, chunk]);
      this.wake();
    });
    stream.on("end", () => {
      this.ended = true;
      this.wake();
    });
  }

  private wake(): void {
    const waiting = this.waiting;
    this.waiting = null;
    waiting?.();
  }

  // Waits for more input; false at the end of input.
  private async more(): Promise<boolean> {
    if (this.ended) {
      return false;
    }
    await new Promise<void>((resolve) => {
      this.waiting = resolve;
    });
    return true;
  }

  // The Content-Length of the next header block; null at a clean end.
  async headers(): Promise<number | null> {
    for (;;) {
      // Blank lines between frames are skipped.
      while (this.chunks.length >= 2 && this.chunks[0] === 0x0d && this.chunks[1] === 0x0a) {
        this.chunks = this.chunks.subarray(2);
      }
      const end = this.chunks.indexOf("\r\n\r\n");
      if (end >= 0) {
        if (end + 4 > MAX_HEADER_BYTES) {
          throw new Error("header block larger than 8 KiB");
        }
        const block = this.chunks.subarray(0, end).toString("latin1");
        this.chunks = this.chunks.subarray(end + 4);
        let length: number | null = null;
        for (const line of block.split("\r\n")) {
          const colon = line.indexOf(":");
          const name = (colon < 0 ? line : line.slice(0, colon)).trim().toLowerCase();
          const value = colon < 0 ? "" : line.slice(colon + 1).trim();
          if (name === "content-length") {
            if (!/^[0-9]+$/.test(value)) {
              throw new Error(`bad Content-Length ${JSON.stringify(value)}`);
            }
            length = Number(value);
          }
        }
        if (length === null) {
          throw new Error("header block without Content-Length");
        }
        return length;
      }
      if (this.chunks.length > MAX_HEADER_BYTES) {
        throw new Error("header block larger than 8 KiB");
      }
      if (!(await this.more())) {
        if (this.chunks.length > 0) {
          throw new Error("end of input inside a header block");
        }
        return null;
      }
    }
  }

  // Exactly `length` bytes (kept when `keep`, else dropped as they come).
  async body(length: number, keep: boolean): Promise<Buffer> {
    const kept: Buffer[] = [];
    let remaining = length;
    for (;;) {
      const take = Math.min(remaining, this.chunks.length);
      if (keep) {
        kept.push(this.chunks.subarray(0, take));
      }
      this.chunks = this.chunks.subarray(take);
      remaining -= take;
      if (remaining === 0) {
        return Buffer.concat(kept);
      }
      if (!(await this.more())) {
        throw new Error("end of input inside a body");
      }
    }
  }
}

function writeFrame(message: object): void {
  const body = Buffer.from(JSON.stringify(message), "utf8");
  process.stdout.write(Buffer.concat([Buffer.from(`Content-Length: ${body.length}\r\n\r\n`, "ascii"), body]));
}

async function serve(): Promise<number> {
  const input = new Input(process.stdin);
  for (;;) {
    let length: number | null;
    try {
      length = await input.headers();
    } catch (failure) {
      log(`framing error: ${String(failure)}; stopping`);
      return 1;
    }
    if (length === null) {
      return 0;
    }
    let body: Buffer;
    try {
      body = await input.body(length, length <= MAX_BODY_BYTES);
    } catch (failure) {
      log(String(failure));
      return 1;
    }
    if (length > MAX_BODY_BYTES) {
      writeFrame(errorResponse(null, -32600, "request body larger than 1 MiB"));
      continue;
    }
    let message: Json;
    try {
      message = JSON.parse(new TextDecoder("utf-8", { fatal: true }).decode(body));
    } catch {
      noteReceived({ unparsable: body.toString("utf8") });
      writeFrame(errorResponse(null, -32700, "Parse error"));
      continue;
    }
    noteReceived({ message });
    const response = await handle(message);
    if (response !== null) {
      writeFrame(response);
    }
  }
}

noteReceived({ started: true });
serve().then(
  (code) => {
    process.exitCode = code;
  },
  (failure) => {
    log(`failed: ${String(failure)}`);
    process.exitCode = 1;
  },
);
