//! `nqueens-coordinator token add|list|revoke`: per-host tokens of a run. Each host (or group of
//! hosts) gets its own; workers under one token never confirm each other's answers, and a
//! revoked token is refused within seconds, also by a running coordinator.

use anyhow::{Context, Result};
use clap::{Args, Subcommand};
use nqueens_store::{add_credential, revoke_credential};
use std::path::PathBuf;
use std::process::ExitCode;

#[derive(Args, Debug)]
pub struct TokenArgs {
    #[command(subcommand)]
    pub action: TokenAction,
}

#[derive(Subcommand, Debug)]
pub enum TokenAction {
    /// Make a new token named NAME for one host or group of hosts, and print it (only once:
    /// the state file keeps its digest).
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
    /// Refuse the token named NAME from now on (a running coordinator within seconds).
    Revoke {
        name: String,
        #[arg(long, env = "NQ_STATE", default_value = "nqueens.db")]
        state: PathBuf,
    },
}

pub fn run(args: TokenArgs) -> Result<ExitCode> {
    match args.action {
        TokenAction::Add { name, state } => {
            let token = add_credential(&state, &name)
                .with_context(|| format!("adding token {name:?} to {}", state.display()))?;
            eprintln!("token {name:?} added to {}; give it to that host as NQ_TOKEN (it is not shown again):", state.display());
            println!("{token}");
            Ok(ExitCode::SUCCESS)
        }
        TokenAction::List { state } => {
            let store = nqueens_coordinator::Store::open_existing(&state)?;
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
            if revoke_credential(&state, &name)? {
                println!("token {name:?} revoked in {}", state.display());
                Ok(ExitCode::SUCCESS)
            } else {
                eprintln!("error: no token named {name:?} in force in {}", state.display());
                Ok(ExitCode::from(1))
            }
        }
    }
}
