//! The protocol's chores, answered by the server itself: `initialize`,
//! `tools/list`, `resources/list` and `resources/read` (`ping` is one
//! line in the dispatch).
//!
//! Limits: results are built from the configuration (tools, resources),
//! whose size the embedder controls; nothing here grows with the input.

use alloc::borrow::ToOwned;
use alloc::format;
use alloc::vec::Vec;

use serde_json::value::RawValue;
use serde_json::{Map, Value, json};

use super::{RequestOutcome, SUPPORTED_PROTOCOL_VERSIONS, Server, ServerEvent, read_params};
use crate::dialect::{Dialect, DialectChoice};
use crate::error::CanonicalError;
use crate::id::Id;

impl Server {
    /// `initialize`: the MCP handshake. Answers the requested protocol
    /// version when it is one this server speaks, its newest otherwise,
    /// and switches an `Auto` connection to the MCP dialect.
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
        let version = SUPPORTED_PROTOCOL_VERSIONS
            .iter()
            .find(|supported| **supported == requested)
            .copied()
            .unwrap_or(SUPPORTED_PROTOCOL_VERSIONS[0]);
        if self.config.dialect == DialectChoice::Auto {
            self.dialect = Dialect::Mcp;
        }
        let mut capabilities = Map::new();
        capabilities.insert("tools".to_owned(), json!({"listChanged": false}));
        if self.config.resources_enabled {
            capabilities.insert("resources".to_owned(), json!({}));
        }
        let mut result = Map::new();
        result.insert("protocolVersion".to_owned(), Value::from(version));
        result.insert("capabilities".to_owned(), Value::Object(capabilities));
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
            protocol_version: version.to_owned(),
            client_info: params.get("clientInfo").cloned(),
        });
        self.reply_ok(id, batch, &Value::Object(result))
    }

    /// `tools/list`: every visible tool, `evidence_query` first, in the
    /// connection's dialect.
    pub(super) fn tools_list(&mut self, id: &Id<'static>, batch: Option<u64>) -> RequestOutcome {
        let dialect = self.dialect;
        let tools: Vec<Value> = self
            .config
            .tools()
            .filter(|(definition, _)| self.is_visible(&definition.name))
            .map(|(definition, _)| definition.to_listing(dialect))
            .collect();
        self.reply_ok(id, batch, &json!({ "tools": tools }))
    }

    /// `resources/list`: every resource, in the order added.
    pub(super) fn resources_list(
        &mut self,
        id: &Id<'static>,
        batch: Option<u64>,
    ) -> RequestOutcome {
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
        self.reply_ok(id, batch, &json!({ "resources": resources }))
    }

    /// `resources/read`: the resource named by `params.uri`.
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
                json!({
                    "contents": [{
                        "uri": resource.uri,
                        "mimeType": resource.mime_type,
                        "text": &*resource.text,
                    }]
                })
            });
        match found {
            Some(contents) => self.reply_ok(id, batch, &contents),
            None => {
                let detail = format!("no resource has the URI {uri:?}; see resources/list");
                self.reply_error(id, batch, CanonicalError::ResourceNotFound, detail, None)
            }
        }
    }
}
