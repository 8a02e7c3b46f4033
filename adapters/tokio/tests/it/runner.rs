//! The ready command line (`cli` feature, issue 41 item 1) in process:
//! the author's own options join `serve` and `contract`, reach the build
//! function, and every mistake is a usage error (exit 2). The binary end to
//! end (stdio, HTTP, signing, `--provider-id`) is tested on the git
//! example in `tests/tests/examples.rs`.

use std::process::ExitCode;
use std::sync::{Arc, Mutex};

use evidence_wire_tokio::cli::{NoArgs, Runner};
use evidence_wire_tokio::prelude::*;

#[derive(clap::Args, Debug)]
struct Tracker {
    /// The ticket tracker's base URL.
    #[arg(long, default_value = "https://tracker.example")]
    tracker_url: String,
    /// Fail the build function (to test its error path).
    #[arg(long)]
    refuse: bool,
}

fn provider() -> Provider {
    Provider::new("release", "Release readiness.").check(Check::new(
        "ready",
        "Whether the release is ready.",
        |_: NoParams, _: &CheckContext| Ok(true),
    ))
}

#[test]
fn the_authors_options_join_serve_and_contract() {
    let command = Runner::new(provider()).command::<Tracker>("release-provider");
    for sub in ["serve", "contract"] {
        let found = command
            .find_subcommand(sub)
            .unwrap_or_else(|| panic!("{sub}"));
        let ids: Vec<&str> = found
            .get_arguments()
            .map(|arg| arg.get_id().as_str())
            .collect();
        assert!(ids.contains(&"tracker_url"), "{sub}: {ids:?}");
        assert!(ids.contains(&"provider_id"), "{sub}: {ids:?}");
    }
    let serve = command.find_subcommand("serve").unwrap();
    let ids: Vec<&str> = serve
        .get_arguments()
        .map(|arg| arg.get_id().as_str())
        .collect();
    for flag in [
        "http",
        "tls_cert",
        "tls_key",
        "root",
        "signing_key",
        "key_id",
        "no_log",
        "log_dir",
        "drain_timeout_ms",
        "call_timeout_ms",
        "bearer_token_file",
    ] {
        assert!(ids.contains(&flag), "serve has --{flag}: {ids:?}");
    }
    // The about texts are the runner's, not the option structs' docs.
    assert!(
        serve
            .get_about()
            .is_some_and(|about| about.to_string().starts_with("Serve the provider"))
    );
    let mut command = command;
    let help = command.render_help().to_string();
    assert!(help.contains("Release readiness."), "{help}");
    assert!(
        help.contains("release-provider contract > release.contract.json"),
        "{help}"
    );
}

#[test]
fn the_build_function_gets_the_options_and_its_error_is_a_usage_error() {
    let seen = Arc::new(Mutex::new(None::<String>));
    let run = |args: &[&str]| -> ExitCode {
        let seen = Arc::clone(&seen);
        Runner::new(provider()).run_from(
            std::iter::once("release-provider").chain(args.iter().copied()),
            move |tracker: Tracker, provider| {
                *seen.lock().unwrap() = Some(tracker.tracker_url.clone());
                if tracker.refuse {
                    return Err("the tracker refused: set --tracker-url".to_owned());
                }
                Ok(provider.note(format!("tickets from {}", tracker.tracker_url)))
            },
        )
    };
    assert_eq!(
        run(&["contract", "--tracker-url", "https://t.internal"]),
        ExitCode::SUCCESS
    );
    assert_eq!(seen.lock().unwrap().as_deref(), Some("https://t.internal"));
    assert_eq!(run(&["contract", "--refuse"]), ExitCode::from(2));
    assert_eq!(run(&["contract", "--no-such-flag"]), ExitCode::from(2));
    assert_eq!(
        run(&["serve", "--drain-timeout-ms", "soon"]),
        ExitCode::from(2)
    );
    assert_eq!(run(&["serve", "--call-timeout-ms", "0"]), ExitCode::from(2));
    assert_eq!(
        run(&["serve", "--call-timeout-ms", "600001"]),
        ExitCode::from(2)
    );
    assert_eq!(run(&["serve", "--root", "/no/such/dir"]), ExitCode::from(2));
    assert_eq!(run(&["serve", "--key-id", "k"]), ExitCode::from(2));
    assert_eq!(
        run(&["serve", "--signing-key", "/no/such/key"]),
        ExitCode::from(2)
    );
    assert_eq!(run(&["--help"]), ExitCode::SUCCESS);
}

#[test]
fn an_invalid_contract_is_a_usage_error() {
    // No comparator at all: Decision Gate's rules refuse it.
    let bad = Provider::new("demo", "Bad.").check(
        Check::new("c", "A check.", |_: NoParams, _: &CheckContext| Ok(1u64)).comparators([]),
    );
    let code = Runner::new(bad).run_from(["demo", "contract"], |_: NoArgs, provider| {
        Ok::<_, std::convert::Infallible>(provider)
    });
    assert_eq!(code, ExitCode::from(2));
}

/// `--call-timeout-ms` is parsed into `ServeArgs::call_timeout_ms`
/// (absent: no deadline); zero is refused with a message saying why.
#[test]
fn call_timeout_ms_is_parsed_and_zero_is_refused() {
    use clap::Parser;
    #[derive(clap::Parser, Debug)]
    struct Serve {
        #[command(flatten)]
        serve: evidence_wire_tokio::cli::ServeArgs,
    }
    let parsed = Serve::try_parse_from(["serve", "--call-timeout-ms", "250"]).unwrap();
    assert_eq!(parsed.serve.call_timeout_ms, Some(250));
    let parsed = Serve::try_parse_from(["serve"]).unwrap();
    assert_eq!(parsed.serve.call_timeout_ms, None);
    let zero = Serve::try_parse_from(["serve", "--call-timeout-ms", "0"]).unwrap_err();
    assert!(zero.to_string().contains("no time at all"), "{zero}");
    let timed = provider().call_timeout(std::time::Duration::from_millis(250));
    assert_eq!(
        timed.server_config().unwrap().call_timeout,
        Some(std::time::Duration::from_millis(250))
    );
    assert_eq!(provider().server_config().unwrap().call_timeout, None);
}
