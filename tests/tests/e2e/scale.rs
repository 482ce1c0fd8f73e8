//! Scale: the load tool's fake workers (each a host on its own loopback address) against a real
//! coordinator, which is SIGKILLed and restarted mid-run.

use std::process::Command;

/// 300 fake workers over 30 addresses, N=16 in 176,553 jobs: the coordinator is SIGKILLed once
/// 30% of the jobs are acknowledged; the load tool checks that every acknowledged answer is in the
/// state file, restarts the coordinator, and fails unless all 300 are seated again within 60 s and
/// the run ends with the exact totals. gRPC `Status` (as `status --connect` asks it) lists a page
/// of 100 workers and counts all 300.
#[test]
fn a_coordinator_killed_under_300_workers_seats_them_again_and_loses_no_acknowledged_answer() {
    let loadgen = nqueens_tests::binary("nqueens-loadgen");
    let dir = tempfile::tempdir().unwrap();
    let out = Command::new(loadgen)
        .args(["--n", "16", "--workers", "300", "--addresses", "30", "--slots", "4"])
        .args(["--restart-after", "0.3", "--lease-seconds", "10", "--seat-limit", "60", "--dir"])
        .arg(dir.path())
        .output()
        .unwrap();
    let text = format!(
        "{}\n{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(out.status.success(), "{text}");
    for line in [
        "restart: SIGKILLed after",
        "; none lost",
        "restart: all 300 workers seated again",
        "totals exact: total 14772512",
        "gRPC Status listed at most 100 workers (a page), counting up to 300 in its fleet",
    ] {
        assert!(text.contains(line), "{line:?} missing in\n{text}");
    }
}
