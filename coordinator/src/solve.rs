//! `solve`: the whole job list of one or more board sizes on this machine's cores.
use anyhow::Result;
use clap::Args;
use std::process::ExitCode;

#[derive(Args, Debug)]
pub struct SolveArgs {
    /// Board size, or an inclusive range such as 4..18.
    pub sizes: String,
}

pub fn run(_args: SolveArgs) -> Result<ExitCode> {
    anyhow::bail!("not yet")
}
