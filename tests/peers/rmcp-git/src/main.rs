//! A `git` MCP server with two tools, served on stdio (rmcp): the same
//! provider as adapters/tokio/examples/git_provider.rs, written the way
//! rmcp's own examples write tools (`#[tool_router]`, `Parameters<T>` with a
//! derived schema).
use rmcp::handler::server::{router::tool::ToolRouter, wrapper::Parameters};
use rmcp::model::{ErrorData, ServerCapabilities, ServerConfig};
use rmcp::{ServerHandler, ServiceExt, schemars, tool, tool_handler, tool_router};

#[derive(serde::Deserialize, schemars::JsonSchema)]
struct Repo {
    /// The repository's working tree.
    path: String,
}

fn git(args: &[&str]) -> Result<String, ErrorData> {
    let run = std::process::Command::new("git").args(args).output();
    let out = run.map_err(|error| ErrorData::internal_error(error.to_string(), None))?;
    let text = |bytes: &[u8]| String::from_utf8_lossy(bytes).trim().to_owned();
    match out.status.success() {
        true => Ok(text(&out.stdout)),
        false => Err(ErrorData::internal_error(text(&out.stderr), None)),
    }
}

#[derive(Clone)]
struct Git {
    tool_router: ToolRouter<Self>,
}

#[tool_router]
impl Git {
    #[tool(description = "The commit at HEAD.")]
    fn head_commit(&self, Parameters(repo): Parameters<Repo>) -> Result<String, ErrorData> {
        git(&["-C", &repo.path, "rev-parse", "HEAD"])
    }

    #[tool(description = "Nothing changed or untracked.")]
    fn is_clean(&self, Parameters(repo): Parameters<Repo>) -> Result<String, ErrorData> {
        Ok(git(&["-C", &repo.path, "status", "-s"])?
            .is_empty()
            .to_string())
    }
}

#[tool_handler(router = self.tool_router)]
impl ServerHandler for Git {
    fn get_info(&self) -> ServerConfig {
        ServerConfig::new(ServerCapabilities::builder().enable_tools().build())
    }
}

#[tokio::main(flavor = "current_thread")]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let git = Git {
        tool_router: Git::tool_router(),
    };
    git.serve(rmcp::transport::stdio()).await?.waiting().await?;
    Ok(())
}
