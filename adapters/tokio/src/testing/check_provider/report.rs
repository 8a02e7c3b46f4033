//! The report of `check-provider`: one line per check, each `pass`,
//! `warn` or `fail` with its reason on one line, printed as a table or
//! (with `--json`) as one JSON document carrying each line's evidence.
//!
//! Limits: a reason is one line (newlines become spaces, terminal controls
//! are escaped: reasons quote what the provider wrote) of at most
//! [`MAX_REASON_CHARS`] characters; evidence is whatever the battery
//! attached (it bounds what it keeps).

use std::fmt::Write as _;
use std::time::Duration;

use serde_json::{Value, json};

/// Longest reason printed (characters); the rest is cut with `…`.
pub const MAX_REASON_CHARS: usize = 600;

/// The verdict of one line.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub enum Status {
    /// The provider does what Decision Gate (and the protocol) needs.
    Pass,
    /// True of the provider and worth knowing, but not a failure: a
    /// capability it lacks, or something that could not be checked here.
    Warn,
    /// The provider breaks the protocol or its own contract.
    Fail,
}

impl Status {
    /// `pass`, `warn` or `fail`.
    pub fn as_str(self) -> &'static str {
        match self {
            Status::Pass => "pass",
            Status::Warn => "warn",
            Status::Fail => "fail",
        }
    }
}

/// One line of the report.
#[derive(Clone, Debug)]
pub struct Line {
    /// The check's stable name, e.g. `transport.first_message`.
    pub check: String,
    /// Its verdict.
    pub status: Status,
    /// Why, in one line.
    pub reason: String,
    /// What was sent and seen (`--json` only; `null` when nothing to add).
    pub evidence: Value,
}

impl Line {
    /// The line as JSON: check, status, reason, and evidence when there is any.
    pub fn json(&self) -> Value {
        let mut line = json!({
            "check": self.check,
            "status": self.status.as_str(),
            "reason": self.reason,
        });
        if let (false, Some(map)) = (self.evidence.is_null(), line.as_object_mut()) {
            map.insert("evidence".to_owned(), self.evidence.clone());
        }
        line
    }
}

/// The whole report.
#[derive(Debug, Default)]
pub struct Report {
    /// What was checked (the command or URL).
    pub target: String,
    /// The lines, in the order the battery ran.
    pub lines: Vec<Line>,
    /// How long the battery took.
    pub elapsed: Duration,
}

impl Report {
    /// Adds a line.
    pub fn add(
        &mut self,
        check: impl Into<String>,
        status: Status,
        reason: impl Into<String>,
        evidence: Value,
    ) {
        self.lines.push(Line {
            check: check.into(),
            status,
            reason: one_line(&reason.into()),
            evidence,
        });
    }

    /// How many lines have `status`.
    pub fn count(&self, status: Status) -> usize {
        self.lines
            .iter()
            .filter(|line| line.status == status)
            .count()
    }

    /// True when any line failed.
    pub fn failed(&self) -> bool {
        self.count(Status::Fail) > 0
    }

    /// True when no line failed.
    pub fn passed(&self) -> bool {
        !self.failed()
    }

    /// The lines that failed.
    pub fn failures(&self) -> impl Iterator<Item = &Line> {
        self.lines.iter().filter(|line| line.status == Status::Fail)
    }

    /// The lines graded `warn`: true of the provider and worth knowing,
    /// and in the CLI not a failure. One of them is a contract example
    /// whose answer differs from the example's for an `external` check
    /// (its value may change between runs); in a provider's own test,
    /// where the fixture is fixed, that is a broken check:
    /// [`Report::assert_clean`] refuses it.
    pub fn warnings(&self) -> impl Iterator<Item = &Line> {
        self.lines.iter().filter(|line| line.status == Status::Warn)
    }

    /// The line named `check` (the first, for a name that repeats, such
    /// as `contract.rules`).
    pub fn line(&self, check: &str) -> Option<&Line> {
        self.lines.iter().find(|line| line.check == check)
    }

    /// Panics, printing every failing line with its reason (and the whole
    /// table), when any line failed; `warn` lines pass, as in the CLI. A
    /// provider's own `cargo test` usually wants [`Report::assert_clean`],
    /// which refuses warnings too.
    ///
    /// ```no_run
    /// # fn provider() -> evidence_wire_tokio::Provider { unimplemented!() }
    /// use evidence_wire_tokio::testing::CheckProvider;
    ///
    /// CheckProvider::service(provider()).unwrap().run().assert_passed();
    /// ```
    #[track_caller]
    #[allow(clippy::panic)] // an assertion for tests: panicking is its job
    pub fn assert_passed(&self) {
        if !self.failed() {
            return;
        }
        let failures: Vec<String> = self
            .failures()
            .map(|line| format!("  {}: {}", line.check, line.reason))
            .collect();
        panic!(
            "check-provider found {} failing line{} for {}:\n{}\n\n{}",
            failures.len(),
            if failures.len() == 1 { "" } else { "s" },
            self.target,
            failures.join("\n"),
            self.table()
        );
    }

    /// Panics, printing every failing and every warning line with its
    /// reason (and the whole table), when any line is not `pass`: the
    /// assertion for a provider's own `cargo test`, whose fixtures are
    /// fixed, so that a warning (such as an `external` check answering
    /// other than its contract's example) is not passed over.
    /// [`Report::assert_passed`] lets warnings through, as the CLI does.
    ///
    /// ```no_run
    /// # fn provider() -> evidence_wire_tokio::Provider { unimplemented!() }
    /// use evidence_wire_tokio::testing::CheckProvider;
    ///
    /// CheckProvider::service(provider()).unwrap().run().assert_clean();
    /// ```
    #[track_caller]
    #[allow(clippy::panic)] // an assertion for tests: panicking is its job
    pub fn assert_clean(&self) {
        let unclean: Vec<String> = self
            .lines
            .iter()
            .filter(|line| line.status != Status::Pass)
            .map(|line| format!("  {} {}: {}", line.status.as_str(), line.check, line.reason))
            .collect();
        if unclean.is_empty() {
            return;
        }
        panic!(
            "check-provider found {} failing or warning line{} for {} (assert_clean accepts only pass):\n{}\n\n{}",
            unclean.len(),
            if unclean.len() == 1 { "" } else { "s" },
            self.target,
            unclean.join("\n"),
            self.table()
        );
    }

    /// The last line of the summary: counts and the time taken.
    pub fn summary(&self) -> String {
        format!(
            "{} pass, {} warn, {} fail in {:.1} s",
            self.count(Status::Pass),
            self.count(Status::Warn),
            self.count(Status::Fail),
            self.elapsed.as_secs_f64()
        )
    }

    /// The report as a table: `STATUS  CHECK  REASON` lines, then a summary.
    pub fn table(&self) -> String {
        let width = self
            .lines
            .iter()
            .map(|line| line.check.chars().count())
            .max()
            .unwrap_or(5)
            .clamp(5, 48);
        let mut out = String::new();
        let _ = writeln!(
            out,
            "check-provider: {}",
            evidence_wire::text::printable(&self.target)
        );
        let _ = writeln!(out, "{:<7}{:<width$}  REASON", "STATUS", "CHECK");
        for line in &self.lines {
            let _ = writeln!(
                out,
                "{:<7}{:<width$}  {}",
                line.status.as_str(),
                line.check,
                line.reason
            );
        }
        let _ = writeln!(out, "summary: {}", self.summary());
        out
    }

    /// The report as JSON (for CI): target, every line with its evidence,
    /// counts, and whether it passed.
    pub fn json(&self) -> Value {
        json!({
            "target": self.target,
            "passed": !self.failed(),
            "summary": {
                "pass": self.count(Status::Pass),
                "warn": self.count(Status::Warn),
                "fail": self.count(Status::Fail),
                "elapsed_ms": u64::try_from(self.elapsed.as_millis()).unwrap_or(u64::MAX),
            },
            "checks": self.lines.iter().map(Line::json).collect::<Vec<_>>(),
        })
    }
}

/// `text` on one line (whitespace runs become one space), its terminal
/// controls escaped (a reason often quotes the provider), cut at
/// [`MAX_REASON_CHARS`].
pub fn one_line(text: &str) -> String {
    let joined = text.split_whitespace().collect::<Vec<_>>().join(" ");
    let joined = evidence_wire::text::printable(&joined).into_owned();
    if joined.chars().count() <= MAX_REASON_CHARS {
        return joined;
    }
    let mut cut: String = joined.chars().take(MAX_REASON_CHARS).collect();
    cut.push('…');
    cut
}

/// Milliseconds with one decimal.
pub fn millis(duration: Duration) -> String {
    format!("{:.1} ms", duration.as_secs_f64() * 1000.0)
}
