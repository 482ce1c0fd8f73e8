//! A run's status, in three types: the [`StatusCache`] a live coordinator keeps for every status
//! reader (`cache.rs`, with the chart's samples in `history.rs`); the [`StatusView`] that every
//! renderer reads (here, made only by [`StatusView::new`]): the text `status` prints
//! (`text.rs`), the gRPC `Status` answer (`grpc/wire/status.rs`), `/metrics` (`metrics.rs`) and
//! the page's view, `PageView` (`http/view.rs`, derived from it by `PageView::new`). A view is
//! the run's [`RunSnapshot`] (the engine's latest, or one built offline from a state file) with
//! what the committed rows tell ([`RowFigures`]) and a page of its workers.

mod cache;
mod history;
mod text;

pub use cache::StatusCache;
pub use history::{RatePoint, CHART_SAMPLE_EVERY};
pub use text::shell_word;

use crate::snapshot::fleet::{Fleet, FleetIndex, WorkerQuery};
use crate::snapshot::{RunSnapshot, WorkerView};
use nqueens_core::Tally;
use nqueens_store::{Evidence, Store, StoreError};
use serde::Serialize;
use std::path::{Path, PathBuf};
use std::sync::Arc;

/// A run's status as `status` shows it and gRPC `Status` carries it, live or from a state file:
/// the run's [`RunSnapshot`], a page of its workers, the partial totals of its committed rows and
/// what the rows themselves tell (`bad_rows`, `checksums`). One JSON object (`status --json`).
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct StatusView {
    /// The run at the moment shown.
    #[serde(flatten)]
    pub run: RunSnapshot,
    /// Where this status was read: the state file's path, or the live coordinator's URL.
    pub source: String,
    /// The state file, when read from one (the commands `status` suggests name it).
    #[serde(skip)]
    pub state_file: Option<PathBuf>,
    /// Sum of weight x solutions over the committed results (128-bit: a JSON integer, exact).
    pub partial_total: u128,
    /// Sum of weight x sym180 over the committed results: solutions fixed by a 180-degree turn.
    pub partial_sym180: u128,
    /// Sum of weight x sym90 over the committed results: solutions fixed by a 90-degree turn.
    pub partial_sym90: u128,
    /// Search nodes of the committed results (not weighted).
    pub nodes: u64,
    /// What the counted answers rest on so far (the result's own once complete).
    pub evidence: Option<Evidence>,
    /// The page of workers listed, in the order of attention (`fleet` says which page).
    pub workers: Arc<[WorkerView]>,
    /// Every worker in aggregate, and which of them `workers` holds (see `snapshot/fleet.rs`).
    pub fleet: Option<Fleet>,
    /// Result rows whose checksum fails: never counted.
    pub bad_rows: u64,
    /// Whether the rows carry checksums (false for a schema 1 file not yet opened for writing).
    pub checksums: bool,
}

/// What the committed rows tell a [`StatusView`], as read from the state file (offline, or by the
/// live [`StatusCache`]) or off the wire.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct RowFigures {
    /// The weighted sums of the counted rows (`n` and `jobs` are not shown).
    pub tally: Tally,
    /// What the counted answers rest on so far.
    pub evidence: Option<Evidence>,
    /// Result rows whose checksum fails.
    pub bad_rows: u64,
    /// Whether the rows carry checksums.
    pub checksums: bool,
}

impl RowFigures {
    /// The rows of a live coordinator that could not be read yet: no sums, no evidence. Its
    /// rows carry checksums (the engine opened the file for writing, which adds them).
    pub fn live_unread() -> RowFigures {
        RowFigures { checksums: true, ..RowFigures::default() }
    }
}

/// Where a [`StatusView`] was read.
#[derive(Debug, Clone, Copy)]
pub enum Origin<'a> {
    /// The state file at this path, offline (`status --state`).
    StateFile(&'a Path),
    /// The live coordinator at this address (empty: this process, answering).
    Coordinator(&'a str),
}

impl StatusView {
    /// The one way a view is made: `run` as read at `origin`, with what the committed rows tell
    /// (`rows`), the workers in aggregate (`fleet`) and the page of them listed (`workers`).
    pub fn new(
        run: RunSnapshot,
        rows: RowFigures,
        fleet: Option<Fleet>,
        workers: Arc<[WorkerView]>,
        origin: Origin<'_>,
    ) -> StatusView {
        let (source, state_file) = match origin {
            Origin::StateFile(path) => (path.display().to_string(), Some(path.to_owned())),
            Origin::Coordinator(url) => (url.to_owned(), None),
        };
        StatusView {
            run,
            source,
            state_file,
            partial_total: rows.tally.total,
            partial_sym180: rows.tally.sym180,
            partial_sym90: rows.tally.sym90,
            nodes: rows.tally.nodes,
            evidence: rows.evidence,
            workers,
            fleet,
            bad_rows: rows.bad_rows,
            checksums: rows.checksums,
        }
    }

    /// `status --state`: reads the state file at `path`, listing the workers `query` asks for.
    pub fn read(path: &Path, query: &WorkerQuery) -> Result<StatusView, StoreError> {
        let store = Store::open_to_show(path)?;
        let (s, evidence) = store.summary_and_evidence()?;
        let run = RunSnapshot::from_store(&store, &s)?;
        let (fleet, page) = FleetIndex::new(run.all_workers.clone()).select(query);
        let rows = RowFigures {
            tally: s.tally,
            evidence: Some(evidence),
            bad_rows: s.bad_rows,
            checksums: store.has_checksums(),
        };
        Ok(StatusView::new(run, rows, Some(fleet), page.into(), Origin::StateFile(path)))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Synthetic counted rows (valid per-job counts, valid checksums) whose weighted sum passes
    /// 2^64: `status --state --json` writes every digit (the store's own test checks the sums).
    #[test]
    fn sums_past_u64_are_written_exactly() {
        use nqueens_core::{job_list, JobCounts, SplitParams};
        use nqueens_scheduler::Change;
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("wide.db");
        let list = job_list(9, &SplitParams::default()).unwrap();
        let mut store = Store::open_or_create(
            &path,
            &list,
            nqueens_proto::PROTOCOL_MAJOR,
            nqueens_store::RunPolicy::default(),
            nqueens_store::RunKind::Local,
        )
        .unwrap();
        let base = 1u64 << 61;
        // Per weight, counts that keep the symmetry identities of the weighted sums.
        let counts_of = |weight: u8, id: u64| match weight {
            8 => JobCounts { solutions: base + id, sym180: 0, sym90: 0, nodes: 1 },
            4 => JobCounts { solutions: base + 2 * id, sym180: 2, sym90: 0, nodes: 1 },
            _ => JobCounts { solutions: base + 4 * id + 8, sym180: 4, sym90: 2, nodes: 1 },
        };
        let mut total = 0u128;
        let mut changes = Vec::new();
        for job in &list.jobs {
            let counts = counts_of(job.weight, job.id.get());
            total += u128::from(job.weight) * u128::from(counts.solutions);
            changes.extend(Change::finished_on_one_answer(job.id, 1.into(), counts));
        }
        store.apply(&changes, &[]).unwrap();
        assert!(total > u128::from(u64::MAX) * 2, "the rows must add up past 2^64: {total}");
        let classes = store.final_tally(&store.tally().unwrap()).exact().unwrap().classes;
        drop(store);

        let status = StatusView::read(&path, &WorkerQuery::default()).unwrap();
        assert_eq!(status.partial_total, total);
        let json = status.json();
        assert!(json.contains(&format!("\"partial_total\":{total},")), "{json}");
        let record = status.run.progress.result.as_ref().expect("complete");
        assert_eq!((record.total, record.count8), (total, Some(classes.unwrap().count8)));
        assert!(json.contains(&format!("\"total\":{total},")), "{json}");
    }
}
