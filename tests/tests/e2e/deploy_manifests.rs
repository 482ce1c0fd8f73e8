//! The deployment files under `deploy/` against the real binaries: every flag and `NQ_` environment
//! variable they use must be one the binaries accept (read from their `--help`), and the names,
//! ports and mounts must line up between the pieces (compose services, Kubernetes Services,
//! StatefulSet, Deployment, Secret; Dockerfiles; the Slurm script; the systemd units and their env
//! files).
//!
//! This module holds what the checks share: the binaries' `--help` parsed, the `NQ_` variables
//! the files rely on (one list each, [`SERVE_ENVS`] and [`WORKER_ENVS`]) and the YAML helpers. The
//! checks, one module per kind of deployment: `deploy_manifests/compose.rs` (docker-compose.yml and
//! the Dockerfiles), `deploy_manifests/kubernetes.rs` (the Kubernetes manifests),
//! `deploy_manifests/hosts.rs` (the Slurm script and the systemd units with their env files).
//!
//! Needs the release binaries: `cargo build --release --workspace` (or `cargo test --workspace
//! --release`).

use serde_yaml::Value;
use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};
use std::process::Command;

/// The coordinator's `NQ_` variables the deployment files rely on: `serve` must take each, and
/// the compose file sets each (the one list to change when one is renamed).
const SERVE_ENVS: [&str; 6] =
    ["NQ_N", "NQ_STATE", GRPC_LISTEN_ENV, HTTP_LISTEN_ENV, "NQ_TOKEN", "NQ_LEASE_SECONDS"];
/// The coordinator's gRPC listen address.
const GRPC_LISTEN_ENV: &str = "NQ_LISTEN";
/// The coordinator's HTTP listen address (status page and `/metrics`).
const HTTP_LISTEN_ENV: &str = "NQ_HTTP_LISTEN";
/// The worker's `NQ_` variables the deployment files rely on: the worker must take each.
const WORKER_ENVS: [&str; 3] = ["NQ_CONNECT", "NQ_TOKEN", "NQ_THREADS"];

mod compose;
mod hosts;
mod kubernetes;

fn deploy_dir() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../deploy")
}

fn read(rel: &str) -> String {
    let path = deploy_dir().join(rel);
    std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("cannot read {}: {e}", path.display()))
}

/// What one command line of a binary accepts: its long flags and its `NQ_` environment variables.
#[derive(Debug, Default)]
struct Accepts {
    flags: BTreeSet<String>,
    envs: BTreeSet<String>,
}

/// `BIN ARGS... --help`, parsed. The environment is cleared of `NQ_` variables so that clap shows
/// the defaults, not values that happen to be set where the test runs.
fn accepts(bin: &str, args: &[&str]) -> Accepts {
    let exe = nqueens_tests::binary(bin);
    let mut cmd = Command::new(&exe);
    cmd.args(args).arg("--help");
    for (k, _) in std::env::vars_os() {
        if k.to_string_lossy().starts_with("NQ_") {
            cmd.env_remove(k);
        }
    }
    let out = cmd.output().unwrap_or_else(|e| panic!("cannot run {}: {e}", exe.display()));
    let text = String::from_utf8_lossy(&out.stdout).into_owned();
    assert!(
        out.status.success(),
        "`{bin} {} --help` failed: {}",
        args.join(" "),
        String::from_utf8_lossy(&out.stderr)
    );
    let mut a = Accepts::default();
    for word in text.split(|c: char| {
        c.is_whitespace() || c == ',' || c == '[' || c == ']' || c == '=' || c == '<'
    }) {
        if let Some(name) = word.strip_prefix("--") {
            if !name.is_empty() && name.chars().all(|c| c.is_ascii_alphanumeric() || c == '-') {
                a.flags.insert(format!("--{name}"));
            }
        }
    }
    let mut rest = text.as_str();
    while let Some(i) = rest.find("env: ") {
        rest = &rest[i + 5..];
        let name: String =
            rest.chars().take_while(|c| c.is_ascii_alphanumeric() || *c == '_').collect();
        if name.starts_with("NQ_") {
            a.envs.insert(name);
        }
    }
    a
}

fn coordinator_serve() -> Accepts {
    let a = accepts("nqueens-coordinator", &["serve"]);
    for env in SERVE_ENVS {
        assert!(
            a.envs.contains(env),
            "`nqueens-coordinator serve` does not take {env}; it takes {:?}",
            a.envs
        );
    }
    a
}

fn worker() -> Accepts {
    let a = accepts("nqueens-worker", &[]);
    for env in WORKER_ENVS {
        assert!(a.envs.contains(env), "nqueens-worker does not take {env}; it takes {:?}", a.envs);
    }
    a
}

/// `NQ_` names among `keys` that `who` does not accept.
fn unknown_envs<'a>(keys: impl IntoIterator<Item = &'a str>, who: &Accepts) -> Vec<String> {
    keys.into_iter()
        .filter(|k| k.starts_with("NQ_") && !who.envs.contains(*k))
        .map(str::to_owned)
        .collect()
}

fn port_of(addr: &str) -> u16 {
    let port = addr.rsplit(':').next().unwrap_or_default().trim_end_matches('/');
    port.parse().unwrap_or_else(|_| panic!("no port in address {addr:?}"))
}

/// host and port of `http://host:port`.
fn host_port(url: &str) -> (String, u16) {
    let rest = url.split_once("://").map(|(_, r)| r).unwrap_or(url).trim_end_matches('/');
    let (host, port) = rest.rsplit_once(':').unwrap_or_else(|| panic!("no port in {url:?}"));
    (host.to_owned(), port.parse().unwrap_or_else(|_| panic!("bad port in {url:?}")))
}

fn s<'a>(v: &'a Value, path: &[&str]) -> &'a Value {
    let mut cur = v;
    for key in path {
        cur = match cur.get(*key) {
            Some(next) => next,
            None => panic!(
                "missing {} in {}",
                path.join("."),
                serde_yaml::to_string(v).unwrap_or_default()
            ),
        };
    }
    cur
}

fn str_of(v: &Value) -> String {
    match v {
        Value::String(s) => s.clone(),
        Value::Number(n) => n.to_string(),
        Value::Bool(b) => b.to_string(),
        // compose: `KEY:` with no value passes KEY through from the caller's environment.
        Value::Null => String::new(),
        other => panic!("not a scalar: {other:?}"),
    }
}

fn str_list(v: &Value) -> Vec<String> {
    v.as_sequence().unwrap_or_else(|| panic!("not a list: {v:?}")).iter().map(str_of).collect()
}

/// The default of a `${VAR:-default}` compose substitution, or the string itself.
fn compose_default(v: &str) -> String {
    match (v.find("${"), v.find(":-")) {
        (Some(a), Some(b)) if b > a => {
            let end = v[b..].find('}').map(|e| b + e).expect("closing brace");
            format!("{}{}{}", &v[..a], &v[b + 2..end], &v[end + 1..])
        }
        _ => v.to_owned(),
    }
}

/// A `--FLAG` subcommand invocation (`args`) must use flags and a subcommand that exist.
fn check_invocation(bin: &str, args: &[String], context: &str) {
    let (sub, flags): (Vec<&String>, Vec<&String>) = args.iter().partition(|a| !a.starts_with('-'));
    let sub_name = sub.first().map(|s| s.as_str()).unwrap_or_default();
    let help = accepts(bin, &[sub_name]);
    for f in flags {
        let name = f.split('=').next().unwrap();
        assert!(
            help.flags.contains(name),
            "{context}: `{bin} {sub_name}` has no flag {name}; it has {:?}",
            help.flags
        );
    }
}
