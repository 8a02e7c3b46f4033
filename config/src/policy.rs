//! Tool visibility and tool authorization, kept apart.
//!
//! Two questions, two settings:
//!
//! - **Visibility** (`[server.tools]`: `mode`, `allowlist`, `denylist`)
//!   answers *what exists*. A hidden tool is absent from `tools/list` and a
//!   call to it is answered exactly like a call to a tool that was never
//!   registered (`TOOL_NOT_FOUND`, same message, same detail), so probing
//!   names reveals nothing.
//! - **Authorization** (`[server.auth] allowed_tools`) answers *who may
//!   call*. It never changes `tools/list`; a caller that passed
//!   authentication and calls a visible tool outside the list is answered
//!   `FORBIDDEN`. A tool the caller cannot see is never `FORBIDDEN`: it is
//!   unknown.
//!
//! [`ToolPolicy::is_visible`] is the one visibility function: the server
//! uses it (through [`ToolPolicy::apply`], which installs it as
//! [`ServerConfig::tool_filter`]) for both `tools/list` and `tools/call`.
//! [`ToolPolicy::decide`] states the whole decision table in one place.
//!
//! Rules: in `filter` mode (the default) a tool is visible when the
//! allowlist is empty or names it, and the denylist does not name it; the
//! denylist always wins. `passthrough` mode shows every registered tool and
//! refuses non-empty lists (they would be silently ignored). An absent or
//! empty `allowed_tools` authorizes every visible tool. Names are compared
//! exactly (case-sensitive); blank or space-padded names are refused.
//! The policy holds only names; its cost per call is one set lookup per list.

use std::collections::BTreeSet;
use std::string::String;
use std::sync::Arc;
use std::vec::Vec;

use evidence_wire::error::CanonicalError;
use evidence_wire::server::{ServerConfig, ToolFilter};

/// `[server.tools] mode`.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub enum VisibilityMode {
    /// The lists apply: hidden tools are neither listed nor callable.
    #[default]
    Filter,
    /// Every registered tool is listed and callable (authorization still
    /// applies); for clients that expect the full registry.
    Passthrough,
}

/// What to answer for a `tools/call`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Decision {
    /// Answer `TOOL_NOT_FOUND`: the tool is unknown or hidden (the two are
    /// indistinguishable on the wire).
    NotFound,
    /// Answer `FORBIDDEN`: the tool is visible but the caller may not call it.
    Forbidden,
    /// Run the call.
    Allow,
}

impl Decision {
    /// The canonical error to answer, or `None` when the call runs.
    pub const fn error(self) -> Option<CanonicalError> {
        match self {
            Decision::NotFound => Some(CanonicalError::ToolNotFound),
            Decision::Forbidden => Some(CanonicalError::Forbidden),
            Decision::Allow => None,
        }
    }
}

/// Why a policy could not be built.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum PolicyError {
    /// A name in a list is empty or has leading or trailing whitespace.
    #[error(
        "{list}[{index}] = {name:?}: a tool name must be non-empty with no leading or trailing whitespace"
    )]
    BlankName {
        /// The list, e.g. `server.tools.denylist`.
        list: &'static str,
        /// The position in the list.
        index: usize,
        /// The name as given.
        name: String,
    },
    /// `mode = "passthrough"` with a non-empty allowlist or denylist.
    #[error(
        "{list} is not empty but server.tools.mode is \"passthrough\", which ignores it; set mode = \"filter\" or empty the list"
    )]
    PassthroughWithList {
        /// The offending list.
        list: &'static str,
    },
}

/// Which tools a caller sees and may call. See the module docs.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct ToolPolicy {
    mode: VisibilityMode,
    allowlist: BTreeSet<String>,
    denylist: BTreeSet<String>,
    allowed_tools: Option<BTreeSet<String>>,
}

/// The list names used in errors.
const ALLOWLIST: &str = "server.tools.allowlist";
const DENYLIST: &str = "server.tools.denylist";
const ALLOWED_TOOLS: &str = "server.auth.allowed_tools";

fn name_set(list: &'static str, names: &[String]) -> Result<BTreeSet<String>, PolicyError> {
    let mut set = BTreeSet::new();
    for (index, name) in names.iter().enumerate() {
        if name.trim().is_empty() || name.trim() != name {
            return Err(PolicyError::BlankName {
                list,
                index,
                name: name.clone(),
            });
        }
        set.insert(name.clone());
    }
    Ok(set)
}

impl ToolPolicy {
    /// Every tool visible, every visible tool callable.
    pub fn allow_all() -> Self {
        ToolPolicy::default()
    }

    /// A policy from its parts: the visibility `mode`, `allowlist` and
    /// `denylist`, and the authorization list `allowed_tools` (`None` or
    /// empty: every visible tool).
    pub fn new(
        mode: VisibilityMode,
        allowlist: &[String],
        denylist: &[String],
        allowed_tools: Option<&[String]>,
    ) -> Result<Self, PolicyError> {
        let allowlist = name_set(ALLOWLIST, allowlist)?;
        let denylist = name_set(DENYLIST, denylist)?;
        if mode == VisibilityMode::Passthrough {
            if !allowlist.is_empty() {
                return Err(PolicyError::PassthroughWithList { list: ALLOWLIST });
            }
            if !denylist.is_empty() {
                return Err(PolicyError::PassthroughWithList { list: DENYLIST });
            }
        }
        let allowed_tools = match allowed_tools {
            Some(names) if !names.is_empty() => Some(name_set(ALLOWED_TOOLS, names)?),
            _ => None,
        };
        Ok(ToolPolicy {
            mode,
            allowlist,
            denylist,
            allowed_tools,
        })
    }

    /// The visibility mode.
    pub fn mode(&self) -> VisibilityMode {
        self.mode
    }

    /// Whether `tool` exists for callers: listed by `tools/list` and
    /// callable. The one function both methods use.
    pub fn is_visible(&self, tool: &str) -> bool {
        match self.mode {
            VisibilityMode::Passthrough => true,
            VisibilityMode::Filter => {
                (self.allowlist.is_empty() || self.allowlist.contains(tool))
                    && !self.denylist.contains(tool)
            }
        }
    }

    /// Whether an authenticated caller may call `tool` (visibility aside).
    pub fn is_authorized(&self, tool: &str) -> bool {
        self.allowed_tools
            .as_ref()
            .is_none_or(|allowed| allowed.contains(tool))
    }

    /// The answer for a call of `tool`; `registered` says whether the
    /// server has such a tool at all.
    ///
    /// | registered | visible | authorized | decision |
    /// | --- | --- | --- | --- |
    /// | no | — | — | [`Decision::NotFound`] |
    /// | yes | no | — | [`Decision::NotFound`] |
    /// | yes | yes | no | [`Decision::Forbidden`] |
    /// | yes | yes | yes | [`Decision::Allow`] |
    pub fn decide(&self, tool: &str, registered: bool) -> Decision {
        if !registered || !self.is_visible(tool) {
            Decision::NotFound
        } else if !self.is_authorized(tool) {
            Decision::Forbidden
        } else {
            Decision::Allow
        }
    }

    /// The names of `tools` a caller sees, in the given order.
    pub fn visible<'a>(&self, tools: impl IntoIterator<Item = &'a str>) -> Vec<&'a str> {
        tools
            .into_iter()
            .filter(|tool| self.is_visible(tool))
            .collect()
    }

    /// [`ToolPolicy::is_visible`] as a shareable closure.
    pub fn visibility_filter(&self) -> ToolFilter {
        let policy = self.clone();
        Arc::new(move |tool: &str| policy.is_visible(tool))
    }

    /// [`ToolPolicy::is_authorized`] as a shareable closure.
    pub fn authorization_filter(&self) -> ToolFilter {
        let policy = self.clone();
        Arc::new(move |tool: &str| policy.is_authorized(tool))
    }

    /// Installs the policy in a server configuration: visibility as
    /// [`ServerConfig::tool_filter`] (used by `tools/list` and
    /// `tools/call`), authorization as [`ServerConfig::tool_authorizer`].
    /// A policy that filters nothing installs nothing.
    pub fn apply(&self, config: &mut ServerConfig) {
        let filters = self.mode == VisibilityMode::Filter
            && (!self.allowlist.is_empty() || !self.denylist.is_empty());
        config.tool_filter = filters.then(|| self.visibility_filter());
        config.tool_authorizer = self
            .allowed_tools
            .is_some()
            .then(|| self.authorization_filter());
    }
}
