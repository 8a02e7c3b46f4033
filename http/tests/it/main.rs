//! The HTTP layer's integration tests, one binary: whole request bodies
//! through an `Exchange` (MCP revisions and their headers).

#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::panic,
    clippy::indexing_slicing
)] // test code may panic

mod revisions;
