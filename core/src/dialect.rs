//! The two dialects of the evidence-provider wire, the MCP revisions, and
//! what follows from the dialect and revision a message is spoken in.
//!
//! Decision Gate's own client sends `tools/call` with no handshake, reads
//! `input_schema`, expects the evidence in a `{"type":"json"}` content item
//! and verifies hashes with its own canonicalization (the `decision-gate`
//! [`Profile`]). Standard MCP clients send `initialize` first (or, from the
//! stateless revision 2026-07-28 on, put the revision in every request's
//! `_meta`), read `inputSchema`, want a text item (plus `structuredContent`
//! from 2025-06-18 on), and know only RFC 8785. A server picks the dialect
//! per connection ([`DialectChoice`]) and, for a stateless request, per
//! request; a client knows it from whether it ran the handshake.
//!
//! **The hash profile follows the verifier**: what is hashed (and signed)
//! for a Decision Gate connection uses the `decision-gate` profile, which
//! Decision Gate checks; what goes to an MCP client uses RFC 8785
//! ([`Dialect::hash_profile`]). [`HashProfile`] lets configuration fix one
//! profile instead, on either side.
//!
//! **Each MCP revision gets what it knows** ([`McpRevision`]): no
//! `structuredContent` or `outputSchema` before 2025-06-18, tool-input
//! errors as tool results from 2025-11-25 on (SEP-1303), `resultType` and
//! cache hints in 2026-07-28. This module shapes `tools/call` results for
//! every speech ([`evidence_tool_result`], [`structured_tool_result`],
//! [`failed_tool_result`]) and reads them back on the caller side
//! ([`from_tool_result`], every shape accepted).
//!
//! Limits: none of its own; values are bounded by the frame limits.

use alloc::borrow::ToOwned;
use alloc::format;
use alloc::string::{String, ToString};
use alloc::vec;
use alloc::vec::Vec;

use serde::{Deserialize, Serialize};
use serde_json::value::RawValue;
use serde_json::{Map, Value, json};

use crate::canonical::{self, Options, Profile};
use crate::evidence::EvidenceResult;

/// Which shape of messages a connection gets.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Dialect {
    /// Decision Gate: no handshake, `input_schema`, a `json` content item,
    /// hashes under the `decision-gate` profile.
    DecisionGate,
    /// Standard MCP: `inputSchema`, a text item with the canonical JSON
    /// (plus `structuredContent` and `isError` where the revision has
    /// them), hashes under RFC 8785.
    Mcp,
}

impl Dialect {
    /// The canonicalization profile the peer of this dialect verifies
    /// evidence hashes with: `decision-gate` for Decision Gate (it refuses
    /// RFC 8785 hashes where the two differ), RFC 8785 for MCP.
    pub const fn hash_profile(self) -> Profile {
        match self {
            Dialect::DecisionGate => Profile::DecisionGate,
            Dialect::Mcp => Profile::Rfc8785,
        }
    }
}

/// How the dialect of a connection is chosen.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub enum DialectChoice {
    /// MCP once the peer sends `initialize` (or a stateless request),
    /// Decision Gate before that.
    #[default]
    Auto,
    /// Always this dialect.
    Fixed(Dialect),
}

/// Which canonicalization profile evidence hashes use on a connection.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub enum HashProfile {
    /// The connection's dialect decides ([`Dialect::hash_profile`]): the
    /// profile the peer verifies with.
    #[default]
    FollowDialect,
    /// Always this profile, whatever the dialect.
    Fixed(Profile),
}

impl HashProfile {
    /// The profile to hash with on a connection of `dialect`.
    pub const fn for_dialect(self, dialect: Dialect) -> Profile {
        match self {
            HashProfile::FollowDialect => dialect.hash_profile(),
            HashProfile::Fixed(profile) => profile,
        }
    }
}

/// A published revision of the Model Context Protocol, oldest first (the
/// order of the variants is the order of the revisions).
///
/// Not exhaustive: MCP publishes new revisions, and each is added here as a
/// variant (newest last). Its features follow from its place in the order:
/// every predicate below compares the revision with the first revision
/// that had the feature, so a new revision inherits every feature of the
/// ones before it.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
#[non_exhaustive]
pub enum McpRevision {
    /// 2024-11-05: the first; the HTTP+SSE transport.
    V2024_11_05,
    /// 2025-03-26: Streamable HTTP, tool annotations, audio.
    V2025_03_26,
    /// 2025-06-18: `structuredContent`, `outputSchema`, the
    /// `MCP-Protocol-Version` header; no batches.
    V2025_06_18,
    /// 2025-11-25: tool-input errors as tool results (SEP-1303).
    V2025_11_25,
    /// 2026-07-28: stateless; `server/discover` and per-request `_meta`
    /// instead of the handshake; `resultType` and cache hints on results.
    V2026_07_28,
}

impl McpRevision {
    /// Every revision this crate speaks, newest first.
    pub const ALL: [McpRevision; 5] = [
        McpRevision::V2026_07_28,
        McpRevision::V2025_11_25,
        McpRevision::V2025_06_18,
        McpRevision::V2025_03_26,
        McpRevision::V2024_11_05,
    ];

    /// The revisions negotiated with `initialize`, newest first.
    pub const HANDSHAKE: [McpRevision; 4] = [
        McpRevision::V2025_11_25,
        McpRevision::V2025_06_18,
        McpRevision::V2025_03_26,
        McpRevision::V2024_11_05,
    ];

    /// The newest revision with a handshake: answered to an `initialize`
    /// asking for a revision this crate does not speak.
    pub const LATEST_HANDSHAKE: McpRevision = McpRevision::V2025_11_25;

    /// What a Streamable HTTP request without an `MCP-Protocol-Version`
    /// header is taken to speak (as the transport spec says).
    pub const HTTP_DEFAULT: McpRevision = McpRevision::V2025_03_26;

    /// The revision's date, as the wire spells it.
    pub const fn as_str(self) -> &'static str {
        match self {
            McpRevision::V2024_11_05 => "2024-11-05",
            McpRevision::V2025_03_26 => "2025-03-26",
            McpRevision::V2025_06_18 => "2025-06-18",
            McpRevision::V2025_11_25 => "2025-11-25",
            McpRevision::V2026_07_28 => "2026-07-28",
        }
    }

    /// The revision a wire string names, if this crate speaks it.
    pub fn parse(text: &str) -> Option<McpRevision> {
        McpRevision::ALL
            .into_iter()
            .find(|revision| revision.as_str() == text)
    }

    /// True for the stateless revisions (no handshake; every request
    /// carries its revision in `_meta`).
    pub const fn is_stateless(self) -> bool {
        self.is_at_least(McpRevision::V2026_07_28)
    }

    /// True when this revision is `first` or a later one (the variants are
    /// in the order of the revisions).
    pub const fn is_at_least(self, first: McpRevision) -> bool {
        self as u8 >= first as u8
    }

    /// True when tools may declare `outputSchema` and results carry
    /// `structuredContent` (2025-06-18 on).
    pub const fn has_structured_content(self) -> bool {
        self.is_at_least(McpRevision::V2025_06_18)
    }

    /// True when arguments that fail a tool's input schema are answered as
    /// a tool result with `isError: true` rather than JSON-RPC -32602
    /// (SEP-1303, 2025-11-25 on).
    pub const fn input_errors_as_tool_results(self) -> bool {
        self.is_at_least(McpRevision::V2025_11_25)
    }

    /// The JSON-RPC code of an unknown resource: -32002 until 2025-11-25,
    /// -32602 in 2026-07-28.
    pub const fn resource_not_found_code(self) -> i32 {
        if self.is_stateless() { -32602 } else { -32002 }
    }
}

impl core::fmt::Display for McpRevision {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        f.write_str(self.as_str())
    }
}

/// The `_meta` key of a stateless request's revision.
pub const PROTOCOL_VERSION_META: &str = "io.modelcontextprotocol/protocolVersion";
/// The `_meta` key of a stateless request's client capabilities (required).
pub const CLIENT_CAPABILITIES_META: &str = "io.modelcontextprotocol/clientCapabilities";
/// The `_meta` key of a stateless request's client name and version.
pub const CLIENT_INFO_META: &str = "io.modelcontextprotocol/clientInfo";
/// The `_meta` key under which a stateless result names the server.
pub const SERVER_INFO_META: &str = "io.modelcontextprotocol/serverInfo";

/// How one message is spoken: its dialect and, for MCP, its revision.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct Speech {
    /// Decision Gate or MCP.
    pub dialect: Dialect,
    /// The MCP revision (ignored for Decision Gate).
    pub revision: McpRevision,
}

impl Speech {
    /// Decision Gate's speech.
    pub const DECISION_GATE: Speech = Speech {
        dialect: Dialect::DecisionGate,
        revision: McpRevision::LATEST_HANDSHAKE,
    };

    /// MCP at `revision`.
    pub const fn mcp(revision: McpRevision) -> Speech {
        Speech {
            dialect: Dialect::Mcp,
            revision,
        }
    }

    /// True for MCP at a stateless revision.
    pub const fn is_stateless(self) -> bool {
        matches!(self.dialect, Dialect::Mcp) && self.revision.is_stateless()
    }

    /// True when a result carries `structuredContent` (MCP, 2025-06-18 on).
    pub const fn has_structured_content(self) -> bool {
        matches!(self.dialect, Dialect::Mcp) && self.revision.has_structured_content()
    }
}

/// The `tools/call` result carrying an EvidenceResult in `speech`:
/// Decision Gate gets `{"content":[{"type":"json","json":R}]}`; MCP gets a
/// text item holding the canonical JSON of the result, `structuredContent`
/// (2025-06-18 on), `isError` when the result carries an error, and
/// `resultType` (2026-07-28).
///
/// It serializes the result directly (no detour through
/// [`serde_json::Value`]), so JSON values keep their exact text.
pub fn evidence_tool_result(result: &EvidenceResult, speech: Speech) -> EvidenceToolResult<'_> {
    match speech.dialect {
        Dialect::DecisionGate => EvidenceToolResult {
            content: vec![Item::Json { json: result }],
            structured_content: None,
            is_error: None,
            result_type: None,
        },
        Dialect::Mcp => {
            let json_bytes = result.to_json_vec();
            let text = canonical::to_vec(&json_bytes)
                .ok()
                .and_then(|bytes| String::from_utf8(bytes).ok())
                .unwrap_or_else(|| String::from_utf8_lossy(&json_bytes).into_owned());
            EvidenceToolResult {
                content: vec![Item::Text { text }],
                structured_content: speech.has_structured_content().then_some(result),
                is_error: Some(result.error.is_some()),
                result_type: speech.is_stateless().then_some("complete"),
            }
        }
    }
}

/// The whole JSON-RPC answer (`{"jsonrpc":"2.0","id":…,"result":…}`)
/// carrying `result` in `speech`: the bytes of
/// `encode_reply(id, &evidence_tool_result(result, speech))`, made with
/// one serialization of the result. The result is serialized once and
/// that text is spliced in where the shape needs it (`structuredContent`,
/// Decision Gate's `json` item); MCP's text item (the canonical JSON of the
/// result, escaped as a string) is written from the same pieces when the
/// result has no error, reference, anchor or signature (the common case),
/// and canonicalized from that serialization otherwise. A unit test checks
/// the bytes against the serde path on generated results.
pub(crate) fn encode_evidence_reply(
    id: &crate::id::Id<'_>,
    result: &EvidenceResult,
    speech: Speech,
) -> Vec<u8> {
    if let Some(body) = encode_usual_reply(id, result, speech) {
        return body;
    }
    let serialized = serialize_direct(result).unwrap_or_else(|| result.to_json_vec());
    let mut body = Vec::with_capacity(serialized.len().saturating_mul(2).saturating_add(96));
    body.extend_from_slice(br#"{"jsonrpc":"2.0","id":"#);
    // (`to_vec` rather than `to_writer`: the core is no_std.)
    match serde_json::to_vec(&id.as_borrowed()) {
        Ok(id_json) => body.extend_from_slice(&id_json),
        Err(_) => return crate::envelope::encode_reply(id, &evidence_tool_result(result, speech)),
    }
    body.extend_from_slice(br#","result":{"content":[{"type":"#);
    match speech.dialect {
        Dialect::DecisionGate => {
            body.extend_from_slice(br#""json","json":"#);
            body.extend_from_slice(&serialized);
            body.extend_from_slice(b"}]}}");
        }
        Dialect::Mcp => {
            body.extend_from_slice(br#""text","text":"#);
            let text = canonical_text(result, &serialized);
            match serde_json::to_vec(text.as_str()) {
                Ok(text_json) => body.extend_from_slice(&text_json),
                Err(_) => {
                    return crate::envelope::encode_reply(
                        id,
                        &evidence_tool_result(result, speech),
                    );
                }
            }
            body.extend_from_slice(b"}]");
            if speech.has_structured_content() {
                body.extend_from_slice(br#","structuredContent":"#);
                body.extend_from_slice(&serialized);
            }
            body.extend_from_slice(if result.error.is_some() {
                br#","isError":true"#
            } else {
                br#","isError":false"#
            });
            if speech.is_stateless() {
                body.extend_from_slice(br#","resultType":"complete""#);
            }
            body.extend_from_slice(b"}}");
        }
    }
    body
}

/// [`encode_evidence_reply`] of the usual result (no error, reference,
/// anchor or signature; a JSON value or none; a hexadecimal digest or
/// none), written in one pass into one buffer: MCP's text item is written
/// already escaped (the fixed members as escaped literals, the content
/// type and the canonical value through [`push_escaped`]), then the
/// serialization where the shape needs it. `None` for any other result
/// (the general path answers it), and for a value the canonicalizer
/// refuses.
fn encode_usual_reply(
    id: &crate::id::Id<'_>,
    result: &EvidenceResult,
    speech: Speech,
) -> Option<Vec<u8>> {
    use crate::evidence::HashAlgorithm;
    let raw = usual_value(result)?;
    let digest = match &result.evidence_hash {
        None => None,
        Some(digest) if is_alphanumeric(digest.value.as_bytes()) => Some(match digest.algorithm {
            HashAlgorithm::Sha256 => digest.value.as_str(),
        }),
        Some(_) => return None,
    };
    let content_type = result.content_type.as_deref();
    let raw_len = raw.map_or(0, str::len);
    let content_type_len = content_type.map_or(0, str::len);
    // The general path checks the whole result against the
    // canonicalizer's input limit; far below it, nothing to check.
    let limits = Options::default();
    if raw_len.saturating_add(content_type_len.saturating_mul(6)) > limits.max_input_bytes / 2 {
        return None;
    }
    let canonical_value = match raw {
        Some(raw) => Some(canonical_value(raw, &limits)?),
        None => None,
    };
    let mut body = Vec::with_capacity(
        raw_len
            .saturating_mul(3)
            .saturating_add(content_type_len.saturating_mul(8))
            .saturating_add(720),
    );
    body.extend_from_slice(br#"{"jsonrpc":"2.0","id":"#);
    match id {
        crate::id::Id::Number(number) => push_i64(&mut body, *number),
        crate::id::Id::Null => body.extend_from_slice(b"null"),
        crate::id::Id::NegativeZero => body.extend_from_slice(b"-0"),
        crate::id::Id::String(_) => {
            body.extend_from_slice(&serde_json::to_vec(&id.as_borrowed()).ok()?)
        }
    }
    body.extend_from_slice(br#","result":{"content":[{"type":"#);
    let lane = match result.lane {
        crate::evidence::Lane::Verified => "verified",
        crate::evidence::Lane::Asserted => "asserted",
    };
    match speech.dialect {
        Dialect::DecisionGate => {
            body.extend_from_slice(br#""json","json":"#);
            push_usual_serialization(&mut body, raw, lane, digest, content_type)?;
            body.extend_from_slice(b"}]}}");
        }
        Dialect::Mcp => {
            // The canonical text, members in canonical order, escaped as
            // the body of a JSON string.
            body.extend_from_slice(br#""text","text":"{\"content_type\":"#);
            match content_type {
                // The usual content type needs no escape, as JSON or as
                // JSON in a string.
                Some(content_type) if is_plain(content_type) => {
                    body.extend_from_slice(br#"\""#);
                    body.extend_from_slice(content_type.as_bytes());
                    body.extend_from_slice(br#"\""#);
                }
                Some(content_type) => {
                    let quoted = json_string(content_type)?;
                    push_escaped(&mut body, quoted.as_bytes());
                }
                None => body.extend_from_slice(b"null"),
            }
            body.extend_from_slice(
                br#",\"error\":null,\"evidence_anchor\":null,\"evidence_hash\":"#,
            );
            match digest {
                Some(hex) => {
                    body.extend_from_slice(br#"{\"algorithm\":\"sha256\",\"value\":\""#);
                    body.extend_from_slice(hex.as_bytes());
                    body.extend_from_slice(br#"\"}"#);
                }
                None => body.extend_from_slice(b"null"),
            }
            body.extend_from_slice(br#",\"evidence_ref\":null,\"lane\":\""#);
            body.extend_from_slice(lane.as_bytes());
            body.extend_from_slice(br#"\",\"signature\":null,\"value\":"#);
            match &canonical_value {
                Some(value) => {
                    body.extend_from_slice(br#"{\"kind\":\"json\",\"value\":"#);
                    push_escaped(&mut body, value);
                    body.push(b'}');
                }
                None => body.extend_from_slice(b"null"),
            }
            body.extend_from_slice(br#"}"}]"#);
            if speech.has_structured_content() {
                body.extend_from_slice(br#","structuredContent":"#);
                push_usual_serialization(&mut body, raw, lane, digest, content_type)?;
            }
            body.extend_from_slice(br#","isError":false"#);
            if speech.is_stateless() {
                body.extend_from_slice(br#","resultType":"complete""#);
            }
            body.extend_from_slice(b"}}");
        }
    }
    Some(body)
}

/// The usual result as [`EvidenceResult::to_json_vec`] writes it (see
/// [`serialize_direct`], which writes the same members).
fn push_usual_serialization(
    out: &mut Vec<u8>,
    raw: Option<&str>,
    lane: &str,
    digest: Option<&str>,
    content_type: Option<&str>,
) -> Option<()> {
    match raw {
        Some(raw) => {
            out.extend_from_slice(br#"{"value":{"kind":"json","value":"#);
            out.extend_from_slice(raw.as_bytes());
            out.push(b'}');
        }
        None => out.extend_from_slice(br#"{"value":null"#),
    }
    out.extend_from_slice(br#","lane":""#);
    out.extend_from_slice(lane.as_bytes());
    out.extend_from_slice(br#"","error":null,"evidence_hash":"#);
    match digest {
        Some(hex) => {
            out.extend_from_slice(br#"{"algorithm":"sha256","value":""#);
            out.extend_from_slice(hex.as_bytes());
            out.extend_from_slice(br#""}"#);
        }
        None => out.extend_from_slice(b"null"),
    }
    out.extend_from_slice(
        br#","evidence_ref":null,"evidence_anchor":null,"signature":null,"content_type":"#,
    );
    match content_type {
        Some(content_type) if is_plain(content_type) => {
            out.push(b'"');
            out.extend_from_slice(content_type.as_bytes());
            out.push(b'"');
        }
        Some(content_type) => out.extend_from_slice(json_string(content_type)?.as_bytes()),
        None => out.extend_from_slice(b"null"),
    }
    out.push(b'}');
    Some(())
}

/// The canonical JSON of an evidence value (`raw`, valid JSON) two levels
/// down in a result, as [`canonical_text_direct`] writes it. A value that
/// is already canonical on sight (`null`, `true`, `false`, an integer of
/// at most 15 digits, which a double holds exactly and prints as is, a
/// string without escapes) is copied; anything else is canonicalized.
fn canonical_value(raw: &str, limits: &Options) -> Option<Vec<u8>> {
    let bytes = raw.as_bytes();
    let digits = bytes.strip_prefix(b"-").unwrap_or(bytes);
    let integer = !digits.is_empty()
        && digits.len() <= 15
        && digits.iter().all(u8::is_ascii_digit)
        && bytes != b"-0";
    let plain_string = bytes.len() >= 2
        && bytes.first() == Some(&b'"')
        && bytes.last() == Some(&b'"')
        && !bytes.contains(&b'\\');
    if integer || plain_string || matches!(bytes, b"null" | b"true" | b"false") {
        return Some(bytes.to_vec());
    }
    let mut options = *limits;
    options.max_depth = options.max_depth.checked_sub(2)?;
    canonical::to_vec_with(bytes, &options).ok()
}

/// True when every byte is an ASCII letter or digit.
fn is_alphanumeric(bytes: &[u8]) -> bool {
    let mut all = true;
    for byte in bytes {
        all &= byte.is_ascii_alphanumeric();
    }
    all
}

/// True when no byte of `text` is escaped in a JSON string (no control
/// character, `"` or `\\`).
fn is_plain(text: &str) -> bool {
    let mut plain = true;
    for &byte in text.as_bytes() {
        plain &= byte >= 0x20 && byte != b'"' && byte != b'\\';
    }
    plain
}

/// `text` as a JSON string (quoted, escaped as serde_json escapes).
fn json_string(text: &str) -> Option<String> {
    serde_json::to_string(text).ok()
}

/// `value` in decimal, with its sign.
fn push_i64(out: &mut Vec<u8>, value: i64) {
    let mut digits = [0u8; 20];
    let mut start = digits.len();
    let mut rest = value.unsigned_abs();
    loop {
        start = start.saturating_sub(1);
        if let Some(slot) = digits.get_mut(start) {
            *slot = b'0' + u8::try_from(rest % 10).unwrap_or(0);
        }
        rest /= 10;
        if rest == 0 || start == 0 {
            break;
        }
    }
    if value < 0 {
        out.push(b'-');
    }
    out.extend_from_slice(digits.get(start..).unwrap_or_default());
}

/// Appends `text` escaped as the body of a JSON string, byte for byte as
/// serde_json (and RFC 8785) escape: `\"`, `\\`, `\b \f \n \r \t`, other
/// control characters as lowercase `\u00xx`, everything else as is. Runs
/// without escapes are copied whole.
fn push_escaped(out: &mut Vec<u8>, text: &[u8]) {
    const HEX: &[u8; 16] = b"0123456789abcdef";
    let mut start = 0;
    for (index, &byte) in text.iter().enumerate() {
        let short: &[u8] = match byte {
            b'"' => br#"\""#,
            b'\\' => br"\\",
            0x08 => br"\b",
            0x0c => br"\f",
            b'\n' => br"\n",
            b'\r' => br"\r",
            b'\t' => br"\t",
            0..=0x1f => b"",
            _ => continue,
        };
        out.extend_from_slice(text.get(start..index).unwrap_or_default());
        if short.is_empty() {
            let digit = |nibble: u8| HEX.get(usize::from(nibble)).copied().unwrap_or(b'0');
            out.extend_from_slice(&[b'\\', b'u', b'0', b'0', digit(byte >> 4), digit(byte & 0xf)]);
        } else {
            out.extend_from_slice(short);
        }
        start = index.saturating_add(1);
    }
    out.extend_from_slice(text.get(start..).unwrap_or_default());
}

/// The canonical JSON (RFC 8785, default limits) of `result`, whose
/// compact serialization is `serialized`, as text: what MCP's text item
/// carries (the serialization itself when it cannot be canonicalized, as
/// [`evidence_tool_result`] does).
fn canonical_text(result: &EvidenceResult, serialized: &[u8]) -> String {
    if let Some(text) = canonical_text_direct(result, serialized.len()) {
        return text;
    }
    canonical::to_vec(serialized)
        .ok()
        .and_then(|bytes| String::from_utf8(bytes).ok())
        .unwrap_or_else(|| String::from_utf8_lossy(serialized).into_owned())
}

/// The canonical text of a result with no error, reference, anchor or
/// signature, written member by member in canonical order (only the
/// evidence value itself goes through the canonicalizer); `None` for any
/// other result, or when the canonicalizer would refuse the whole.
fn canonical_text_direct(result: &EvidenceResult, serialized_len: usize) -> Option<String> {
    use crate::evidence::{EvidenceValue, Lane};
    if result.error.is_some()
        || result.evidence_ref.is_some()
        || result.evidence_anchor.is_some()
        || result.signature.is_some()
    {
        return None;
    }
    let limits = Options::default();
    // The whole is refused when larger than the input limit.
    if serialized_len > limits.max_input_bytes {
        return None;
    }
    let mut out = String::with_capacity(serialized_len.saturating_add(16));
    out.push_str(r#"{"content_type":"#);
    match &result.content_type {
        Some(content_type) => push_json_string(&mut out, content_type)?,
        None => out.push_str("null"),
    }
    out.push_str(r#","error":null,"evidence_anchor":null,"evidence_hash":"#);
    push_digest(&mut out, result.evidence_hash.as_ref())?;
    out.push_str(r#","evidence_ref":null,"lane":"#);
    out.push_str(match result.lane {
        Lane::Verified => r#""verified""#,
        Lane::Asserted => r#""asserted""#,
    });
    out.push_str(r#","signature":null,"value":"#);
    match &result.value {
        None => out.push_str("null"),
        Some(EvidenceValue::Json(raw)) => {
            // Inside the result the value sits two levels down.
            let mut options = limits;
            options.max_depth = options.max_depth.checked_sub(2)?;
            let value = canonical::to_vec_with(raw.get().as_bytes(), &options).ok()?;
            out.push_str(r#"{"kind":"json","value":"#);
            out.push_str(core::str::from_utf8(&value).ok()?);
            out.push('}');
        }
        Some(EvidenceValue::Bytes(bytes)) => {
            out.push_str(r#"{"kind":"bytes","value":"#);
            out.push_str(&serde_json::to_string(bytes).ok()?);
            out.push('}');
        }
    }
    out.push('}');
    Some(out)
}

/// The usual result (no error, reference, anchor or signature) as
/// The evidence text of a usual result (no error, reference, anchor or
/// signature; a JSON value, `Some(None)` when there is none); `None` for
/// any other result, which takes the general path.
fn usual_value(result: &EvidenceResult) -> Option<Option<&str>> {
    use crate::evidence::EvidenceValue;
    if result.error.is_some()
        || result.evidence_ref.is_some()
        || result.evidence_anchor.is_some()
        || result.signature.is_some()
    {
        return None;
    }
    match &result.value {
        Some(EvidenceValue::Json(raw)) => Some(Some(raw.get())),
        Some(EvidenceValue::Bytes(_)) => None,
        None => Some(None),
    }
}

/// [`EvidenceResult::to_json_vec`] writes it, member by member in the
/// struct's order (the evidence value's text as it is); `None` otherwise.
fn serialize_direct(result: &EvidenceResult) -> Option<Vec<u8>> {
    use crate::evidence::Lane;
    let raw = usual_value(result)?;
    let mut out = String::with_capacity(raw.map_or(0, str::len).saturating_add(320));
    match raw {
        Some(raw) => {
            out.push_str(r#"{"value":{"kind":"json","value":"#);
            out.push_str(raw);
            out.push('}');
        }
        None => out.push_str(r#"{"value":null"#),
    }
    out.push_str(match result.lane {
        Lane::Verified => r#","lane":"verified""#,
        Lane::Asserted => r#","lane":"asserted""#,
    });
    out.push_str(r#","error":null,"evidence_hash":"#);
    push_digest(&mut out, result.evidence_hash.as_ref())?;
    out.push_str(r#","evidence_ref":null,"evidence_anchor":null,"signature":null,"content_type":"#);
    match &result.content_type {
        Some(content_type) => push_json_string(&mut out, content_type)?,
        None => out.push_str("null"),
    }
    out.push('}');
    Some(out.into_bytes())
}

/// An evidence hash (or `null`) as JSON; its members `algorithm` and
/// `value` are in canonical order already. A digest of hex digits (every
/// one this crate makes) needs no escaping and is written directly.
fn push_digest(out: &mut String, digest: Option<&crate::evidence::HashDigest>) -> Option<()> {
    match digest {
        None => out.push_str("null"),
        Some(digest)
            if digest
                .value
                .bytes()
                .all(|byte| byte.is_ascii_alphanumeric()) =>
        {
            out.push_str(match digest.algorithm {
                crate::evidence::HashAlgorithm::Sha256 => r#"{"algorithm":"sha256","value":""#,
            });
            out.push_str(&digest.value);
            out.push_str(r#""}"#);
        }
        Some(digest) => out.push_str(&serde_json::to_string(digest).ok()?),
    }
    Some(())
}

/// `text` as a JSON string; serde_json escapes strings exactly as RFC 8785
/// does (the two short forms `\"` and `\\`, `\b \f \n \r \t`, other
/// control characters as lowercase `\u00xx`, everything else as is).
fn push_json_string(out: &mut String, text: &str) -> Option<()> {
    out.push_str(&serde_json::to_string(text).ok()?);
    Some(())
}

/// The serializable `tools/call` result of an evidence query.
#[derive(Clone, Debug, Serialize)]
pub struct EvidenceToolResult<'a> {
    content: Vec<Item<'a>>,
    #[serde(rename = "structuredContent", skip_serializing_if = "Option::is_none")]
    structured_content: Option<&'a EvidenceResult>,
    #[serde(rename = "isError", skip_serializing_if = "Option::is_none")]
    is_error: Option<bool>,
    #[serde(rename = "resultType", skip_serializing_if = "Option::is_none")]
    result_type: Option<&'static str>,
}

#[derive(Clone, Debug, Serialize)]
#[serde(tag = "type", rename_all = "lowercase")]
enum Item<'a> {
    Json { json: &'a EvidenceResult },
    Text { text: String },
}

/// The `tools/call` result of a tool other than `evidence_query` that
/// answered `structured`: a `json` item for Decision Gate; for MCP a text
/// item with its JSON, `structuredContent` (2025-06-18 on), `isError:
/// false` and `resultType` (2026-07-28).
pub fn structured_tool_result(structured: &Value, speech: Speech) -> Value {
    match speech.dialect {
        Dialect::DecisionGate => json!({"content": [{"type": "json", "json": structured}]}),
        Dialect::Mcp => {
            let mut result = Map::new();
            let text = serde_json::to_string(structured).unwrap_or_default();
            result.insert(
                "content".to_owned(),
                json!([{"type": "text", "text": text}]),
            );
            if speech.has_structured_content() {
                result.insert("structuredContent".to_owned(), structured.clone());
            }
            result.insert("isError".to_owned(), Value::Bool(false));
            stamp_result_type(&mut result, speech);
            Value::Object(result)
        }
    }
}

/// The `tools/call` result of a tool that ran and failed: a text item with
/// `message`, `isError: true` (and `resultType` in 2026-07-28).
pub fn failed_tool_result(message: &str, speech: Speech) -> Value {
    let mut result = Map::new();
    result.insert(
        "content".to_owned(),
        json!([{"type": "text", "text": message}]),
    );
    result.insert("isError".to_owned(), Value::Bool(true));
    stamp_result_type(&mut result, speech);
    Value::Object(result)
}

/// Adds `resultType: "complete"` to a stateless result.
pub(crate) fn stamp_result_type(result: &mut Map<String, Value>, speech: Speech) {
    if speech.is_stateless() {
        result.insert("resultType".to_owned(), Value::from("complete"));
    }
}

/// The shape in which a `tools/call` result carries the evidence.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ToolResultShape {
    /// `content: [{"type":"json","json": <EvidenceResult>}]` (Decision Gate).
    JsonItem,
    /// `structuredContent: <EvidenceResult>` (MCP).
    StructuredContent,
    /// `content: [{"type":"text","text": "<EvidenceResult JSON>"}]` (MCP text).
    JsonText,
}

/// Why a `tools/call` result holds no readable EvidenceResult.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum ToolResultError {
    /// The result is not an object with `content` or `structuredContent`.
    #[error("tool result is not an object with content or structuredContent: {0}")]
    NotAToolResult(String),
    /// None of the three shapes holds an EvidenceResult.
    #[error(
        "tool result holds no EvidenceResult (looked for a json item, structuredContent and a JSON text item): {0}"
    )]
    NoEvidence(String),
    /// The tool reported a failure (`isError: true`) without an EvidenceResult.
    #[error("the provider reported a tool error: {0}")]
    ToolError(String),
    /// Two shapes of one result (a `json` item, `structuredContent`, a JSON
    /// text item) carry different EvidenceResults: a reader could take
    /// either, so the result is refused rather than one picked.
    #[error(
        "tool result carries two different EvidenceResults ({0}); refusing it rather than picking one: the provider must send the same result in every shape"
    )]
    Disagreement(String),
}

impl ToolResultShape {
    /// How the shape is named in messages.
    pub fn describe(self) -> &'static str {
        match self {
            ToolResultShape::JsonItem => "the json content item",
            ToolResultShape::StructuredContent => "structuredContent",
            ToolResultShape::JsonText => "the JSON text item",
        }
    }
}

/// Whether two EvidenceResults say the same thing: equal canonical JSON
/// (Decision Gate's profile, which reads every I-JSON value and keeps
/// 64-bit integers exact), so that spellings (member order, `1.0` against
/// `1`, escapes, defaulted fields) do not count as differences.
fn same_result(a: &EvidenceResult, b: &EvidenceResult) -> bool {
    if a == b {
        return true;
    }
    let options = Options::with_profile(Profile::DecisionGate);
    match (
        canonical::to_vec_with(&a.to_json_vec(), &options),
        canonical::to_vec_with(&b.to_json_vec(), &options),
    ) {
        (Ok(a), Ok(b)) => a == b,
        _ => false,
    }
}

/// Read the EvidenceResult out of a `tools/call` result, accepting all three
/// shapes: a `json` content item (Decision Gate), `structuredContent` (MCP),
/// or a text item holding the JSON (MCP clients that only read text).
///
/// Every shape present that holds an EvidenceResult is read, and they must
/// agree (same canonical JSON); otherwise the result is refused
/// ([`ToolResultError::Disagreement`]). A text item that is not an
/// EvidenceResult (a message for people) is ignored. The shape returned is
/// the first in the order above.
pub fn from_tool_result(
    result: &RawValue,
) -> Result<(EvidenceResult, ToolResultShape), ToolResultError> {
    #[derive(Deserialize)]
    struct Item<'a> {
        #[serde(rename = "type", borrow)]
        kind: Option<alloc::borrow::Cow<'a, str>>,
        #[serde(borrow)]
        json: Option<&'a RawValue>,
        text: Option<String>,
    }
    #[derive(Deserialize)]
    struct ToolResult<'a> {
        #[serde(default, borrow)]
        content: Option<Vec<Item<'a>>>,
        #[serde(rename = "structuredContent", borrow, default)]
        structured_content: Option<&'a RawValue>,
        #[serde(rename = "isError", default)]
        is_error: Option<bool>,
    }
    let parsed: ToolResult<'_> = serde_json::from_str(result.get())
        .map_err(|error| ToolResultError::NotAToolResult(error.to_string()))?;
    if parsed.content.is_none() && parsed.structured_content.is_none() {
        return Err(ToolResultError::NotAToolResult(
            "neither content nor structuredContent is present".to_owned(),
        ));
    }
    let mut last_problem = String::from("no content items");
    let mut found: Option<(EvidenceResult, ToolResultShape)> = None;
    if let Some(items) = &parsed.content {
        for item in items {
            if item.kind.as_deref() == Some("json") {
                if let Some(json) = item.json {
                    consider(
                        &mut found,
                        json.get(),
                        ToolResultShape::JsonItem,
                        &mut last_problem,
                    )?;
                }
            }
        }
    }
    if let Some(structured) = parsed.structured_content {
        consider(
            &mut found,
            structured.get(),
            ToolResultShape::StructuredContent,
            &mut last_problem,
        )?;
    }
    let mut first_text = None;
    if let Some(items) = &parsed.content {
        for item in items {
            if item.kind.as_deref() == Some("text") {
                if let Some(text) = &item.text {
                    first_text.get_or_insert(text.as_str());
                    consider(
                        &mut found,
                        text,
                        ToolResultShape::JsonText,
                        &mut last_problem,
                    )?;
                }
            }
        }
    }
    if let Some(found) = found {
        return Ok(found);
    }
    if parsed.is_error == Some(true) {
        return Err(ToolResultError::ToolError(
            first_text.unwrap_or("no message").to_owned(),
        ));
    }
    Err(ToolResultError::NoEvidence(last_problem))
}

/// One shape's text in [`from_tool_result`]: remembered when it is the
/// first EvidenceResult, compared with the first otherwise; a text that is
/// no EvidenceResult only updates `last_problem`.
fn consider(
    found: &mut Option<(EvidenceResult, ToolResultShape)>,
    text: &str,
    shape: ToolResultShape,
    last_problem: &mut String,
) -> Result<(), ToolResultError> {
    match serde_json::from_str::<EvidenceResult>(text) {
        Ok(evidence) => match found {
            None => {
                *found = Some((evidence, shape));
                Ok(())
            }
            Some((first, first_shape)) if !same_result(first, &evidence) => {
                Err(ToolResultError::Disagreement(format!(
                    "{} and {} differ",
                    first_shape.describe(),
                    shape.describe()
                )))
            }
            Some(_) => Ok(()),
        },
        Err(error) => {
            let name = match shape {
                ToolResultShape::JsonItem => "json item",
                ToolResultShape::StructuredContent => "structuredContent",
                ToolResultShape::JsonText => "text item",
            };
            *last_problem = format!("{name}: {error}");
            Ok(())
        }
    }
}

#[cfg(test)]
mod tests {
    use alloc::borrow::{Cow, ToOwned};
    use alloc::boxed::Box;
    use alloc::string::String;
    use alloc::string::ToString;
    use alloc::vec::Vec;

    use proptest::prelude::*;
    use serde_json::value::RawValue;

    use super::{Dialect, McpRevision, Speech, encode_evidence_reply, evidence_tool_result};
    use crate::evidence::{
        EvidenceAnchor, EvidenceError, EvidenceRef, EvidenceResult, EvidenceValue, HashDigest, Lane,
    };
    use crate::id::Id;

    /// JSON values that stress the canonicalizer: nesting up to past its
    /// depth limit, big and fractional numbers, escapes, unsorted keys.
    fn value_text() -> impl Strategy<Value = String> {
        let leaf = prop_oneof![
            Just("null".to_owned()),
            Just("true".to_owned()),
            any::<i64>().prop_map(|n| n.to_string()),
            Just("9007199254740993".to_owned()),
            Just("18446744073709551615".to_owned()),
            Just("1.5e300".to_owned()),
            Just("-0.0".to_owned()),
            Just("0.1".to_owned()),
            "[ -~é\u{1}\u{1f}\u{7f}\n\t\"\\\\]{0,8}"
                .prop_map(|text| serde_json::to_string(&text).unwrap_or_default()),
        ];
        let tree = leaf.prop_recursive(4, 24, 4, |inner| {
            prop_oneof![
                prop::collection::vec(inner.clone(), 0..4)
                    .prop_map(|items| alloc::format!("[{}]", items.join(","))),
                prop::collection::vec(("[a-zé_\u{1}]{0,3}", inner), 0..4).prop_map(|members| {
                    let members: Vec<String> = members
                        .iter()
                        .map(|(name, value)| {
                            alloc::format!(
                                "{}:{value}",
                                serde_json::to_string(name).unwrap_or_default()
                            )
                        })
                        .collect();
                    alloc::format!("{{{}}}", members.join(","))
                }),
            ]
        });
        // Around the canonicalizer's depth limit (128, the result adding 2;
        // serde_json reads no deeper than 127).
        let deep = (122usize..=127, "[1-9][0-9]{0,2}").prop_map(|(depth, leaf)| {
            alloc::format!("{}{leaf}{}", "[".repeat(depth), "]".repeat(depth))
        });
        prop_oneof![8 => tree, 1 => deep]
    }

    fn result() -> impl Strategy<Value = EvidenceResult> {
        (
            prop::option::of(prop_oneof![
                3 => value_text().prop_map(|text| {
                    let raw: Box<RawValue> = serde_json::from_str(&text).expect("generated JSON");
                    EvidenceValue::Json(raw)
                }),
                1 => prop::collection::vec(any::<u8>(), 0..6).prop_map(EvidenceValue::Bytes),
            ]),
            any::<bool>(),
            prop::option::of(("[a-z_]{1,8}", "[ -~\u{1}é]{0,12}")),
            prop::option::of("[0-9a-f]{64}|[\u{0}-\u{7f}]{0,4}"),
            any::<u8>(),
            prop::option::of("[ -~\u{2}]{0,16}"),
        )
            .prop_map(|(value, asserted, error, hash, extras, content_type)| {
                let mut result = match value {
                    Some(value) => EvidenceResult::with_value(value),
                    None => EvidenceResult::with_error(EvidenceError::new("x", "y")),
                };
                if asserted {
                    result.lane = Lane::Asserted;
                }
                result.error = error.map(|(code, message)| {
                    EvidenceError::new(code, message)
                        .with_details(serde_json::json!({"z": 1, "a": [0.5, "\u{1}"]}))
                });
                result.evidence_hash = hash.map(|value| HashDigest {
                    algorithm: Default::default(),
                    value,
                });
                if extras & 1 == 1 {
                    result.evidence_ref = Some(EvidenceRef {
                        uri: "file:///a b".into(),
                    });
                }
                if extras & 2 == 2 {
                    result.evidence_anchor = Some(EvidenceAnchor {
                        anchor_type: "t".into(),
                        anchor_value: "{\"b\":1,\"a\":2}".into(),
                    });
                }
                if extras & 4 == 4 {
                    result.content_type = content_type;
                }
                result
            })
    }

    fn id() -> impl Strategy<Value = Id<'static>> {
        prop_oneof![
            any::<i64>().prop_map(Id::Number),
            "[ -~é\u{1}]{0,8}".prop_map(|text| Id::String(Cow::Owned(text))),
            Just(Id::Null),
            Just(Id::NegativeZero),
        ]
    }

    fn speech() -> impl Strategy<Value = Speech> {
        prop_oneof![
            Just(Speech::DECISION_GATE),
            prop::sample::select(McpRevision::ALL.to_vec()).prop_map(Speech::mcp),
        ]
    }

    proptest! {
        #![proptest_config(ProptestConfig { cases: 1024, ..ProptestConfig::default() })]

        /// The spliced answer is byte for byte what serializing the whole
        /// `tools/call` result with serde (twice over the result) wrote.
        #[test]
        fn the_spliced_answer_equals_the_serde_answer(
            id in id(),
            result in result(),
            speech in speech(),
        ) {
            let expected = crate::envelope::encode_reply(&id, &evidence_tool_result(&result, speech));
            let spliced = encode_evidence_reply(&id, &result, speech);
            prop_assert_eq!(
                String::from_utf8_lossy(&spliced),
                String::from_utf8_lossy(&expected)
            );
        }
    }

    /// Usual results (what `encode_usual_reply` writes in one pass): no
    /// error, reference, anchor or signature; values of every kind, short
    /// integers (copied as canonical) and longer ones, plain and escaped
    /// strings; hex digests and none; content types with escapes.
    fn usual_result() -> impl Strategy<Value = EvidenceResult> {
        let value = prop_oneof![
            4 => value_text(),
            2 => any::<i64>().prop_map(|n| n.to_string()),
            1 => Just("-0".to_owned()),
            1 => Just("1e2".to_owned()),
            1 => Just("12345678901234567".to_owned()),
            1 => "[ -~é\u{7f}]{0,12}".prop_map(|text| serde_json::to_string(&text).unwrap_or_default()),
            1 => Just("\"\\u0041\"".to_owned()),
        ];
        (
            prop::option::of(value),
            any::<bool>(),
            prop::option::of("[0-9a-f]{64}|[A-Za-z0-9]{0,3}"),
            prop::option::of("[ -~\u{2}é]{0,16}"),
        )
            .prop_map(|(value, asserted, hash, content_type)| {
                let mut result = match value {
                    Some(text) => {
                        let raw: Box<RawValue> =
                            serde_json::from_str(&text).expect("generated JSON");
                        EvidenceResult::with_value(EvidenceValue::Json(raw))
                    }
                    None => EvidenceResult::with_error(EvidenceError::new("x", "y")),
                };
                result.error = None;
                if asserted {
                    result.lane = Lane::Asserted;
                }
                result.evidence_hash = hash.map(|value| HashDigest {
                    algorithm: Default::default(),
                    value,
                });
                result.content_type = content_type;
                result
            })
    }

    proptest! {
        #![proptest_config(ProptestConfig { cases: 2048, ..ProptestConfig::default() })]

        /// The one-pass answer of a usual result is byte for byte the
        /// serde answer.
        #[test]
        fn the_one_pass_answer_equals_the_serde_answer(
            id in id(),
            result in usual_result(),
            speech in speech(),
        ) {
            let expected = crate::envelope::encode_reply(&id, &evidence_tool_result(&result, speech));
            // Taken for every usual result but a value the canonicalizer refuses.
            let refused = match &result.value {
                Some(EvidenceValue::Json(raw)) => {
                    let mut options = crate::canonical::Options::default();
                    options.max_depth -= 2;
                    crate::canonical::to_vec_with(raw.get().as_bytes(), &options).is_err()
                }
                _ => false,
            };
            prop_assert_eq!(super::encode_usual_reply(&id, &result, speech).is_some(), !refused);
            let one_pass = encode_evidence_reply(&id, &result, speech);
            prop_assert_eq!(
                String::from_utf8_lossy(&one_pass),
                String::from_utf8_lossy(&expected)
            );
        }
    }

    /// The usual answer takes the member-by-member canonical text.
    #[test]
    fn the_usual_result_is_written_directly() {
        let mut result =
            EvidenceResult::with_value(EvidenceValue::json(&1_710_000_000_000_i64).expect("json"));
        result.evidence_hash = Some(HashDigest {
            algorithm: Default::default(),
            value: "ab".into(),
        });
        let serialized = result.to_json_vec();
        let direct = super::canonical_text_direct(&result, serialized.len()).expect("direct");
        let text = crate::canonical::to_vec(&serialized).expect("canonical");
        assert_eq!(direct.as_bytes(), text.as_slice());
        let _ = Dialect::Mcp;
    }
}
