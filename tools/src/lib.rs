//! What the benchmark tools (`nqueens-loadgen`, `nqueens-status-bench`) share: the coordinator
//! binary they start, and a gRPC channel that waits for it to come up.

#![allow(missing_docs)] // helpers of the tool binaries, not a library anyone builds on

pub mod coordinator_proc;
pub mod fleet;
pub mod probe;

use anyhow::{bail, Result};
use std::path::PathBuf;
use std::time::{Duration, Instant};

/// The `nqueens-coordinator` binary beside the running tool (both in `target/<profile>/`).
pub fn coordinator_binary() -> Result<PathBuf> {
    Ok(std::env::current_exe()?.with_file_name("nqueens-coordinator"))
}

/// A channel to the coordinator at `url`, retrying every 100 ms for up to `patience` while it
/// starts (opening a large state file can take minutes).
pub async fn connect(url: &str, patience: Duration) -> Result<tonic::transport::Channel> {
    let started = Instant::now();
    loop {
        match nqueens_proto::connect_channel(url, None).await {
            Ok(c) => return Ok(c),
            Err(_) if started.elapsed() < patience => {
                tokio::time::sleep(Duration::from_millis(100)).await
            }
            Err(e) => bail!("coordinator did not come up: {e}"),
        }
    }
}
