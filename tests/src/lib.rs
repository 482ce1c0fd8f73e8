//! Shared helpers for the end-to-end tests: the reference counts and the project's binaries.

use std::collections::BTreeMap;
use std::path::PathBuf;

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

/// The reference table, keyed by N. Panics with a clear message if the file is missing or malformed.
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

/// Path of one of the workspace's binaries (`nqueens-coordinator`, `nqueens-worker`) in the same
/// target directory and profile as the running test. `cargo test --workspace` builds them, because
/// each binary's own package has integration tests.
pub fn binary(name: &str) -> PathBuf {
    let exe = std::env::current_exe().expect("test executable path");
    let dir = exe.parent().and_then(|deps| deps.parent()).expect("target/<profile>/deps");
    let path = dir.join(name);
    assert!(
        path.exists(),
        "{} is missing: run the tests with `cargo test --workspace --release` (which builds it) \
         or `cargo build --release --workspace` first",
        path.display()
    );
    path
}

pub mod cluster;
