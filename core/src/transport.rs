//! The transports the protocol runs over: one name for them, shared by the
//! adapters, the configuration, the metrics and the logs.
//!
//! Not exhaustive: a transport added later (a WebSocket, say) becomes a
//! variant here, and code that matches on it keeps a wildcard arm.

use serde::{Deserialize, Serialize};

/// How a connection reaches the server.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
#[non_exhaustive]
pub enum Transport {
    /// stdin/stdout of a process, Content-Length framed or one JSON message
    /// per line.
    #[default]
    Stdio,
    /// HTTP (a JSON body per request, or one server-sent event).
    Http,
}

impl Transport {
    /// Every transport, in a fixed order.
    pub const ALL: [Transport; 2] = [Transport::Stdio, Transport::Http];

    /// The name used in configuration, metrics labels and logs: `stdio`, `http`.
    pub const fn as_str(self) -> &'static str {
        match self {
            Transport::Stdio => "stdio",
            Transport::Http => "http",
        }
    }
}

impl core::fmt::Display for Transport {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        f.write_str(self.as_str())
    }
}
