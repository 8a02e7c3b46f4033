//! A caller: spawn a provider, ask it one question with a timeout, and
//! print the evidence once its hash (and signature, when required) verified.
//!
//! ```text
//! cargo run -p evidence-wire-tokio --example caller -- evidence-wire time_now -- evidence-wire serve
//! cargo run -p evidence-wire-tokio --example caller -- git head_commit '{"path":"."}' -- target/debug/examples/git_provider
//! ```
use evidence_wire_tokio::prelude::*;
use evidence_wire_tokio::wire::client::ClientConfig;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

const USAGE: &str = "usage: caller PROVIDER_ID CHECK_ID [PARAMS_JSON] -- PROGRAM [ARGS...]";

#[tokio::main(flavor = "current_thread")]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let mut args = std::env::args().skip(1);
    let question: Vec<String> = args.by_ref().take_while(|arg| arg != "--").collect();
    let command: Vec<String> = args.collect();
    let [provider_id, check_id, params @ ..] = question.as_slice() else {
        return Err(USAGE.into());
    };
    if command.is_empty() {
        return Err(USAGE.into());
    }
    let mut query = EvidenceQuery::new(provider_id.as_str(), check_id.as_str());
    if let Some(params) = params.first() {
        query = query.with_params(serde_json::from_str(params)?);
    }

    // The client fails a query the provider does not answer in 5 s (and
    // restarts a provider that hangs); a caller may also bound its own wait.
    let mut client = ClientConfig::default();
    client.request_timeout_ms = 5_000;
    let provider = ProcessProvider::spawn(ProcessConfig::new(command).with_client(client))?;

    let now = SystemTime::now().duration_since(UNIX_EPOCH)?.as_millis();
    let context = EvidenceContext::adhoc(TriggerTime::UnixMillis(i64::try_from(now)?));
    let evidence =
        tokio::time::timeout(Duration::from_secs(10), provider.query(&query, &context)).await??;

    println!("{evidence}");
    if let Some(hash) = evidence.hash() {
        eprintln!(
            "verified: sha256 {} ({} profile)",
            hash.value,
            evidence.profile().name()
        );
    }
    Ok(())
}
