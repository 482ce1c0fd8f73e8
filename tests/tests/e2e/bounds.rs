//! Every field that comes off the wire is bounded (`nqueens_proto::bounds`; a unit test per
//! field there): here over a real socket, a registration carrying a multi-megabyte version string
//! is refused with a clear error, again and again, while the state file stays small; a version
//! under the message limit but past the field's bound, and a heartbeat naming too many leases, are
//! refused naming the field.

use nqueens_proto as pb;
use nqueens_proto::bounds::{MAX_IDS, MAX_REQUEST, MAX_VERSION};
use nqueens_proto::Reason;
use nqueens_tests::cluster::*;
use nqueens_tests::harness::RunDir;
use nqueens_tests::rogue::{claimed_self_test, connect, reason, Rogue};
use std::time::Duration;

const TOKEN: &str = "bounds-test-token";

fn register_request(version: String) -> pb::RegisterRequest {
    pb::RegisterRequest {
        name: "bounded".into(),
        host: "here".into(),
        slots: 1,
        version,
        self_test: Some(claimed_self_test()),
        device: "cpu".into(),
        ..Default::default()
    }
}

/// A strict-semver version of about `bytes` bytes: this version, then a long pre-release tag.
fn long_version(bytes: usize) -> String {
    let ours = env!("CARGO_PKG_VERSION");
    format!("{ours}-{}", "a".repeat(bytes - ours.len() - 1))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_multi_megabyte_version_is_refused_and_the_state_file_stays_small() {
    let dir = RunDir::new();
    let (state, port) = (dir.state(), dir.port());
    let _coordinator = dir.coordinator(12).token(TOKEN).start();
    let mut client = connect(port, Some(TOKEN)).await;

    // 3.9 MiB: past the whole message's limit, refused before it is decoded.
    let huge = long_version(3_900 * 1024);
    for _ in 0..20 {
        let refused = client.register(register_request(huge.clone())).await.unwrap_err();
        assert_eq!(refused.code(), tonic::Code::OutOfRange, "{refused:?}");
        assert!(refused.message().contains("too large"), "{}", refused.message());
        assert!(refused.message().contains(&MAX_REQUEST.to_string()), "{}", refused.message());
    }
    // Under the message's limit, past the field's: refused naming the field.
    let long = long_version(100 * 1024);
    for _ in 0..20 {
        let refused = client.register(register_request(long.clone())).await.unwrap_err();
        assert_eq!(refused.code(), tonic::Code::InvalidArgument, "{refused:?}");
        assert_eq!(reason(&refused), Reason::InvalidRequest);
        let expected = format!("version: {} bytes, at most {MAX_VERSION}", long.len());
        assert_eq!(refused.message(), expected);
    }
    // At the bound, a version is taken (and then judged as a version).
    let mut worker =
        Rogue::register_with(port, TOKEN, register_request(long_version(MAX_VERSION))).await;
    let refused = worker.heartbeat(vec![1; MAX_IDS + 1]).await.unwrap_err();
    assert_eq!(refused.code(), tonic::Code::InvalidArgument, "{refused:?}");
    assert!(refused.message().starts_with("lease_ids: 65537 entries"), "{}", refused.message());
    assert!(worker.heartbeat(vec![1; 8]).await.is_ok());

    tokio::time::sleep(Duration::from_millis(500)).await;
    let size = |suffix: &str| {
        let mut name = state.as_os_str().to_owned();
        name.push(suffix);
        std::fs::metadata(std::path::PathBuf::from(name)).map_or(0, |m| m.len())
    };
    let total = size("") + size("-wal");
    assert!(total < 2 << 20, "the state file grew to {total} bytes");
    let versions = query_count(
        &state,
        &format!("SELECT COUNT(*) FROM workers WHERE length(version) > {MAX_VERSION}"),
    );
    assert_eq!(versions, 0, "an oversized version was stored");
}
