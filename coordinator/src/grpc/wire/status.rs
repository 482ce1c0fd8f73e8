//! The status call's side of the wire line: a [`StatusView`] to and from its
//! `StatusResponse`, exactly. A figure the report may not know is an `Option` there and an
//! `optional` field on the wire, so "none" crosses as absent, never as a stand-in value; what
//! comes off the wire is checked against the contract's bounds here, once.

use crate::snapshot::fleet::{Fleet, Group, WorkerQuery};
use crate::snapshot::{percent, LiveFigures, Progress, RunSnapshot, WorkerView};
use crate::status::{Origin, RowFigures, StatusView};
use nqueens_core::{Classes, Tally};
use nqueens_proto::convert::{join_wide, narrow, split_wide};
use nqueens_proto::{self as pb, CheckBounds, WireError};
use nqueens_result::{PublishedCheck, RunResult};
use nqueens_store::Evidence;

/// A run's result in its wire form (a function, not `From`: both types live in other crates).
pub(crate) fn result_to_wire(r: &RunResult) -> pb::RunResult {
    let classes = match (r.count2, r.count4, r.count8) {
        (Some(count2), Some(count4), Some(count8)) => {
            Some(pb::Classes::from(Classes { count2, count4, count8 }))
        }
        _ => None,
    };
    let ((total, total_hi), (unique, unique_hi)) = (split_wide(r.total), split_wide(r.unique));
    pb::RunResult {
        n: r.n.into(),
        total,
        unique,
        classes,
        jobs: r.jobs,
        seconds: r.seconds,
        nodes: r.nodes,
        total_hi,
        unique_hi,
        evidence: r.evidence.as_ref().map(evidence_to_wire),
        export_sha256: r.export_sha256.clone(),
    }
}

/// The wire form of what a run's total rests on.
fn evidence_to_wire(e: &Evidence) -> pb::Evidence {
    pb::Evidence {
        replication: e.replication.into(),
        jobs_independent: e.jobs_independent,
        jobs_coordinator: e.jobs_coordinator,
        jobs_one_party: e.jobs_one_party,
        rechecks_drawn: e.rechecks_drawn,
        rechecks_passed: e.rechecks_passed,
        lie_escape_probability: e.lie_escape_probability,
        wrong_jobs_bound: e.wrong_jobs_bound,
    }
}

/// What a run's total rests on, from its wire form.
fn evidence_from_wire(e: pb::Evidence) -> Result<Evidence, WireError> {
    Ok(Evidence {
        replication: narrow("evidence replication", e.replication)?,
        jobs_independent: e.jobs_independent,
        jobs_coordinator: e.jobs_coordinator,
        jobs_one_party: e.jobs_one_party,
        rechecks_drawn: e.rechecks_drawn,
        rechecks_passed: e.rechecks_passed,
        lie_escape_probability: e.lie_escape_probability,
        wrong_jobs_bound: e.wrong_jobs_bound,
    })
}

/// A digest from the wire: 64 lowercase hex digits, nothing else.
fn sha256_hex(digest: &str) -> Result<String, WireError> {
    if digest.len() == 64
        && digest.bytes().all(|b| b.is_ascii_digit() || (b'a'..=b'f').contains(&b))
    {
        Ok(digest.to_owned())
    } else {
        Err(WireError::Inconsistent(format!(
            "export digest {:?} is not a SHA-256 in hex",
            nqueens_proto::bounds::shown(digest)
        )))
    }
}

/// A run's result from its wire form: the classes, where present, must add up to the total and
/// the unique count.
pub(crate) fn result_from_wire(r: pb::RunResult) -> Result<RunResult, WireError> {
    let classes = r.classes.map(Classes::from);
    let (total, unique) = (join_wide(r.total, r.total_hi), join_wide(r.unique, r.unique_hi));
    if let Some(c) = classes {
        if c.total() != Some(total) || c.unique() != Some(unique) {
            return Err(WireError::Inconsistent(format!(
                "classes {}/{}/{} do not add up to total {total} and unique {unique}",
                c.count2, c.count4, c.count8
            )));
        }
    }
    let n = narrow("result n", r.n)?;
    let published =
        PublishedCheck::of(n, total, unique, classes.map(|c| [c.count2, c.count4, c.count8]));
    Ok(RunResult {
        n,
        total,
        unique,
        count2: classes.map(|c| c.count2),
        count4: classes.map(|c| c.count4),
        count8: classes.map(|c| c.count8),
        jobs: r.jobs,
        seconds: r.seconds,
        nodes: r.nodes,
        evidence: r.evidence.map(evidence_from_wire).transpose()?,
        export_sha256: r.export_sha256.map(|d| sha256_hex(&d)).transpose()?,
        // A function of the figures: computed again here, as the coordinator computed it.
        published,
    })
}

/// The fleet in aggregate, as the status call sends it.
fn fleet_to_wire(f: &Fleet) -> pb::Fleet {
    let groups = |groups: &[Group]| -> Vec<pb::FleetGroup> {
        groups
            .iter()
            .map(|g| pb::FleetGroup {
                key: g.key.clone(),
                workers: g.workers,
                slots: g.slots,
                jobs_leased: g.jobs_leased,
                results: g.results,
                results_per_second: g.results_per_second,
            })
            .collect()
    };
    pb::Fleet {
        workers: f.workers,
        by_state: groups(&f.by_state),
        by_device: groups(&f.by_device),
        by_version: groups(&f.by_version),
        by_credential: groups(&f.by_credential),
        matching: f.matching,
        offset: f.offset,
        limit: f.limit,
        filter: f.filter.clone(),
    }
}

/// The fleet in aggregate, as a status call describes it.
fn fleet_from_wire(f: pb::Fleet) -> Fleet {
    let groups = |groups: Vec<pb::FleetGroup>| -> Vec<Group> {
        groups
            .into_iter()
            .map(|g| Group {
                key: g.key,
                workers: g.workers,
                slots: g.slots,
                jobs_leased: g.jobs_leased,
                results: g.results,
                results_per_second: g.results_per_second,
            })
            .collect()
    };
    Fleet {
        workers: f.workers,
        by_state: groups(f.by_state),
        by_device: groups(f.by_device),
        by_version: groups(f.by_version),
        by_credential: groups(f.by_credential),
        matching: f.matching,
        offset: f.offset,
        limit: f.limit,
        filter: f.filter,
    }
}

/// The page of workers a status request asks for, its bounds checked.
pub fn query_from_wire(asked: &pb::StatusRequest) -> Result<WorkerQuery, WireError> {
    asked.check_bounds()?;
    Ok(WorkerQuery::new(asked.workers_offset, asked.workers_limit.into(), &asked.workers_filter))
}

impl StatusView {
    /// The wire form of a live coordinator's status: the whole answer to a status call. The
    /// counters stay behind (they are on `/metrics`), and so do the two things the wire does not
    /// say because a live coordinator's answer is always so: where it was read (the caller knows
    /// whom it asked) and that the rows carry checksums (a live coordinator has opened its file
    /// for writing, which adds them).
    pub fn to_response(&self) -> pb::StatusResponse {
        let view = self;
        let (p, snap) = (&view.run.progress, &view.run);
        let (partial_total, partial_total_hi) = split_wide(view.partial_total);
        let (partial_sym180, partial_sym180_hi) = split_wide(view.partial_sym180);
        let (partial_sym90, partial_sym90_hi) = split_wide(view.partial_sym90);
        pb::StatusResponse {
            run: Some(pb::RunId { n: p.n, fingerprint: p.fingerprint.clone() }),
            jobs_total: p.jobs_total,
            jobs_pending: p.jobs_pending,
            jobs_leased: p.jobs_leased,
            jobs_done: p.jobs_done,
            jobs_held: p.jobs_held,
            jobs_failed: p.jobs_failed,
            conflicts: p.conflicts,
            results_per_second: p.results_per_second,
            nodes_per_second: snap.live.nodes_per_second,
            eta_seconds: p.eta_seconds,
            waiting_on_leases: p.waiting_on_leases,
            quiet_seconds: snap.quiet_seconds,
            partial_total,
            partial_sym180,
            partial_sym90,
            partial_total_hi,
            partial_sym180_hi,
            partial_sym90_hi,
            nodes: view.nodes,
            bad_rows: self.bad_rows,
            evidence: view.evidence.as_ref().map(evidence_to_wire),
            complete: p.complete,
            result: p.result.as_ref().map(result_to_wire),
            untrusted_workers: snap.untrusted_workers,
            live_workers: snap.live.live_workers,
            disputed_jobs: snap.live.disputed_jobs,
            lease_expiries: snap.live.lease_expiries,
            leases_expire_in_seconds: snap.live.leases_expire_in_seconds,
            uptime_seconds: snap.live.uptime_seconds,
            snapshot_seq: snap.live.snapshot_seq,
            taken_unix: snap.taken_unix,
            workers: view.workers.iter().map(worker_to_wire).collect(),
            fleet: view.fleet.as_ref().map(fleet_to_wire),
        }
    }

    /// A live coordinator's answer to a status call, as answered by the coordinator at `source`:
    /// checked against the contract's bounds, then taken as answered, not recomputed (the ETA
    /// rests on the coordinator's own clock). Its rows carry checksums (see
    /// [`StatusView::to_response`]).
    pub fn from_response(r: pb::StatusResponse, source: &str) -> Result<StatusView, WireError> {
        r.check_bounds()?;
        let run = r.run.ok_or(WireError::Missing("status run"))?;
        let progress = Progress {
            n: run.n,
            fingerprint: run.fingerprint,
            jobs_total: r.jobs_total,
            jobs_pending: r.jobs_pending,
            jobs_leased: r.jobs_leased,
            jobs_done: r.jobs_done,
            jobs_held: r.jobs_held,
            jobs_failed: r.jobs_failed,
            percent_done: percent(r.jobs_done, r.jobs_total),
            results_per_second: r.results_per_second,
            eta_seconds: r.eta_seconds,
            waiting_on_leases: r.waiting_on_leases,
            conflicts: r.conflicts,
            complete: r.complete,
            result: r.result.map(result_from_wire).transpose()?,
        };
        let live = LiveFigures {
            snapshot_seq: r.snapshot_seq,
            nodes_per_second: r.nodes_per_second,
            live_workers: r.live_workers,
            disputed_jobs: r.disputed_jobs,
            lease_expiries: r.lease_expiries,
            leases_expire_in_seconds: r.leases_expire_in_seconds,
            uptime_seconds: r.uptime_seconds,
            // On `/metrics`, not on the status call.
            counters: None,
        };
        // The wire carries a page of the workers: the view's `workers`, not every one.
        let every = std::sync::Arc::from([]);
        let run = RunSnapshot::new(
            r.taken_unix,
            progress,
            r.quiet_seconds,
            r.untrusted_workers,
            every,
            live,
        );
        let tally = Tally {
            total: join_wide(r.partial_total, r.partial_total_hi),
            sym180: join_wide(r.partial_sym180, r.partial_sym180_hi),
            sym90: join_wide(r.partial_sym90, r.partial_sym90_hi),
            nodes: r.nodes,
            ..Tally::default()
        };
        let evidence = r.evidence.map(evidence_from_wire).transpose()?;
        let rows = RowFigures { tally, evidence, bad_rows: r.bad_rows, checksums: true };
        let workers = r.workers.into_iter().map(worker_from_wire).collect();
        let fleet = r.fleet.map(fleet_from_wire);
        Ok(StatusView::new(run, rows, fleet, workers, Origin::Coordinator(source)))
    }
}

/// A worker as the status call describes it.
fn worker_to_wire(w: &WorkerView) -> pb::WorkerInfo {
    pb::WorkerInfo {
        worker_id: w.worker_id,
        name: w.name.clone(),
        host: w.host.clone(),
        slots: w.slots,
        version: w.version.clone(),
        results: w.results,
        conflicts: w.conflicts,
        last_seen_seconds_ago: w.last_seen_seconds_ago,
        jobs_leased: w.jobs_leased,
        untrusted: w.untrusted,
        credential: w.credential.clone(),
        device: w.device.clone(),
        results_per_second: w.results_per_second,
        trust: w.trust.clone(),
        lease_size: w.lease_size,
    }
}

/// A worker as a live coordinator's status call describes it.
fn worker_from_wire(w: pb::WorkerInfo) -> WorkerView {
    WorkerView {
        worker_id: w.worker_id,
        name: w.name,
        host: w.host,
        slots: w.slots,
        version: w.version,
        results: w.results,
        conflicts: w.conflicts,
        jobs_leased: w.jobs_leased,
        last_seen_seconds_ago: w.last_seen_seconds_ago,
        untrusted: w.untrusted,
        credential: w.credential,
        device: w.device,
        results_per_second: w.results_per_second,
        trust: w.trust,
        lease_size: w.lease_size,
    }
}
