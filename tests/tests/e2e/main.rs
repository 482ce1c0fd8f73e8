//! The end-to-end tests, one module per subject, in one test binary (`cargo test -p nqueens-tests
//! --release -- trust::` runs one module). Shared helpers live in the `nqueens_tests` library
//! (`tests/src`): `harness` (the coordinator and worker processes a test starts, in a temporary
//! directory it owns), `cluster` (processes, ports, state-file checks), `rogue` (a hand-written
//! protocol client) and `flood` (connection floods).
//!
//! The tests run as threads of one process, so none may change process-wide state. They do not:
//! resource limits (`store_faults`, `connection_limits`, `fd_exhaustion`) are set in the child
//! between fork and exec (`cluster::limit`), never in this process; nothing sets environment
//! variables, changes directory or installs signal handlers or a tracing subscriber (the in-process
//! coordinator of `cluster_e2e` takes its shutdown as a future); ports are ephemeral; every test
//! works in its own temporary directory. `fd_exhaustion` holds about 260 sockets in this process,
//! and each test of `connection_limits` 400 at the most (its flood), below the usual soft limit
//! of 1024 descriptors; the limits those modules test are the coordinator's.

mod auth;
mod bounds;
mod cluster_e2e;
mod cluster_faults;
mod cluster_gpu;
mod cluster_protocol;
mod cluster_tls;
mod connection_limits;
mod deploy_manifests;
mod docs;
mod durability;
mod estimate_cli;
mod export;
mod export_forgery;
mod faulty_worker;
mod fd_exhaustion;
mod first_run;
mod known_counts;
mod open_checks;
mod record_run;
mod rogue_client;
mod scale;
mod shape;
mod solve_checkpoint;
mod state_integrity;
mod status_page;
mod status_views;
mod store_faults;
mod trust;
mod trust_evidence;
mod trust_forgetting;
mod trust_routes;
