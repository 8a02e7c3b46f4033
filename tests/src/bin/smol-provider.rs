//! `smol-provider`: a well-behaved stdio evidence provider served by the
//! smol adapter (`evidence_wire_smol::serve_stdio`), for the adapter test
//! matrix.
//!
//! ```text
//! smol-provider [--delay-ms N]
//! ```
//!
//! Each query is answered with `{"check_id": ..., "params": ...}` and its
//! SHA-256 hash, like `misbehave good`. A query whose params hold a number
//! `n` is answered after `(N * (8 - n % 8)) ms` (async sleep), so queries
//! sent together are answered concurrently and out of order. One line goes
//! to stderr at start (`smol-provider: ready`). Test tool: it trusts argv.

#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::panic,
    clippy::indexing_slicing
)] // test code may panic
#![forbid(unsafe_code)]

use std::time::Duration;

use evidence_wire::canonical::Profile;
use evidence_wire::evidence::{
    EvidenceContext, EvidenceError, EvidenceQuery, EvidenceResult, EvidenceValue,
};
use evidence_wire::server::ServerConfig;
use evidence_wire_smol::{Answer, Handler, Service};
use serde_json::{Value, json};

struct Echo {
    delay_ms: u64,
}

/// Every query is async work, run concurrently inside the serving future.
impl Handler for Echo {
    fn evidence_query(
        &self,
        query: EvidenceQuery,
        _context: EvidenceContext,
        _call: evidence_wire_provider::CallContext,
    ) -> Answer<EvidenceResult> {
        let delay_ms = self.delay_ms;
        Answer::future(async move {
            let n = query
                .params
                .as_ref()
                .and_then(|params| params.get("n"))
                .and_then(Value::as_u64)
                .unwrap_or(0);
            let wait = delay_ms.saturating_mul(8 - n % 8);
            if wait > 0 {
                smol::Timer::after(Duration::from_millis(wait)).await;
            }
            let value = json!({"check_id": query.check_id, "params": query.params});
            EvidenceValue::json(&value)
                .ok()
                .map(EvidenceResult::with_value)
                .and_then(|result| result.with_computed_hash(Profile::Rfc8785).ok())
                .unwrap_or_else(|| {
                    EvidenceResult::with_error(EvidenceError::new("internal_error", "cannot hash"))
                })
        })
    }
}

fn main() {
    let mut delay_ms = 0;
    let mut args = std::env::args().skip(1);
    while let Some(flag) = args.next() {
        match (flag.as_str(), args.next()) {
            ("--delay-ms", Some(value)) => {
                delay_ms = value.parse().unwrap_or_else(|_| usage());
            }
            _ => usage(),
        }
    }
    eprintln!("smol-provider: ready");
    let service = Service::new(ServerConfig::default(), Echo { delay_ms });
    if let Err(error) = smol::block_on(evidence_wire_smol::serve_stdio(service)) {
        eprintln!("smol-provider: {error}");
        std::process::exit(1);
    }
}

fn usage() -> ! {
    eprintln!("usage: smol-provider [--delay-ms N]");
    std::process::exit(2);
}
