//! An evidence provider mounted in an axum application, next to the
//! application's own routes.
//!
//! ```text
//! EW_ADDR=127.0.0.1:8080 cargo run -p evidence-wire-tokio --example axum_app
//! ```
//!
//! `GET /hello` is the application's; `POST /evidence` is the provider
//! `greeter` (Decision Gate's `mcp` provider `url`, and an MCP client's
//! streamable-HTTP endpoint). Ctrl-C drains the provider's calls and stops.
use axum::{Router, routing::get};
use evidence_wire_tokio::prelude::*;

#[derive(serde::Deserialize, schemars::JsonSchema)]
struct Person {
    /// Who to greet.
    name: String,
}

fn greeting(person: Person, _: &CheckContext) -> Result<String, CheckError> {
    Ok(format!("hello, {}", person.name))
}

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let address = std::env::var("EW_ADDR").unwrap_or_else(|_| "127.0.0.1:8080".to_owned());
    let provider = Provider::new("greeter", "Greets people.")
        .check(Check::new("greeting", "A greeting for params.name.", greeting).inline());

    let listener = tokio::net::TcpListener::bind(&address).await?;
    let local = listener.local_addr()?;
    // `listening_on`: `Host` must name this address (DNS-rebinding defence).
    let evidence =
        ProviderService::new(provider, HttpServerConfig::default())?.listening_on(local)?;
    let app = Router::new()
        .route("/hello", get(|| async { "hello from the app" }))
        .route_service("/evidence", evidence.clone());

    eprintln!("listening on http://{local}/evidence");
    axum::serve(listener, app)
        .with_graceful_shutdown(async move {
            let _ = tokio::signal::ctrl_c().await;
            evidence.drain().await;
        })
        .await?;
    Ok(())
}
