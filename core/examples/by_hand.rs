//! The core driven by hand: no runtime, no threads, no I/O of its own. This
//! is how you embed evidence-wire in an event loop it has no adapter for.
//!
//! Two `evidence_query` calls framed as Decision Gate frames them
//! (`Content-Length`) arrive in 16-byte pieces from an in-memory buffer; the
//! server answers each (the hash filled in by the core), and the framed
//! answers go to an in-memory output buffer, printed at the end.
//!
//! ```text
//! cargo run -p evidence-wire --example by_hand
//! ```
use evidence_wire::evidence::{EvidenceError, EvidenceResult, EvidenceValue};
use evidence_wire::server::{Server, ServerConfig, ServerEvent};

fn call(id: u32, check_id: &str) -> Vec<u8> {
    let body = format!(
        r#"{{"jsonrpc":"2.0","id":{id},"method":"tools/call","params":{{"name":"evidence_query","arguments":{{"query":{{"provider_id":"demo","check_id":"{check_id}"}},"context":{{"tenant_id":1,"namespace_id":1,"run_id":"run-1","scenario_id":"s","stage_id":"st","trigger_id":"t","trigger_time":{{"kind":"logical","value":7}}}}}}}}}}"#
    );
    let mut framed = format!("Content-Length: {}\r\n\r\n", body.len()).into_bytes();
    framed.extend_from_slice(body.as_bytes());
    framed
}

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let mut input = call(1, "answer");
    input.extend(call(2, "no_such_check"));
    let mut output = Vec::new();

    let mut server = Server::new(ServerConfig::default());
    let mut pieces = input.chunks(16);
    while !server.is_finished() {
        // 1. Input: the next piece read, or the end of input.
        match pieces.next() {
            Some(piece) => server.handle_input(piece),
            None => server.handle_end_of_input(),
        }
        // 2. Events: answer every query (here at once; an embedder may
        //    answer later, from anywhere, with the ticket).
        while let Some(event) = server.poll_event() {
            if let ServerEvent::EvidenceQuery { ticket, query, .. } = event {
                let result = match query.check_id.as_str() {
                    "answer" => EvidenceResult::with_value(EvidenceValue::json(&42)?),
                    other => EvidenceResult::with_error(EvidenceError::new(
                        "unknown_check",
                        format!("no check named {other}"),
                    )),
                };
                server.respond(ticket, result)?;
            }
        }
        // 3. Output: everything there is, before reading more.
        while let Some(bytes) = server.poll_transmit() {
            output.extend_from_slice(&bytes);
        }
    }
    println!("{}", String::from_utf8(output)?);
    Ok(())
}
