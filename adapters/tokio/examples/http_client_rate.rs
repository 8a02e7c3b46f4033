//! Queries per second of [`HttpProvider`] against a running HTTP provider:
//! one caller asking one query after another, then 64 callers at once, all
//! through one `HttpProvider` (its clones share its connections). A
//! measuring tool, not part of any test run.
//!
//! ```text
//! evidence-wire serve --http 127.0.0.1:0 --no-log &    # prints its address
//! cargo run --release -p evidence-wire-tokio --example http_client_rate -- http://127.0.0.1:PORT/rpc
//! ```
//!
//! Arguments: the URL, then optionally the seconds each row runs (default
//! 3), the number of concurrent callers (default 64) and the provider's
//! `max_connections` (default: `HttpProviderConfig`'s). Each row has a
//! 0.3 s warm-up first. Every query asks the bundled provider's `time_now`
//! and must verify; any failure is counted and printed. Output: one line
//! per row on stdout, `label calls calls/s failures`.
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use evidence_wire_tokio::prelude::*;
use evidence_wire_tokio::wire::client::ClientConfig;

const USAGE: &str = "usage: http_client_rate URL [SECONDS] [CALLERS] [MAX_CONNECTIONS]";

#[derive(Default)]
struct Counts {
    done: AtomicU64,
    failed: AtomicU64,
}

/// One caller: queries until `until`, counting answers and failures.
async fn caller(provider: HttpProvider, until: Instant, counts: Arc<Counts>) {
    let query = EvidenceQuery::new("evidence-wire", "time_now");
    let context = EvidenceContext::adhoc(TriggerTime::UnixMillis(1_710_000_000_000));
    while Instant::now() < until {
        let outcome =
            tokio::time::timeout(Duration::from_secs(10), provider.query(&query, &context)).await;
        match outcome {
            Ok(Ok(_)) => {
                counts.done.fetch_add(1, Ordering::Relaxed);
            }
            Ok(Err(error)) => {
                if counts.failed.fetch_add(1, Ordering::Relaxed) < 3 {
                    eprintln!("query failed: {error}");
                }
            }
            Err(_) => {
                if counts.failed.fetch_add(1, Ordering::Relaxed) < 3 {
                    eprintln!("query took over 10 s");
                }
            }
        }
    }
}

/// `callers` callers for `time` (after a warm-up); returns (calls, failures).
async fn row(provider: &HttpProvider, callers: usize, time: Duration) -> (u64, u64) {
    for (length, counted) in [(Duration::from_millis(300), false), (time, true)] {
        let counts = Arc::new(Counts::default());
        let until = Instant::now() + length;
        let tasks: Vec<_> = (0..callers)
            .map(|_| tokio::spawn(caller(provider.clone(), until, Arc::clone(&counts))))
            .collect();
        for task in tasks {
            let _ = task.await;
        }
        if counted {
            return (
                counts.done.load(Ordering::Relaxed),
                counts.failed.load(Ordering::Relaxed),
            );
        }
    }
    (0, 0)
}

#[tokio::main(flavor = "multi_thread", worker_threads = 2)]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let mut args = std::env::args().skip(1);
    let url = args.next().ok_or(USAGE)?;
    let seconds: f64 = args.next().map_or(Ok(3.0), |text| text.parse())?;
    let callers: usize = args.next().map_or(Ok(64), |text| text.parse())?;
    let max_connections: Option<usize> = args.next().map(|text| text.parse()).transpose()?;
    let time = Duration::from_secs_f64(seconds);

    let mut client = ClientConfig::default();
    client.request_timeout_ms = 10_000;
    let mut config = HttpProviderConfig::new(url)
        .with_insecure_http(true)
        .with_client(client);
    if let Some(limit) = max_connections {
        config = config.with_max_connections(limit);
    }
    let provider = HttpProvider::new(config)?;
    for (label, count) in [("sequential", 1), ("concurrent", callers)] {
        let (calls, failures) = row(&provider, count, time).await;
        let rate = calls as f64 / time.as_secs_f64();
        println!("{label}({count}) {calls} calls {rate:.0} calls/s {failures} failures");
    }
    Ok(())
}
