//! The two dialects of the evidence-provider wire, and what follows from
//! the dialect a connection speaks.
//!
//! Decision Gate's own client sends `tools/call` with no handshake, reads
//! `input_schema`, expects the evidence in a `{"type":"json"}` content item
//! and verifies hashes with its own canonicalization (the `decision-gate`
//! [`Profile`]). Standard MCP clients send `initialize` first, read
//! `inputSchema`, want a text item plus `structuredContent`, and know only
//! RFC 8785. A server picks the dialect per connection ([`DialectChoice`]);
//! a client knows it from whether it ran the handshake.
//!
//! **The hash profile follows the verifier**: what is hashed (and signed)
//! for a Decision Gate connection uses the `decision-gate` profile, which
//! Decision Gate checks; what goes to an MCP client uses RFC 8785
//! ([`Dialect::hash_profile`]). [`HashProfile`] lets configuration fix one
//! profile instead, on either side.
//!
//! Limits: none; this module only names choices.

use crate::canonical::Profile;

/// Which shape of messages a connection gets.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Dialect {
    /// Decision Gate: no handshake, `input_schema`, a `json` content item,
    /// hashes under the `decision-gate` profile.
    DecisionGate,
    /// Standard MCP: `inputSchema`, a text item with the canonical JSON plus
    /// `structuredContent` and `isError`, hashes under RFC 8785.
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
    /// MCP once the peer sends `initialize`, Decision Gate before that.
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
