//! A `git` evidence provider with two checks, served on stdio (tokio).
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

#[tokio::main(flavor = "current_thread")]
async fn main() -> Result<(), ServeError> {
    let head = |repo: Repo, _: &CheckContext| git(&["-C", &repo.path, "rev-parse", "HEAD"]);
    let clean =
        |repo: Repo, _: &CheckContext| Ok(git(&["-C", &repo.path, "status", "-s"])?.is_empty());
    let head = Check::new("head_commit", "The commit at HEAD.", head);
    let clean = Check::new("is_clean", "Nothing changed or untracked.", clean);
    let provider = Provider::new("git", "Facts about a git working tree.");
    serve_stdio(provider.check(head).check(clean)).await
}
