//! The unframed entry points: a client and a server exchanging whole
//! messages (as over HTTP, one message per body), with no framing layer,
//! answer exactly what the framed stdio path answers inside its frames.

use evidence_wire::client::{Client, ClientConfig, ClientEvent};
use evidence_wire::evidence::{
    EvidenceContext, EvidenceQuery, EvidenceResult, EvidenceValue, TriggerTime,
};
use evidence_wire::frame::Framing;
use evidence_wire::server::{Server, ServerConfig, ServerEvent};

fn answer(server: &mut Server) {
    while let Some(event) = server.poll_event() {
        if let ServerEvent::EvidenceQuery { ticket, .. } = event {
            let value = EvidenceValue::json(&42).unwrap();
            server
                .respond(ticket, EvidenceResult::with_value(value))
                .unwrap();
        }
    }
}

#[test]
fn client_and_server_exchange_whole_messages() {
    for handshake in [false, true] {
        let mut config = ClientConfig::default();
        config.handshake = handshake;
        let mut client = Client::new(config);
        let mut server = Server::new(ServerConfig::default());
        let query = EvidenceQuery::new("p", "c");
        let context = EvidenceContext::adhoc(TriggerTime::UnixMillis(1));
        let id = client.query(&query, &context, 0);
        let mut outcome = None;
        for _ in 0..4 {
            while let Some(message) = client.poll_message() {
                assert_eq!(message.first(), Some(&b'{'), "unframed: no header");
                server.handle_message(&message);
            }
            answer(&mut server);
            while let Some(message) = server.poll_message() {
                assert_eq!(message.first(), Some(&b'{'), "unframed: no header");
                client.handle_message(&message);
            }
            while let Some(event) = client.poll_event() {
                if let ClientEvent::Answer {
                    id: answered,
                    outcome: got,
                } = event
                {
                    assert_eq!(answered, id);
                    outcome = Some(got);
                }
            }
        }
        let verified = outcome.expect("answered").expect("verified");
        assert_eq!(
            verified.result().value,
            Some(EvidenceValue::json(&42).unwrap())
        );
    }
}

#[test]
fn the_framed_layer_wraps_the_same_messages() {
    // The same request through the framed path: the body inside the frame
    // equals the unframed message.
    let mut unframed = Server::new(ServerConfig::default());
    let mut framed = Server::new(ServerConfig::default());
    let body = br#"{"jsonrpc":"2.0","id":1,"method":"tools/list"}"#;
    unframed.handle_message(body);
    framed.handle_input(format!("Content-Length: {}\r\n\r\n", body.len()).as_bytes());
    framed.handle_input(body);
    let message = unframed.poll_message().unwrap();
    let frame = framed.poll_transmit().unwrap();
    assert_eq!(framed.framing(), Some(Framing::ContentLength));
    let header = format!("Content-Length: {}\r\n\r\n", message.len());
    assert_eq!(frame, [header.as_bytes(), &message].concat());
}

#[test]
fn an_oversized_message_is_refused_unread() {
    let mut config = ServerConfig::default();
    config.limits.max_body_bytes = 64;
    let mut server = Server::new(config);
    let body = format!(
        r#"{{"jsonrpc":"2.0","id":1,"method":"ping","params":{{"pad":"{}"}}}}"#,
        "x".repeat(100)
    );
    server.handle_message(body.as_bytes());
    let answer: serde_json::Value =
        serde_json::from_slice(&server.poll_message().unwrap()).unwrap();
    assert_eq!(answer["error"]["code"], -32070);
}
