//! The `evidence-wire` command line.
//!
//! Subcommands arrive with the CLI work; today it prints its version.

#![forbid(unsafe_code)]

fn main() {
    println!("evidence-wire {}", env!("CARGO_PKG_VERSION"));
}
