//! What a run's total rests on, read from its committed rows alone: how many jobs were counted on
//! two or more independent answers, on the coordinator's own solve, or on one credential's word;
//! the secret re-checks drawn and passed; and from those figures a bound on the wrong answers the
//! one-credential jobs may still hold. The result file, `status` and `verify` all show this one
//! reading, so that a reader of the file knows what the total rests on.

use super::credentials::{CredentialNumbers, SHARED};
use super::error::StoreError;
use super::rows::{JobFacts, StoredResult};
use super::{Store, Summary};
use nqueens_core::{JobCounts, Tally};
use nqueens_scheduler::evidence::{support, Basis, Support};
use nqueens_scheduler::state::{JobState, Review};
use nqueens_scheduler::Answer;
use serde::{Deserialize, Serialize};
use std::collections::{HashMap, HashSet};

/// The confidence of [`Evidence::wrong_jobs_bound`].
pub const EVIDENCE_CONFIDENCE: f64 = 0.95;

/// What the counted answers of a run rest on (of its done jobs whose counted row is intact).
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct Evidence {
    /// Independent answers the run demanded of every job: 1, or 2 for a record run.
    pub replication: u8,
    /// Jobs counted on two or more independent answers: two credentials, or the coordinator and
    /// one credential, gave the same answer.
    pub jobs_independent: u64,
    /// Jobs counted on the coordinator's own solve alone.
    pub jobs_coordinator: u64,
    /// Jobs counted on one credential's word: a trusted party alone, or identities of one
    /// credential (the shared token) agreeing with each other.
    pub jobs_one_party: u64,
    /// Answers drawn for a secret re-check (each then waited for a second party's answer).
    pub rechecks_drawn: u64,
    /// Re-checks that agreed (no conflict on their job).
    pub rechecks_passed: u64,
    /// The chance that a lie on a job that rests on one credential's word went unchecked: one
    /// minus the measured draw rate (re-checks drawn among the answers that would have rested
    /// on one credential's word). 0 when no job rests on one credential's word.
    pub lie_escape_probability: f64,
    /// With [`EVIDENCE_CONFIDENCE`], at most this many of the one-credential jobs are wrong: if
    /// a fraction p of such answers were wrong, all the passed re-checks (random draws among
    /// them) agreed with probability (1 - p)^passed, so p < 1 - 0.05^(1/passed). 0 when no job
    /// rests on one credential's word; all of them when no re-check passed.
    pub wrong_jobs_bound: f64,
}

impl Evidence {
    /// The bound figures from the counts (see the fields).
    fn with_bounds(mut self) -> Self {
        let (one, drawn) = (self.jobs_one_party as f64, self.rechecks_drawn as f64);
        if self.jobs_one_party == 0 {
            return self;
        }
        self.lie_escape_probability = 1.0 - drawn / (drawn + one);
        self.wrong_jobs_bound = match self.rechecks_passed {
            0 => one,
            passed => {
                let rate = 1.0 - (1.0 - EVIDENCE_CONFIDENCE).powf(1.0 / passed as f64);
                (one * rate).min(one)
            }
        };
        self
    }

    /// One line for people: what the total rests on.
    pub fn summary(&self) -> String {
        format!(
            "{} jobs on independent answers, {} on the coordinator's own solve, {} on one \
             credential's word; re-checks {} drawn, {} passed; a lie on a one-credential job \
             escaped the re-checks with probability {:.3}; at most {:.1} of those jobs wrong \
             ({:.0}% confidence); replication {}",
            self.jobs_independent,
            self.jobs_coordinator,
            self.jobs_one_party,
            self.rechecks_drawn,
            self.rechecks_passed,
            self.lie_escape_probability,
            self.wrong_jobs_bound,
            EVIDENCE_CONFIDENCE * 100.0,
            self.replication,
        )
    }
}

/// A done job's counted answer and who stands behind it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct CountedJob {
    /// The job.
    pub job_id: u64,
    /// Its counted counts.
    pub counts: JobCounts,
    /// The coordinator and the independent credentials that gave the same answer.
    pub support: Support,
}

impl Store {
    /// What the counted answers rest on, from the committed rows.
    pub fn evidence(&self) -> Result<Evidence, StoreError> {
        self.evidence_of(&self.results()?)
    }

    /// [`Store::tally_checked`] and [`Store::evidence`] from one reading of the rows.
    pub fn tally_and_evidence(&self) -> Result<(Tally, u64, Evidence), StoreError> {
        let rows = self.results()?;
        let (tally, bad) = self.tally_and_bad(&rows)?;
        Ok((tally, bad, self.evidence_of(&rows)?))
    }

    /// [`Store::summary`] and [`Store::evidence`] from one reading of the rows and the jobs
    /// (`status --state`: each reading is a scan of a table of up to a million rows).
    pub fn summary_and_evidence(&self) -> Result<(Summary, Evidence), StoreError> {
        let (results, facts) = (self.results()?, self.job_facts()?);
        Ok((self.summary_with(&results, &facts)?, self.evidence_with(&results, &facts)?))
    }

    /// [`Store::evidence`] from `rows`, the result rows already read (as the tally reads them).
    pub fn evidence_of(&self, rows: &[StoredResult]) -> Result<Evidence, StoreError> {
        self.evidence_with(rows, &self.job_facts()?)
    }

    /// [`Store::evidence`] from rows and job facts already read.
    pub(super) fn evidence_with(
        &self,
        rows: &[StoredResult],
        jobs: &[JobFacts],
    ) -> Result<Evidence, StoreError> {
        let mut evidence = Evidence { replication: self.meta.replication, ..Evidence::default() };
        for job in jobs.iter().filter(|j| j.review == Review::Recheck) {
            evidence.rechecks_drawn += 1;
            if job.state == JobState::Done && job.conflicts == 0 {
                evidence.rechecks_passed += 1;
            }
        }
        for counted in self.counted_of(rows, jobs)? {
            match counted.support.basis() {
                Basis::Coordinator => evidence.jobs_coordinator += 1,
                Basis::Independent => evidence.jobs_independent += 1,
                Basis::OneParty => evidence.jobs_one_party += 1,
            }
        }
        Ok(evidence.with_bounds())
    }

    /// Every done job's counted answer (its row intact) and who stands behind it, in job order:
    /// the rows of an export.
    pub fn counted_jobs(&self) -> Result<Vec<CountedJob>, StoreError> {
        self.counted_of(&self.results()?, &self.job_facts()?)
    }

    /// [`Store::counted_jobs`] from rows and job facts already read.
    fn counted_of(
        &self,
        rows: &[StoredResult],
        jobs: &[JobFacts],
    ) -> Result<Vec<CountedJob>, StoreError> {
        let workers = self.worker_credentials()?;
        let untrusted: HashSet<u64> = self.untrusted_workers()?.into_iter().collect();
        // Numbers only compared within this reading: a numbering of its own.
        let mut numbers = CredentialNumbers::default();
        let mut by_job: HashMap<u64, Vec<&StoredResult>> = HashMap::new();
        for row in rows.iter().filter(|r| r.intact) {
            by_job.entry(row.job_id).or_default().push(row);
        }
        let mut out = Vec::new();
        for (id, job) in jobs.iter().enumerate() {
            let rows = by_job.get(&(id as u64)).map_or(&[][..], Vec::as_slice);
            let Some(counted) = rows.iter().find(|r| r.counted) else { continue };
            if job.state != JobState::Done {
                continue;
            }
            let answers: Vec<Answer> =
                rows.iter().map(|r| r.answer(&mut numbers, &workers)).collect();
            let support = support(&answers, &counted.counts, |w| untrusted.contains(&w.get()));
            out.push(CountedJob { job_id: id as u64, counts: counted.counts, support });
        }
        Ok(out)
    }

    /// The credential of every worker, by id (empty, in rows from before credentials: the shared
    /// token).
    pub(super) fn worker_credentials(&self) -> Result<HashMap<u64, String>, StoreError> {
        let sql = self.sql();
        let column = if self.has_column("workers", "credential")? { "credential" } else { "''" };
        let mut q = self
            .conn
            .prepare(&format!("SELECT id, COALESCE({column}, '') FROM workers"))
            .map_err(&sql)?;
        let rows = q
            .query_map([], |r| Ok((r.get::<_, i64>(0)? as u64, r.get::<_, String>(1)?)))
            .map_err(&sql)?;
        let named = |(id, name): (u64, String)| {
            (id, if name.is_empty() { SHARED.to_owned() } else { name })
        };
        rows.map(|r| r.map(named)).collect::<Result<_, _>>().map_err(&sql)
    }
}
