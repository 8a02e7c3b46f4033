//! A `git` evidence provider with two checks: `serve` (stdio, --http), `contract`, `--help`.
use evidence_wire_tokio::prelude::*;

#[derive(serde::Deserialize, schemars::JsonSchema)]
struct Repo {
    /// The repository's working tree.
    path: String,
}

fn git(args: &[&str]) -> Result<String, CheckError> {
    let run = std::process::Command::new("git").args(args).output();
    let out = run.map_err(|error| CheckError::new("git_unavailable", error.to_string()))?;
    let text = |bytes: &[u8]| String::from_utf8_lossy(bytes).trim().to_owned();
    match out.status.success() {
        true => Ok(text(&out.stdout)),
        false => Err(CheckError::new("git_failed", text(&out.stderr))),
    }
}

fn provider() -> Provider {
    let head = |repo: Repo, _: &CheckContext| git(&["-C", &repo.path, "rev-parse", "HEAD"]);
    let clean = |r: Repo, _: &CheckContext| Ok(git(&["-C", &r.path, "status", "-s"])?.is_empty());
    Provider::new("git", "Facts about a git working tree.")
        .check(Check::new("head_commit", "The commit at HEAD.", head))
        .check(Check::new("is_clean", "Nothing changed or new.", clean))
}

fn main() -> std::process::ExitCode {
    provider().run()
}
