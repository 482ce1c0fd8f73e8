//! Shared helpers for the end-to-end tests: the reference counts and the project's binaries.

#![allow(missing_docs)] // test helpers, not a library anyone builds on

use std::collections::BTreeMap;
use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::OnceLock;

/// One row of `reference/known-counts.tsv`. Classes are `None` where the file leaves them blank.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Known {
    pub n: u8,
    pub total: u128,
    pub unique: u128,
    pub count2: Option<u128>,
    pub count4: Option<u128>,
    pub count8: Option<u128>,
}

/// Path of the reference table: `$NQ_KNOWN_COUNTS`, or the repository's own
/// `reference/known-counts.tsv` (the published values, OEIS A000170, A002562 and A033148).
pub fn known_counts_path() -> PathBuf {
    std::env::var_os("NQ_KNOWN_COUNTS").map(PathBuf::from).unwrap_or_else(|| {
        PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../reference/known-counts.tsv")
    })
}

/// The reference table, keyed by N. Panics with a clear message if the file is missing or
/// malformed.
pub fn known_counts() -> BTreeMap<u8, Known> {
    let path = known_counts_path();
    let text = std::fs::read_to_string(&path)
        .unwrap_or_else(|e| panic!("cannot read reference counts {}: {e}", path.display()));
    let mut table = BTreeMap::new();
    for line in text
        .lines()
        .filter(|l| !l.starts_with('#') && !l.starts_with("n\t") && !l.trim().is_empty())
    {
        let f: Vec<&str> = line.split('\t').collect();
        assert_eq!(f.len(), 8, "malformed line in {}: {line}", path.display());
        let num =
            |s: &str| s.parse::<u128>().unwrap_or_else(|_| panic!("bad number {s:?} in {line}"));
        let class = |s: &str| (s != "-").then(|| num(s));
        let n = num(f[0]) as u8;
        table.insert(
            n,
            Known {
                n,
                total: num(f[1]),
                unique: num(f[2]),
                count2: class(f[5]),
                count4: class(f[6]),
                count8: class(f[7]),
            },
        );
    }
    assert!(table.len() >= 17, "reference table {} has only {} rows", path.display(), table.len());
    table
}

/// Path of one of the workspace's binaries (`nqueens-coordinator`, `nqueens-worker`, the tools'
/// `nqueens-loadgen`), fresh: the
/// first call in a test process builds both (see [`build_binaries`]) and waits for the build, so a
/// test never runs a missing or stale binary, whichever package `cargo test` was asked for.
pub fn binary(name: &str) -> PathBuf {
    static BUILT: OnceLock<Result<PathBuf, String>> = OnceLock::new();
    let dir = BUILT.get_or_init(build_binaries).as_ref().unwrap_or_else(|e| panic!("{e}"));
    let path = dir.join(name);
    assert!(path.exists(), "{} is missing after the build", path.display());
    path
}

/// Runs `cargo build` for the coordinator's (package `nqueens-cli`), the worker's and the tools'
/// binaries with the profile and into the target directory of the running test executable
/// (`<target>/<profile>/deps/<test>-<hash>`), and returns the directory that holds them
/// (`<target>/<profile>`).
///
/// `cargo test -p nqueens-tests` builds no other package's binaries, so the tests build them
/// themselves. The worker gets the `fault-injection` feature, as `cargo test --workspace` gives it
/// (this package's dev-dependency turns it on for the whole build): the two commands then make the
/// same binaries and do not rebuild each other's. Cargo releases its lock on the target directory
/// before it runs the tests, so this nested build does not wait for the outer one.
pub fn build_binaries() -> Result<PathBuf, String> {
    let exe = std::env::current_exe().map_err(|e| format!("test executable path: {e}"))?;
    let profile_dir = exe
        .parent()
        .and_then(Path::parent)
        .ok_or_else(|| format!("{} is not in <target>/<profile>/deps", exe.display()))?;
    let target_dir = profile_dir.parent().ok_or("no target directory")?;
    // The directory is named after the profile, except the built-in ones: `cargo test` builds with
    // the `test` profile into `debug/`, `cargo test --release` with `release` into `release/`.
    let profile = match profile_dir.file_name().and_then(|f| f.to_str()) {
        Some("debug") => "test",
        Some(other) => other,
        None => return Err(format!("no profile in {}", profile_dir.display())),
    };
    // `cargo test` sets CARGO for the tests it runs; a test executable run by hand uses PATH's.
    let cargo = std::env::var_os("CARGO").unwrap_or_else(|| "cargo".into());
    let mut stderr = std::io::stderr();
    // Written to stderr itself, not through eprintln!, which the test harness captures.
    let _ = writeln!(
        stderr,
        "nqueens-tests: cargo build --profile {profile} -p nqueens-cli -p nqueens-worker \
         -p nqueens-tools (the binaries the tests run) into {}",
        target_dir.display()
    );
    let mut build = Command::new(&cargo);
    // Not the variables cargo sets for this test's run (CARGO_MANIFEST_DIR, CARGO_PKG_NAME, ...):
    // build scripts watch some of them (ring: CARGO_MANIFEST_DIR), and inherited values would make
    // this build and the next plain `cargo` command rebuild each other's dependencies every time.
    for (key, _) in std::env::vars_os() {
        let key_text = key.to_string_lossy();
        if ["CARGO_MANIFEST_", "CARGO_PKG_", "CARGO_CRATE_", "CARGO_BIN_", "CARGO_PRIMARY_PACKAGE"]
            .iter()
            .chain(&["CARGO_TARGET_TMPDIR", "CARGO_RUSTC_CURRENT_DIR"])
            .any(|p| key_text.starts_with(p))
        {
            build.env_remove(&key);
        }
    }
    let status = build
        .current_dir(env!("CARGO_MANIFEST_DIR"))
        .args(["build", "--profile", profile, "--target-dir"])
        .arg(target_dir)
        .args(["-p", "nqueens-cli", "-p", "nqueens-worker", "-p", "nqueens-tools", "--bins"])
        .args(["--features", "nqueens-worker/fault-injection"])
        .stdout(Stdio::null())
        .status()
        .map_err(|e| format!("cannot run {}: {e}", Path::new(&cargo).display()))?;
    if !status.success() {
        return Err(format!("building the binaries the tests run failed: {status}"));
    }
    Ok(profile_dir.to_owned())
}

pub mod cluster;
pub mod flood;
pub mod harness;
pub mod rogue;
