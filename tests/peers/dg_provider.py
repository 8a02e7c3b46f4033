#!/usr/bin/env python3
"""A Decision Gate-style evidence provider, Python standard library only.

Written from the protocol text alone (the "Evidence Provider Protocol"
source document), independently of evidence-wire's code, so that our client
is tested against someone else's reading of the protocol:

- stdio, Content-Length framing (header name case-insensitive, 8 KiB header
  cap, 1 MiB body cap: an oversized body is drained and answered -32600;
  invalid JSON is answered -32700 with "id": null), output
  `Content-Length: N\\r\\n\\r\\n<compact JSON>`;
- `tools/list` advertises `evidence_query` with `input_schema`;
- `tools/call` `evidence_query` answers `{"content":[{"type":"json","json":<EvidenceResult>}]}`;
- `evidence_hash` is SHA-256 (lowercase hex) of the RFC 8785 canonical JSON of
  the inner value, or of the raw bytes for `kind = "bytes"`, computed here;
- expected failures are an EvidenceResult with `value = null` and `error`;
  unsupported checks and malformed requests are JSON-RPC errors.

Checks (`check_id`, or the older `predicate`):
  get          env-style lookup of params.key in a fixed table (DEPLOY_ENV=production)
  file_size    the seed's example: 1024 bytes of report.json with evidence_ref and anchor
  object       {"status":"approved","count":42}
  numbers      {"b":[1,2.5,{"z":null,"a":"x"}],"a":{"d":1e2,"c":-0}} (floats canonicalized)
  bytes        the bytes of "hello" (kind bytes)
  no_hash      "hello" with evidence_hash null (the caller computes it)
  bad_hash     "hello" with a wrong evidence_hash (the caller must reject it)
  missing      value null with error not_found
  rpc_error    a JSON-RPC error
  mistyped     the string "not a number" (its contract declares an integer)
  slow         {"slept_ms": N} after sleeping params.ms (at most 5000) milliseconds
Anything the provider logs goes to stderr; stdout carries only frames.

With DG_PROVIDER_RECEIVED=FILE in the environment, the provider appends one
JSON line to FILE when it starts ({"pid": N, "started": true}) and one for
every message it reads ({"pid": N, "message": <the message>}), so a test can
see what reached it (and which process to kill).
"""

import hashlib
import json
import math
import os
import sys
import time

MAX_HEADER_BYTES = 8 * 1024
MAX_BODY_BYTES = 1024 * 1024

ENV_TABLE = {"DEPLOY_ENV": "production"}


def log(message):
    print(f"dg_provider: {message}", file=sys.stderr, flush=True)


def note_received(entry):
    """Appends `entry` to $DG_PROVIDER_RECEIVED as one JSON line, if set."""
    path = os.environ.get("DG_PROVIDER_RECEIVED")
    if not path:
        return
    entry = dict(entry, pid=os.getpid())
    with open(path, "a", encoding="utf-8") as received:
        received.write(json.dumps(entry, separators=(",", ":")) + "\n")


# ---------------------------------------------------------------- canonical JSON


def canonical_number(number):
    """ECMAScript Number::toString, as RFC 8785 requires."""
    if isinstance(number, bool):
        raise TypeError("bool is not a number")
    if isinstance(number, int):
        if abs(number) > 2**53:
            raise ValueError("integer outside the I-JSON range")
        return str(number)
    if math.isnan(number) or math.isinf(number):
        raise ValueError("NaN and infinities have no JSON form")
    if number == 0:
        return "0"
    sign = "-" if number < 0 else ""
    # repr gives the shortest digits that round-trip, as ECMAScript does.
    mantissa, _, exponent = repr(abs(number)).partition("e")
    whole, _, fraction = mantissa.partition(".")
    digits = (whole + fraction.rstrip("0")).lstrip("0") or "0"
    # Decimal point position: value = 0.DIGITS * 10**point
    point = len(whole.lstrip("0")) if whole.lstrip("0") else -(len(fraction) - len(fraction.lstrip("0")))
    point += int(exponent or 0)
    if len(digits) <= point <= 21:
        return sign + digits + "0" * (point - len(digits))
    if 0 < point <= 21:
        return sign + digits[:point] + "." + digits[point:]
    if -6 < point <= 0:
        return sign + "0." + "0" * (-point) + digits
    tail = "." + digits[1:] if len(digits) > 1 else ""
    return f"{sign}{digits[0]}{tail}e{point - 1:+d}"


def canonical_string(text):
    return json.dumps(text, ensure_ascii=False)


def canonical(value):
    """RFC 8785 (JCS) serialization of a parsed JSON value."""
    if value is None:
        return "null"
    if value is True:
        return "true"
    if value is False:
        return "false"
    if isinstance(value, (int, float)):
        return canonical_number(value)
    if isinstance(value, str):
        return canonical_string(value)
    if isinstance(value, list):
        return "[" + ",".join(canonical(item) for item in value) + "]"
    if isinstance(value, dict):
        keys = sorted(value, key=lambda key: key.encode("utf-16-be"))
        return "{" + ",".join(f"{canonical_string(key)}:{canonical(value[key])}" for key in keys) + "}"
    raise TypeError(f"not a JSON value: {type(value).__name__}")


def sha256_hex(data):
    return hashlib.sha256(data).hexdigest()


# ---------------------------------------------------------------- evidence


def result(value, *, hash_value="compute", ref=None, anchor=None, error=None):
    if hash_value == "compute" and value is not None:
        if value["kind"] == "bytes":
            hash_value = sha256_hex(bytes(value["value"]))
        else:
            hash_value = sha256_hex(canonical(value["value"]).encode("utf-8"))
    elif hash_value == "compute":
        hash_value = None
    return {
        "value": value,
        "lane": "verified",
        "error": error,
        "evidence_hash": None if hash_value is None else {"algorithm": "sha256", "value": hash_value},
        "evidence_ref": ref,
        "evidence_anchor": anchor,
        "signature": None,
        "content_type": "application/json" if value is not None else None,
    }


class RpcError(Exception):
    def __init__(self, code, message):
        super().__init__(message)
        self.code = code
        self.message = message


def evidence_query(arguments):
    if not isinstance(arguments, dict):
        raise RpcError(-32602, "arguments must be an object")
    query = arguments.get("query")
    context = arguments.get("context")
    if not isinstance(query, dict) or not isinstance(context, dict):
        raise RpcError(-32602, "arguments.query and arguments.context are required objects")
    check = query.get("check_id", query.get("predicate"))
    params = query.get("params") or {}
    if check == "get":
        key = params.get("key")
        if key not in ENV_TABLE:
            return result(None, error={"code": "env_not_set", "message": f"{key!r} is not set", "details": None})
        return result({"kind": "json", "value": ENV_TABLE[key]})
    if check == "file_size":
        path = params.get("path", "report.json")
        anchor_value = canonical({"path": path, "root_id": "evidence-root", "size": 1024})
        return result(
            {"kind": "json", "value": 1024},
            ref={"uri": f"dg+file://evidence-root/{path}"},
            anchor={"anchor_type": "file_path_rooted", "anchor_value": anchor_value},
        )
    if check == "object":
        return result({"kind": "json", "value": {"status": "approved", "count": 42}})
    if check == "numbers":
        value = json.loads('{"b":[1,2.5,{"z":null,"a":"x"}],"a":{"d":1e2,"c":-0}}')
        return result({"kind": "json", "value": value})
    if check == "bytes":
        return result({"kind": "bytes", "value": list(b"hello")})
    if check == "no_hash":
        return result({"kind": "json", "value": "hello"}, hash_value=None)
    if check == "bad_hash":
        return result({"kind": "json", "value": "hello"}, hash_value="0" * 64)
    if check == "missing":
        return result(None, error={"code": "not_found", "message": "no evidence for this check", "details": {"check": check}})
    if check == "rpc_error":
        raise RpcError(-32000, "rpc_error: the provider refuses on purpose")
    if check == "mistyped":
        return result({"kind": "json", "value": "not a number"})
    if check == "slow":
        milliseconds = params.get("ms", 0)
        if not isinstance(milliseconds, int) or isinstance(milliseconds, bool):
            milliseconds = 0
        milliseconds = max(0, min(milliseconds, 5000))
        time.sleep(milliseconds / 1000)
        return result({"kind": "json", "value": {"slept_ms": milliseconds}})
    raise RpcError(-32602, f"unsupported check {check!r}")


def handle(message):
    """One request in, one response object out (None for notifications)."""
    if not isinstance(message, dict) or message.get("jsonrpc") != "2.0" or not isinstance(message.get("method"), str):
        return error_response(message.get("id") if isinstance(message, dict) else None, -32600, "Invalid Request")
    if "id" not in message:
        return None
    request_id = message["id"]
    method = message["method"]
    params = message.get("params") or {}
    try:
        if method == "tools/list":
            return {
                "jsonrpc": "2.0",
                "id": request_id,
                "result": {
                    "tools": [
                        {
                            "name": "evidence_query",
                            "description": "Resolve a Decision Gate evidence query.",
                            "input_schema": {"type": "object"},
                        }
                    ]
                },
            }
        if method == "tools/call":
            if params.get("name") != "evidence_query":
                raise RpcError(-32601, f"unknown tool {params.get('name')!r}")
            evidence = evidence_query(params.get("arguments"))
            return {"jsonrpc": "2.0", "id": request_id, "result": {"content": [{"type": "json", "json": evidence}]}}
        raise RpcError(-32601, f"method not found: {method}")
    except RpcError as failure:
        return error_response(request_id, failure.code, failure.message)


def error_response(request_id, code, message):
    return {"jsonrpc": "2.0", "id": request_id, "error": {"code": code, "message": message}}


# ---------------------------------------------------------------- framing


def write_frame(out, message):
    body = json.dumps(message, separators=(",", ":"), ensure_ascii=False).encode("utf-8")
    out.write(b"Content-Length: " + str(len(body)).encode("ascii") + b"\r\n\r\n" + body)
    out.flush()


def read_headers(stream):
    """Header lines up to the blank line; None at a clean end of input."""
    length = None
    seen = 0
    started = False
    while True:
        line = stream.readline(MAX_HEADER_BYTES + 1)
        if not line:
            if started:
                raise EOFError("end of input inside a header block")
            return None
        seen += len(line)
        if seen > MAX_HEADER_BYTES:
            raise ValueError("header block larger than 8 KiB")
        text = line.decode("ascii", "replace").rstrip("\r\n")
        if not text:
            if not started:
                continue  # blank lines between frames
            if length is None:
                raise ValueError("header block without Content-Length")
            return length
        started = True
        name, _, value = text.partition(":")
        if name.strip().lower() == "content-length":
            value = value.strip()
            if not value.isdigit():
                raise ValueError(f"bad Content-Length {value!r}")
            length = int(value)


def serve(stream_in, stream_out):
    while True:
        try:
            length = read_headers(stream_in)
        except (ValueError, EOFError) as failure:
            log(f"framing error: {failure}; stopping")
            return 1
        if length is None:
            return 0
        if length > MAX_BODY_BYTES:
            remaining = length
            while remaining > 0:
                chunk = stream_in.read(min(remaining, 64 * 1024))
                if not chunk:
                    break
                remaining -= len(chunk)
            write_frame(stream_out, error_response(None, -32600, "request body larger than 1 MiB"))
            continue
        body = stream_in.read(length)
        if len(body) < length:
            log("end of input inside a body")
            return 1
        try:
            message = json.loads(body.decode("utf-8"))
        except (UnicodeDecodeError, json.JSONDecodeError):
            note_received({"unparsable": body.decode("utf-8", "replace")})
            write_frame(stream_out, error_response(None, -32700, "Parse error"))
            continue
        note_received({"message": message})
        response = handle(message)
        if response is not None:
            write_frame(stream_out, response)


def main(argv):
    if argv and argv[0] in ("-h", "--help"):
        print(__doc__)
        return 0
    if argv and argv[0] == "--canonical":
        # Helper for tests: canonical JSON of stdin, for cross-checks.
        sys.stdout.write(canonical(json.loads(sys.stdin.read())))
        return 0
    note_received({"started": True})
    return serve(sys.stdin.buffer, sys.stdout.buffer)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
