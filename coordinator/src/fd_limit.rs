//! The process's file descriptor limit, and how many gRPC connections it leaves room for.
//!
//! Every connection takes a descriptor, and so does everything else the coordinator has open: the
//! state file (the database, its write-ahead log and shared memory, the lock file, the
//! descriptors kept for its locks, the status reader's own connection), the listeners, the
//! runtime's, the log, the HTTP port's connections. Once the table is full, `accept(2)` fails on
//! both ports (see `accept.rs`), and a SQLite file the engine must open fails too. So the gRPC
//! port holds at most the limit less [`RESERVED`]: [`RESERVED_FOR_PROCESS`] for the process and
//! [`crate::http::MAX_CONNECTIONS`] for the HTTP port, which therefore always has its slots.
//!
//! Each worker holds one connection. `serve` warns at start when the limit leaves room for fewer
//! than `--expected-workers` (default [`DEFAULT_EXPECTED_WORKERS`]); the deployment files raise
//! it (`LimitNOFILE=`, compose `ulimits`), and the binary raises its soft limit to the hard one at
//! start ([`raise_to_hard`]), as most servers do.

/// Descriptors kept for the process itself: the state file and its companions, the listeners,
/// the runtime, the log, and connections closing after being pushed out (an idle coordinator
/// with a worker holds under 25).
pub const RESERVED_FOR_PROCESS: u64 = 64;

/// Descriptors the gRPC port leaves to the rest of the process and to the HTTP port.
pub const RESERVED: u64 = RESERVED_FOR_PROCESS + crate::http::MAX_CONNECTIONS as u64;

/// The fewest connections the gRPC port holds, whatever the limit (below `RESERVED + 16`
/// descriptors the accept loop's back-off is what keeps the process alive).
pub const MIN_GRPC_CONNECTIONS: usize = 16;

/// The workers a run is expected to seat at once, unless `--expected-workers` says otherwise.
pub const DEFAULT_EXPECTED_WORKERS: usize = 10_000;

/// The process's soft limit on open descriptors (`ulimit -n`); `u64::MAX` when unlimited or
/// unknown.
pub fn soft_limit() -> u64 {
    limits().map_or(u64::MAX, |(soft, _)| soft)
}

fn limits() -> Option<(u64, u64)> {
    let mut rl = libc::rlimit { rlim_cur: 0, rlim_max: 0 };
    // SAFETY: getrlimit writes the struct it is given and nothing else.
    let rc = unsafe { libc::getrlimit(libc::RLIMIT_NOFILE, &mut rl) };
    (rc == 0).then_some((rl.rlim_cur, rl.rlim_max))
}

/// Raises the soft descriptor limit to the hard one; the limits before and after. A process-wide
/// change: the binary makes it at start, a library caller (a test) never does.
pub fn raise_to_hard() -> std::io::Result<(u64, u64)> {
    let (soft, hard) = limits().ok_or_else(std::io::Error::last_os_error)?;
    if soft >= hard {
        return Ok((soft, soft));
    }
    let rl = libc::rlimit { rlim_cur: hard, rlim_max: hard };
    // SAFETY: setrlimit reads the struct it is given and nothing else.
    if unsafe { libc::setrlimit(libc::RLIMIT_NOFILE, &rl) } != 0 {
        return Err(std::io::Error::last_os_error());
    }
    Ok((soft, hard))
}

/// The gRPC connections a descriptor limit of `limit` leaves room for.
pub fn grpc_connections(limit: u64) -> usize {
    let room = limit.saturating_sub(RESERVED);
    usize::try_from(room).unwrap_or(usize::MAX).max(MIN_GRPC_CONNECTIONS)
}

/// The descriptor limit that seats `workers` workers.
pub fn limit_for(workers: usize) -> u64 {
    workers as u64 + RESERVED
}

/// Says at start how many connections the gRPC port holds, and warns when that is fewer than
/// `expected_workers`.
pub fn report(limit: u64, max_connections: usize, expected_workers: usize) {
    if max_connections < expected_workers {
        tracing::warn!(
            descriptor_limit = limit,
            max_connections,
            expected_workers,
            needed = limit_for(expected_workers),
            "the descriptor limit (ulimit -n) leaves room for fewer gRPC connections than --expected-workers: workers beyond it are refused; raise it (LimitNOFILE= in systemd, ulimits in compose, ulimit -n) to at least `needed`"
        );
    } else {
        tracing::info!(descriptor_limit = limit, max_connections, "gRPC connections");
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_grpc_port_gets_the_limit_less_the_reserve() {
        assert_eq!(RESERVED, 128);
        assert_eq!(grpc_connections(256), 128);
        assert_eq!(grpc_connections(65_536), 65_408);
        assert_eq!(grpc_connections(limit_for(DEFAULT_EXPECTED_WORKERS)), 10_000);
        // A tiny limit still serves a few; an unlimited one does not overflow.
        assert_eq!(grpc_connections(64), MIN_GRPC_CONNECTIONS);
        assert!(grpc_connections(u64::MAX) > 1 << 40);
        assert!(soft_limit() > 0);
    }
}
