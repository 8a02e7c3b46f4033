//! Placeholder: replaced by the canonical JSON benchmark.
fn main() {}
