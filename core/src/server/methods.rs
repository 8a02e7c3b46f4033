//! The protocol's chores, answered by the server itself: `initialize`
//! (the handshake of revisions 2024-11-05 to 2025-11-25), `server/discover`
//! (revision 2026-07-28), `ping`, `tools/list`, `resources/list`,
//! `resources/templates/list` and `resources/read`, each shaped for the
//! revision the request is spoken in.
//!
//! Limits: results are built from the configuration (tools, resources),
//! whose size the embedder controls; nothing here grows with the input.
//! Lists are never paginated, so any `cursor` is one this server did not
//! issue: answered `-32602`.

use alloc::borrow::ToOwned;
use alloc::format;
use alloc::vec::Vec;

use serde_json::value::RawValue;
use serde_json::{Map, Value, json};

use super::speech::supported_names;
use super::{RequestOutcome, Server, ServerEvent, read_params};
use crate::dialect::{Dialect, DialectChoice, McpRevision, Speech};
use crate::error::CanonicalError;
use crate::id::Id;

impl Server {
    /// `initialize`: the MCP handshake. Answers the requested revision when
    /// it is one this server negotiates, its newest otherwise (the client
    /// decides whether it can speak that), and switches an `Auto`
    /// connection to the MCP dialect at that revision.
    pub(super) fn initialize(
        &mut self,
        id: &Id<'static>,
        params: Option<&RawValue>,
        batch: Option<u64>,
    ) -> RequestOutcome {
        let params = match read_params(params) {
            Ok(params) => params,
            Err(duplicate) => {
                return self.reply_duplicate(id, batch, "initialize params", duplicate, None);
            }
        };
        let requested = params
            .get("protocolVersion")
            .and_then(Value::as_str)
            .unwrap_or_default();
        let revision = McpRevision::HANDSHAKE
            .into_iter()
            .find(|revision| revision.as_str() == requested)
            .unwrap_or(McpRevision::LATEST_HANDSHAKE);
        if self.config.dialect == DialectChoice::Auto {
            self.dialect = Dialect::Mcp;
        }
        self.revision = revision;
        self.speech = Speech {
            dialect: self.dialect,
            revision,
        };
        let mut result = Map::new();
        result.insert("protocolVersion".to_owned(), Value::from(revision.as_str()));
        result.insert("capabilities".to_owned(), self.capabilities());
        result.insert(
            "serverInfo".to_owned(),
            json!({
                "name": self.config.server_info.name,
                "version": self.config.server_info.version,
            }),
        );
        if let Some(instructions) = &self.config.instructions {
            result.insert(
                "instructions".to_owned(),
                Value::from(instructions.as_str()),
            );
        }
        self.events.push_back(ServerEvent::Initialized {
            protocol_version: revision.as_str().to_owned(),
            client_info: params.get("clientInfo").cloned(),
        });
        self.reply_ok(id, batch, &Value::Object(result))
    }

    /// `server/discover` (2026-07-28): the revisions, capabilities and
    /// identity of this server, for a stateless client. A request without
    /// the stateless `_meta` is refused: the method belongs to that revision.
    pub(super) fn discover(&mut self, id: &Id<'static>, batch: Option<u64>) -> RequestOutcome {
        if !self.speech.is_stateless() {
            return self.reply_error(
                id,
                batch,
                CanonicalError::InvalidToolInput,
                "server/discover is a request of MCP revision 2026-07-28: send params._meta with io.modelcontextprotocol/protocolVersion and io.modelcontextprotocol/clientCapabilities".to_owned(),
                None,
            );
        }
        let mut result = Map::new();
        result.insert("supportedVersions".to_owned(), json!(supported_names()));
        result.insert("capabilities".to_owned(), self.capabilities());
        if let Some(instructions) = &self.config.instructions {
            result.insert(
                "instructions".to_owned(),
                Value::from(instructions.as_str()),
            );
        }
        self.reply_result(id, batch, result, true)
    }

    /// `ping`: `{}` (the empty result strict clients expect); removed in
    /// the stateless revision, so a stateless `ping` is an unknown method.
    pub(super) fn ping(&mut self, id: &Id<'static>, batch: Option<u64>) -> RequestOutcome {
        if self.speech.is_stateless() {
            return self.method_not_found(id, batch, "ping");
        }
        self.reply_ok(id, batch, &json!({}))
    }

    /// The capabilities this server declares: tools (their list never
    /// changes) and, when served, resources.
    fn capabilities(&self) -> Value {
        let mut capabilities = Map::new();
        capabilities.insert("tools".to_owned(), json!({"listChanged": false}));
        if self.config.resources_enabled {
            capabilities.insert("resources".to_owned(), json!({}));
        }
        Value::Object(capabilities)
    }

    /// `tools/list`: every visible tool, `evidence_query` first, in the
    /// speech of the request (`outputSchema` from revision 2025-06-18 on).
    pub(super) fn tools_list(
        &mut self,
        id: &Id<'static>,
        params: Option<&RawValue>,
        batch: Option<u64>,
    ) -> RequestOutcome {
        if let Some(refused) = self.refuse_cursor(id, params, batch, "tools/list") {
            return refused;
        }
        let speech = self.speech;
        let tools: Vec<Value> = self
            .config
            .tools()
            .filter(|(definition, _)| self.is_visible(&definition.name))
            .map(|(definition, _)| definition.to_listing(speech))
            .collect();
        let mut result = Map::new();
        result.insert("tools".to_owned(), Value::Array(tools));
        self.reply_result(id, batch, result, true)
    }

    /// `resources/list`: every resource, in the order added.
    pub(super) fn resources_list(
        &mut self,
        id: &Id<'static>,
        params: Option<&RawValue>,
        batch: Option<u64>,
    ) -> RequestOutcome {
        if let Some(refused) = self.refuse_cursor(id, params, batch, "resources/list") {
            return refused;
        }
        let resources: Vec<Value> = self
            .config
            .resources()
            .iter()
            .map(|resource| {
                let mut entry = Map::new();
                entry.insert("uri".to_owned(), Value::from(resource.uri.as_str()));
                entry.insert("name".to_owned(), Value::from(resource.name.as_str()));
                if let Some(title) = &resource.title {
                    entry.insert("title".to_owned(), Value::from(title.as_str()));
                }
                if let Some(description) = &resource.description {
                    entry.insert("description".to_owned(), Value::from(description.as_str()));
                }
                entry.insert(
                    "mimeType".to_owned(),
                    Value::from(resource.mime_type.as_str()),
                );
                Value::Object(entry)
            })
            .collect();
        let mut result = Map::new();
        result.insert("resources".to_owned(), Value::Array(resources));
        self.reply_result(id, batch, result, true)
    }

    /// `resources/templates/list`: this server has no URI templates (its
    /// resources are fixed documents), so the list is empty; it answers
    /// because `resources` is a declared capability.
    pub(super) fn resource_templates_list(
        &mut self,
        id: &Id<'static>,
        params: Option<&RawValue>,
        batch: Option<u64>,
    ) -> RequestOutcome {
        if let Some(refused) = self.refuse_cursor(id, params, batch, "resources/templates/list") {
            return refused;
        }
        let mut result = Map::new();
        result.insert("resourceTemplates".to_owned(), json!([]));
        self.reply_result(id, batch, result, true)
    }

    /// `resources/read`: the resource named by `params.uri`. An unknown URI
    /// is `-32002` up to revision 2025-11-25 and `-32602` in 2026-07-28.
    pub(super) fn resources_read(
        &mut self,
        id: &Id<'static>,
        params: Option<&RawValue>,
        batch: Option<u64>,
    ) -> RequestOutcome {
        let params = match read_params(params) {
            Ok(params) => params,
            Err(duplicate) => {
                return self.reply_duplicate(id, batch, "resources/read params", duplicate, None);
            }
        };
        let Some(uri) = params.get("uri").and_then(Value::as_str) else {
            return self.reply_error(
                id,
                batch,
                CanonicalError::InvalidToolInput,
                "resources/read needs params.uri, a string".to_owned(),
                None,
            );
        };
        let found = self
            .config
            .resources()
            .iter()
            .find(|resource| resource.uri == uri)
            .map(|resource| {
                json!([{
                    "uri": resource.uri,
                    "mimeType": resource.mime_type,
                    "text": &*resource.text,
                }])
            });
        match found {
            Some(contents) => {
                let mut result = Map::new();
                result.insert("contents".to_owned(), contents);
                self.reply_result(id, batch, result, true)
            }
            None => {
                let detail = format!("no resource has the URI {uri:?}; see resources/list");
                let error = if self.speech.is_stateless() {
                    CanonicalError::InvalidToolInput
                } else {
                    CanonicalError::ResourceNotFound
                };
                self.reply_error(id, batch, error, detail, None)
            }
        }
    }

    /// Answers a method this server does not serve (`-32601`).
    pub(super) fn method_not_found(
        &mut self,
        id: &Id<'static>,
        batch: Option<u64>,
        method: &str,
    ) -> RequestOutcome {
        let detail = if self.speech.is_stateless() {
            format!("method {method:?} is not served here (in MCP revision 2026-07-28)")
        } else {
            format!("method {method:?} is not served here")
        };
        self.reply_error(id, batch, CanonicalError::MethodNotFound, detail, None)
    }

    /// Refuses a list request that carries a `cursor`: this server never
    /// paginates, so no cursor is one it issued (`-32602`).
    fn refuse_cursor(
        &mut self,
        id: &Id<'static>,
        params: Option<&RawValue>,
        batch: Option<u64>,
        method: &str,
    ) -> Option<RequestOutcome> {
        let params = match read_params(params) {
            Ok(params) => params,
            Err(duplicate) => {
                let place = format!("{method} params");
                return Some(self.reply_duplicate(id, batch, &place, duplicate, None));
            }
        };
        let cursor = params.get("cursor").filter(|cursor| !cursor.is_null())?;
        let detail = format!(
            "params.cursor {cursor} of {method} is not a cursor this server issued (it returns every item at once, with no nextCursor); send the request without a cursor"
        );
        Some(self.reply_error(id, batch, CanonicalError::InvalidToolInput, detail, None))
    }
}
