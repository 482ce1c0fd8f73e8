//! Step one of `serve`: which run, a new one from `--n` or the one in the state file, opened once
//! ([`Store::open_for_serve`]: one lock, one connection, one whole-file check) and checked
//! against the settings before anything is written to it.

use super::{ServeConfig, ServeError};
use crate::grpc::auth::Credentials;
use nqueens_core::{job_list, JobList, SplitParams};
use nqueens_proto as pb;
use nqueens_store::{RunMeta, RunPolicy, ServeOpen, Store, StoreError};
use std::net::SocketAddr;
use std::sync::Arc;

/// A run opened by [`open_run`]: its store, its jobs, its id and who may call.
pub(super) struct OpenedRun {
    pub(super) store: Store,
    pub(super) jobs: Vec<nqueens_core::Job>,
    pub(super) run: pb::RunId,
    pub(super) credentials: Arc<Credentials>,
}

/// Opens the run of `config.state`. A missing or empty (0-byte) file holds no run and becomes a
/// new one, as with `solve --state`; anything else must be a state file of ours whose run fits
/// the settings, and is refused, left exactly as it was, otherwise. `grpc`, the gRPC port's
/// address: off loopback it needs a token (the shared one, or per-host ones in the state file).
pub(super) fn open_run(
    config: &ServeConfig,
    grpc: Option<SocketAddr>,
) -> Result<OpenedRun, ServeError> {
    let (store, list) = match Store::open_for_serve(&config.state)? {
        ServeOpen::New(new) => {
            check_grpc_listen(config, grpc, false)?;
            let n = config.n.ok_or_else(|| ServeError::NoBoardSize(config.state.clone()))?;
            let list = split(n, config.target_jobs)?;
            let policy = RunPolicy {
                verify_fraction: config.verify_fraction,
                replication: config.replication.unwrap_or(1),
            };
            (new.create(&list, pb::PROTOCOL_MAJOR, policy)?, list)
        }
        ServeOpen::Resumed(stored) => {
            // Per-host tokens in the state file (`token add`) stand in for the shared one.
            let per_host = stored.active_credentials().is_ok_and(|c| !c.is_empty());
            check_grpc_listen(config, grpc, per_host)?;
            check_settings(config, stored.meta())?;
            let list = split(stored.meta().n.into(), stored.meta().target_jobs)?;
            (stored.resume(&list, pb::PROTOCOL_MAJOR)?, list)
        }
    };
    let run = pb::RunId { n: list.n.into(), fingerprint: store.meta().fingerprint.clone() };
    // The credentials in force, read before any call can be served: a run with (or that had)
    // per-host tokens never takes a call without one, not even in its first milliseconds.
    let credentials = Arc::new(Credentials::new(
        config.token.as_deref(),
        store.active_credentials()?,
        store.had_credentials()?,
    ));
    Ok(OpenedRun { store, jobs: list.jobs, run, credentials })
}

/// The job list of board `n` split for `target_jobs`.
fn split(n: u32, target_jobs: Option<u64>) -> Result<JobList, ServeError> {
    Ok(job_list(n, &SplitParams { target_jobs }).map_err(StoreError::from)?)
}

/// No open gRPC port off loopback without a token, unless the run holds per-host ones.
fn check_grpc_listen(
    config: &ServeConfig,
    grpc: Option<SocketAddr>,
    per_host: bool,
) -> Result<(), ServeError> {
    match grpc {
        Some(addr) if !per_host => Ok(config.validate_listen(addr)?),
        _ => Ok(()),
    }
}

/// The settings given for a stored run must be its own: its N, its split and its replication
/// (each fixed when the run was made; left out, they take the stored ones).
fn check_settings(config: &ServeConfig, stored: &RunMeta) -> Result<(), ServeError> {
    if let Some(given) = config.n.filter(|&n| n != u32::from(stored.n)) {
        return Err(ServeError::OtherN { given, stored: stored.n });
    }
    if config.target_jobs.is_some() && config.target_jobs != stored.target_jobs {
        return Err(ServeError::OtherSplit {
            given: config.target_jobs,
            stored: stored.target_jobs,
        });
    }
    if let Some(given) = config.replication.filter(|&r| r != stored.replication) {
        return Err(ServeError::OtherReplication { given, stored: stored.replication });
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use nqueens_store::connections_opened_here;
    use std::path::Path;

    fn config(state: &Path, n: Option<u32>) -> ServeConfig {
        ServeConfig { n, state: state.to_owned(), ..ServeConfig::default() }
    }

    const LOOPBACK: Option<SocketAddr> =
        Some(SocketAddr::new(std::net::IpAddr::V4(std::net::Ipv4Addr::LOCALHOST), 7447));

    /// `open_run` on `config`, and how many connections to the state file it opened.
    fn opens(config: &ServeConfig) -> (Result<OpenedRun, ServeError>, u64) {
        let before = connections_opened_here();
        let opened = open_run(config, LOOPBACK);
        (opened, connections_opened_here() - before)
    }

    /// A new run and the same run resumed: each opens its state file once.
    #[test]
    fn serve_opens_its_state_file_once_whether_the_run_is_new_or_resumed() {
        let dir = tempfile::tempdir().unwrap();
        let state = dir.path().join("run.db");
        let (new, count) = opens(&config(&state, Some(9)));
        let new = new.unwrap();
        assert_eq!(count, 1, "a new run");
        let fingerprint = new.run.fingerprint.clone();
        drop(new);
        let (resumed, count) = opens(&config(&state, None));
        let resumed = resumed.unwrap();
        assert_eq!(count, 1, "a resumed run");
        assert_eq!((resumed.run.n, resumed.run.fingerprint), (9, fingerprint));
        // An empty file is a new run too.
        let empty = dir.path().join("empty.db");
        std::fs::write(&empty, b"").unwrap();
        let (new, count) = opens(&config(&empty, Some(8)));
        assert_eq!((new.unwrap().run.n, count), (8, 1), "an empty file");
    }

    /// Settings that do not fit the stored run are refused, each with its own error, after the
    /// one open, and the refusal leaves the file as it was and no lock file behind.
    #[test]
    fn settings_that_do_not_fit_the_stored_run_are_refused() {
        let dir = tempfile::tempdir().unwrap();
        let state = dir.path().join("run.db");
        drop(open_run(&config(&state, Some(9)), LOOPBACK).unwrap());
        std::fs::remove_file(dir.path().join("run.db.lock")).unwrap();
        let before = std::fs::read(&state).unwrap();
        let refused = |config: ServeConfig| {
            let (opened, count) = opens(&config);
            assert_eq!(count, 1);
            assert!(!dir.path().join("run.db.lock").exists(), "a lock file left behind");
            assert_eq!(std::fs::read(&state).unwrap(), before, "the refused file changed");
            opened.err().expect("refused")
        };
        let other_n = refused(config(&state, Some(10)));
        assert!(matches!(other_n, ServeError::OtherN { given: 10, stored: 9 }), "{other_n}");
        let split = refused(ServeConfig { target_jobs: Some(3), ..config(&state, None) });
        assert!(matches!(split, ServeError::OtherSplit { given: Some(3), stored: None }));
        let replication = refused(ServeConfig { replication: Some(2), ..config(&state, None) });
        assert!(matches!(replication, ServeError::OtherReplication { given: 2, stored: 1 }));
        let everywhere = Some(SocketAddr::from(([0, 0, 0, 0], 7447)));
        let no_token = open_run(&config(&state, None), everywhere).err().unwrap();
        assert!(matches!(no_token, ServeError::Config(_)), "{no_token}");
    }

    /// A new run without `--n`, or off loopback without a token, is refused before its state
    /// file is made: nothing is left in the folder.
    #[test]
    fn a_new_run_refused_leaves_nothing_behind() {
        let dir = tempfile::tempdir().unwrap();
        let state = dir.path().join("run.db");
        let no_n = open_run(&config(&state, None), LOOPBACK).err().unwrap();
        assert!(matches!(no_n, ServeError::NoBoardSize(_)), "{no_n}");
        let everywhere = Some(SocketAddr::from(([0, 0, 0, 0], 7447)));
        let no_token = open_run(&config(&state, Some(8)), everywhere).err().unwrap();
        assert!(matches!(no_token, ServeError::Config(_)), "{no_token}");
        assert_eq!(std::fs::read_dir(dir.path()).unwrap().count(), 0, "files left behind");
    }

    /// Per-host tokens in the state file stand in for the shared one off loopback.
    #[test]
    fn per_host_tokens_in_the_state_file_let_a_run_serve_off_loopback() {
        let dir = tempfile::tempdir().unwrap();
        let state = dir.path().join("run.db");
        drop(open_run(&config(&state, Some(8)), LOOPBACK).unwrap());
        nqueens_store::add_credential(&state, "host-a").unwrap();
        let everywhere = Some(SocketAddr::from(([0, 0, 0, 0], 7447)));
        let opened = open_run(&config(&state, None), everywhere).unwrap();
        assert_eq!(opened.run.n, 8);
    }
}
