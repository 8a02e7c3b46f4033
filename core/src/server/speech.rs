//! How each request is spoken: the connection's dialect and negotiated MCP
//! revision, or, for a stateless request (revision 2026-07-28), the
//! revision its own `_meta` names.
//!
//! A request whose params carry `_meta["io.modelcontextprotocol/protocolVersion"]`
//! is served statelessly, whatever the connection did before: its `_meta`
//! must also carry `io.modelcontextprotocol/clientCapabilities` (an object)
//! and name a stateless revision this server speaks, and over HTTP its
//! `MCP-Protocol-Version`, `Mcp-Method` and `Mcp-Name` headers must agree
//! with the body. Anything else is answered as the revision says: `-32602`
//! for a malformed `_meta`, `-32022` (with the supported revisions) for an
//! unknown revision, `-32020` for disagreeing headers. A request without
//! it (Decision Gate's first message, a client after `initialize`) is
//! spoken as the connection is. Stateless results carry `resultType`, the
//! cacheable ones `ttlMs` and `cacheScope`, and all name the server in
//! `_meta`.
//!
//! Limits: `_meta` is read from params already bounded by the frame and
//! envelope limits; one extra parse of the params' top level, skipped when
//! no member can be `_meta` (neither those bytes nor an escape in them).

use alloc::borrow::ToOwned;
use alloc::format;
use alloc::string::String;
use alloc::vec::Vec;

use serde::Deserialize;
use serde_json::value::RawValue;
use serde_json::{Map, Value, json};

use super::{RequestOutcome, Server};
use crate::dialect::{
    CLIENT_CAPABILITIES_META, McpRevision, PROTOCOL_VERSION_META, SERVER_INFO_META, Speech,
};
use crate::envelope;
use crate::error::CanonicalError;
use crate::id::Id;

/// Why a stateless request was refused before it was handled.
pub(crate) struct Refusal {
    error: CanonicalError,
    detail: String,
    /// For `UNSUPPORTED_PROTOCOL_VERSION`: the revision requested.
    requested: Option<String>,
}

#[derive(Deserialize)]
struct Params<'a> {
    #[serde(rename = "_meta", borrow, default)]
    meta: Option<&'a RawValue>,
    #[serde(borrow, default)]
    name: Option<&'a RawValue>,
    #[serde(borrow, default)]
    uri: Option<&'a RawValue>,
}

#[derive(Deserialize)]
struct Meta<'a> {
    #[serde(rename = "io.modelcontextprotocol/protocolVersion", borrow, default)]
    protocol_version: Option<&'a RawValue>,
    #[serde(rename = "io.modelcontextprotocol/clientCapabilities", borrow, default)]
    client_capabilities: Option<&'a RawValue>,
}

impl Server {
    /// How the connection speaks (what a request without a stateless
    /// `_meta` speaks).
    pub(super) fn connection_speech(&self) -> Speech {
        Speech {
            dialect: self.dialect,
            revision: self.revision,
        }
    }

    /// How the request `method` with `params` is spoken, or why it is
    /// refused (see the module docs). `initialize` always speaks as the
    /// connection (it negotiates the revision itself).
    pub(super) fn speech_of(
        &self,
        method: &str,
        params: Option<&RawValue>,
    ) -> Result<Speech, Refusal> {
        let connection = self.connection_speech();
        if method == "initialize" {
            return Ok(connection);
        }
        let Some(params) = params else {
            return Ok(connection);
        };
        // No member is named `_meta` without those bytes or an escape:
        // most requests skip the parse below (a pass over all the params).
        let bytes = params.get().as_bytes();
        let finders = &self.config.finders;
        if finders.meta.find(bytes).is_none() && memchr::memchr(b'\\', bytes).is_none() {
            return Ok(connection);
        }
        // Params that are not an object are refused by each method.
        let Ok(parsed) = serde_json::from_str::<Params<'_>>(params.get()) else {
            return Ok(connection);
        };
        let Some(meta) = parsed.meta else {
            return Ok(connection);
        };
        let Ok(meta) = serde_json::from_str::<Meta<'_>>(meta.get()) else {
            // `_meta` that is not an object names no revision.
            return Ok(connection);
        };
        let Some(version) = meta.protocol_version else {
            // `_meta` without a revision (e.g. only a progressToken).
            return Ok(connection);
        };
        let malformed = |detail: String| Refusal {
            error: CanonicalError::InvalidToolInput,
            detail,
            requested: None,
        };
        let Ok(version) = serde_json::from_str::<String>(version.get()) else {
            return Err(malformed(format!(
                "params._meta[{PROTOCOL_VERSION_META:?}] must be a string naming an MCP revision, found {}",
                version.get()
            )));
        };
        let capabilities_object = meta
            .client_capabilities
            .is_some_and(|caps| caps.get().trim_start().starts_with('{'));
        if !capabilities_object {
            return Err(malformed(format!(
                "a stateless request (params._meta[{PROTOCOL_VERSION_META:?}]) needs params._meta[{CLIENT_CAPABILITIES_META:?}], an object ({{}} for none)"
            )));
        }
        let revision = match McpRevision::parse(&version) {
            Some(revision) if revision.is_stateless() => revision,
            _ => {
                return Err(Refusal {
                    error: CanonicalError::UnsupportedProtocolVersion,
                    detail: format!(
                        "this server does not speak MCP revision {version:?} without a handshake; the stateless revisions it speaks are {}, and the others through initialize",
                        stateless_names().join(", ")
                    ),
                    requested: Some(version),
                });
            }
        };
        if let Some(headers) = &self.headers {
            let name = match method {
                "tools/call" | "prompts/get" => parsed.name,
                "resources/read" => parsed.uri,
                _ => None,
            }
            .and_then(|raw| serde_json::from_str::<String>(raw.get()).ok());
            let mismatch = |header: &str, sent: &Option<String>, body: &str| {
                (sent.as_deref() != Some(body)).then(|| Refusal {
                    error: CanonicalError::HeaderMismatch,
                    detail: format!(
                        "the {header} header ({}) must equal the body's {body:?}",
                        sent.as_deref()
                            .map_or("missing".to_owned(), |sent| format!("{sent:?}"))
                    ),
                    requested: None,
                })
            };
            if let Some(refusal) = mismatch(
                "MCP-Protocol-Version",
                &headers.protocol_version,
                revision.as_str(),
            )
            .or_else(|| mismatch("Mcp-Method", &headers.method, method))
            .or_else(|| {
                name.as_deref()
                    .and_then(|name| mismatch("Mcp-Name", &headers.name, name))
            }) {
                return Err(refusal);
            }
        }
        Ok(Speech::mcp(revision))
    }

    /// Answers a stateless request refused by [`Server::speech_of`].
    pub(super) fn refuse_stateless(
        &mut self,
        id: &Id<'static>,
        batch: Option<u64>,
        refusal: Refusal,
    ) -> RequestOutcome {
        let mut object = refusal.error.error_object(Some(id), Some(&refusal.detail));
        if let Some(requested) = refusal.requested {
            object = object.with_versions(supported_names(), requested);
        }
        self.reply(batch, envelope::encode_error_object(Some(id), &object));
        RequestOutcome {
            tool: None,
            error: Some(refusal.error),
            detail: Some(refusal.detail),
            deferred: false,
        }
    }

    /// Answers `result` to the request being handled: as it is, or, for a
    /// stateless request, with `resultType`, the server's name in `_meta`
    /// and, when `cacheable`, the cache hints (`ttlMs: 0`, `cacheScope:
    /// "private"`: nothing here is shared between callers).
    pub(super) fn reply_result(
        &mut self,
        id: &Id<'static>,
        batch: Option<u64>,
        mut result: Map<String, Value>,
        cacheable: bool,
    ) -> RequestOutcome {
        if self.speech.is_stateless() {
            result.insert("resultType".to_owned(), Value::from("complete"));
            if cacheable {
                result.insert("ttlMs".to_owned(), Value::from(0));
                result.insert("cacheScope".to_owned(), Value::from("private"));
            }
            let mut meta = Map::new();
            meta.insert(
                SERVER_INFO_META.to_owned(),
                json!({
                    "name": self.config.server_info.name,
                    "version": self.config.server_info.version,
                }),
            );
            result.insert("_meta".to_owned(), Value::Object(meta));
        }
        self.reply_ok(id, batch, &Value::Object(result))
    }
}

/// Every revision this server speaks, newest first, as the wire spells them.
pub(crate) fn supported_names() -> Vec<&'static str> {
    McpRevision::ALL
        .into_iter()
        .map(McpRevision::as_str)
        .collect()
}

fn stateless_names() -> Vec<&'static str> {
    McpRevision::ALL
        .into_iter()
        .filter(|revision| revision.is_stateless())
        .map(McpRevision::as_str)
        .collect()
}
