//! `ptyhub mcp`: the MCP tools of `ptyhub_server::mcp` on stdio, bridged to the local server
//! (starting one if none answers). Logs go to stderr: stdout belongs to the protocol.

use std::path::{Path, PathBuf};
use std::time::Duration;

use ptyhub_client::Client;
use ptyhub_server::mcp::PtyhubMcp;
use rmcp::ServiceExt;

/// How long `ptyhub mcp` waits for a server it started.
const SERVER_START_TIMEOUT: Duration = Duration::from_secs(10);

/// Runs the stdio MCP server until the client closes it.
pub async fn run(socket: &Path, wait_cap: Duration) -> anyhow::Result<()> {
    crate::paths::check_socket(socket)?;
    ensure_server(socket).await?;
    let service = PtyhubMcp::new(Client::unix(socket))
        .with_wait_cap(wait_cap)
        .serve(rmcp::transport::stdio())
        .await?;
    service.waiting().await?;
    Ok(())
}

/// Starts `ptyhub serve` in the background when nothing answers on the socket.
async fn ensure_server(socket: &Path) -> anyhow::Result<()> {
    if tokio::net::UnixStream::connect(socket).await.is_ok() {
        return Ok(());
    }
    let exe: PathBuf = std::env::current_exe()?;
    let mut command = std::process::Command::new(exe);
    command
        .arg("--socket")
        .arg(socket)
        .arg("serve")
        .stdin(std::process::Stdio::null())
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null());
    {
        use std::os::unix::process::CommandExt;
        command.process_group(0);
    }
    command.spawn()?;
    let deadline = tokio::time::Instant::now() + SERVER_START_TIMEOUT;
    while tokio::time::Instant::now() < deadline {
        if tokio::net::UnixStream::connect(socket).await.is_ok() {
            return Ok(());
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    anyhow::bail!(
        "no ptyhub server answers on {} and none could be started",
        socket.display()
    )
}
