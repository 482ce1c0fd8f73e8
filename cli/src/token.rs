//! `nqueens-coordinator token add|list|revoke`: per-host tokens of a run. Each host (or group of
//! hosts) gets its own; workers under one token never confirm each other's answers.
//!
//! Only one process writes a state file. With no coordinator running, `add` and `revoke` take the
//! writer's lock and write the file themselves; beside a running coordinator (which holds the
//! lock) they ask it to make the change (`nqueens_coordinator::admin`), and return once it is
//! committed and in force: a revoked token is refused from then on, its open streams included.

use anyhow::{Context, Result};
use clap::{Args, Subcommand};
use nqueens_coordinator::admin::{self, AdminOp};
use nqueens_store::credentials::{digest, new_secret};
use nqueens_store::{add_credential, check_credential_name, revoke_credential, StoreError};
use std::path::{Path, PathBuf};
use std::process::ExitCode;

#[derive(Args, Debug)]
pub struct TokenArgs {
    #[command(subcommand)]
    pub action: TokenAction,
}

#[derive(Subcommand, Debug)]
pub enum TokenAction {
    /// Make a new token named NAME for one host or group of hosts, and print it (only once:
    /// the state file keeps its digest). Works on a live run too.
    Add {
        /// 1 to 64 letters, digits, '.', '_' or '-' (e.g. the host name).
        name: String,
        #[arg(long, env = "NQ_STATE", default_value = "nqueens.db")]
        state: PathBuf,
    },
    /// List the run's tokens by name, with when they were made and revoked.
    List {
        #[arg(long, env = "NQ_STATE", default_value = "nqueens.db")]
        state: PathBuf,
    },
    /// Refuse the token named NAME from now on (on a live run: its open streams too).
    Revoke {
        name: String,
        #[arg(long, env = "NQ_STATE", default_value = "nqueens.db")]
        state: PathBuf,
    },
}

/// Asks the coordinator running on `state` to make `op`; whether it changed anything.
fn ask_coordinator(state: &Path, op: &AdminOp) -> Result<bool> {
    let reply = admin::ask(state, op, admin::REPLY_TIMEOUT)?;
    if !reply.ok {
        anyhow::bail!("the coordinator refused: {}", reply.message);
    }
    Ok(reply.changed)
}

fn add(state: &Path, name: &str) -> Result<String> {
    check_credential_name(name)?;
    match add_credential(state, name) {
        Err(StoreError::InUse { .. }) => {
            let token = new_secret();
            let digest = admin::hex_digest(&digest(&token));
            ask_coordinator(state, &AdminOp::Add { name: name.into(), digest })?;
            Ok(token)
        }
        other => Ok(other?),
    }
}

fn revoke(state: &Path, name: &str) -> Result<bool> {
    match revoke_credential(state, name) {
        Err(StoreError::InUse { .. }) => {
            ask_coordinator(state, &AdminOp::Revoke { name: name.into() })
        }
        other => Ok(other?),
    }
}

pub fn run(args: TokenArgs) -> Result<ExitCode> {
    match args.action {
        TokenAction::Add { name, state } => {
            let token = add(&state, &name)
                .with_context(|| format!("adding token {name:?} to {}", state.display()))?;
            eprintln!("token {name:?} added to {}; give it to that host as NQ_TOKEN (it is not shown again):", state.display());
            println!("{token}");
            Ok(ExitCode::SUCCESS)
        }
        TokenAction::List { state } => {
            let store = nqueens_store::Store::open_existing(&state)?;
            let rows = store.credential_rows()?;
            if rows.is_empty() {
                println!(
                    "no per-host tokens in {} (only the shared --token, if any)",
                    state.display()
                );
            }
            for row in rows {
                let when = |t: f64| format!("{:.0}", t);
                match row.revoked_unix {
                    Some(r) => println!(
                        "{}\tmade {}\trevoked {}",
                        row.name,
                        when(row.created_unix),
                        when(r)
                    ),
                    None => println!("{}\tmade {}\tin force", row.name, when(row.created_unix)),
                }
            }
            Ok(ExitCode::SUCCESS)
        }
        TokenAction::Revoke { name, state } => {
            let revoked = revoke(&state, &name)
                .with_context(|| format!("revoking token {name:?} in {}", state.display()))?;
            if revoked {
                println!("token {name:?} revoked in {}", state.display());
                Ok(ExitCode::SUCCESS)
            } else {
                eprintln!("error: no token named {name:?} in force in {}", state.display());
                Ok(ExitCode::from(1))
            }
        }
    }
}
