//! The engine's workers: registration (a new id, or the previous one where the caller proves it
//! is that worker), authentication of every later call, liveness, and what an identity may cost.
//!
//! Registrations are not limited by how fast they come (thousands of honest hosts behind one NAT
//! address arrive together, and again after every coordinator restart) but by what they cost:
//! each credential may hold at most `max_unproven` identities registered by this process that
//! have not yet delivered an answer. When a new one would pass that, the oldest such identity
//! that holds no job is forgotten (its row deleted with the registration's commit); only when
//! every one of them holds jobs is the registration refused. A flood of identities under one
//! credential thus evicts its own idle identities, never a worker that delivered, never another
//! credential's, and the state file keeps at most `max_unproven` idle rows per credential.

use super::{Caller, Refusal, Registration};
use crate::secrets::{digest, new_secret, same_digest, Credential};
use nqueens_scheduler::{PerSecond, Scheduler, WorkerId};
use nqueens_store::{CredentialNumbers, WorkerRow};
use std::collections::{BTreeSet, HashMap};
use std::time::{Duration, Instant};

/// Refused calls naming a worker without its secret are logged at most this often.
const REFUSAL_LOG_EVERY: Duration = Duration::from_secs(10);

/// A registered worker, as the engine tracks it.
pub(super) struct WorkerState {
    pub(super) row: WorkerRow,
    /// What it solves on, as it registered.
    pub(super) device: String,
    pub(super) last_seen: Instant,
    /// Results counted in the last lease period, per second (oldest first): its throughput.
    pub(super) recent: PerSecond,
    pub(super) results: u64,
    pub(super) conflicts: u64,
    /// Jobs its last lease call was sized for (what the scheduler allowed it).
    pub(super) last_lease_size: usize,
}

impl WorkerState {
    /// A result of its was counted at `now`; what is older than `keep` is forgotten (every
    /// snapshot reads what is left).
    pub(super) fn delivered(&mut self, now: Instant, keep: Duration) {
        self.recent.forget_older(now, keep);
        self.recent.add(now);
    }

    /// Its counted results per second over the last `period` (a lease period): the one rate of a
    /// worker that every view shows.
    pub(super) fn results_per_second(&self, now: Instant, period: Duration) -> f64 {
        self.recent.within(now, period) as f64 / period.as_secs_f64()
    }
}

/// What a registration changed in the stored worker rows (committed with its batch).
#[derive(Debug, Default)]
pub(super) struct RowChanges {
    /// Rows to write (new identities, and identities taken up again).
    pub(super) written: Vec<WorkerRow>,
    /// Ids of idle identities forgotten to make room (rows to delete).
    pub(super) forgotten: Vec<u64>,
}

impl RowChanges {
    pub(super) fn is_empty(&self) -> bool {
        self.written.is_empty() && self.forgotten.is_empty()
    }
}

/// The workers the engine knows (see the module doc).
pub(super) struct Registry {
    /// Workers registered with this process.
    workers: HashMap<WorkerId, WorkerState>,
    /// Every worker row of the run (for taking an id up again after a reconnect or restart).
    known: HashMap<u64, WorkerRow>,
    /// Identities made by this process that have not delivered an answer, per credential,
    /// oldest (lowest id) first.
    unproven: HashMap<String, BTreeSet<WorkerId>>,
    /// See the module doc.
    max_unproven: usize,
    next_id: u64,
    /// The first id this process gave: only identities from it on may be forgotten (older
    /// ones may have rows that results point to).
    first_new_id: u64,
    /// A worker silent for longer than this is not live (three heartbeats and two seconds).
    live_for: Duration,
    last_refusal_log: Option<Instant>,
}

impl Registry {
    /// The registry of a run whose stored rows are `known`, giving new ids from `next_id`.
    pub(super) fn new(
        known: HashMap<u64, WorkerRow>,
        next_id: u64,
        heartbeat: Duration,
        max_unproven: usize,
    ) -> Registry {
        Registry {
            workers: HashMap::new(),
            known,
            unproven: HashMap::new(),
            max_unproven: max_unproven.max(1),
            next_id,
            first_new_id: next_id,
            live_for: heartbeat * 3 + Duration::from_secs(2),
            last_refusal_log: None,
        }
    }

    /// How many workers are registered with this process.
    pub(super) fn len(&self) -> usize {
        self.workers.len()
    }

    /// The scheduler's credential number of every known worker (for `Scheduler::restore`), in
    /// the store's `numbers`.
    pub(super) fn credential_numbers(
        &self,
        numbers: &mut CredentialNumbers,
    ) -> HashMap<WorkerId, u64> {
        self.known
            .values()
            .map(|w| {
                let credential = Credential::from_stored(&w.credential);
                (WorkerId::new(w.id), credential.number(numbers))
            })
            .collect()
    }

    /// A registration: the previous id where the caller proves it is that worker (its secret,
    /// under the same credential), else a new id, within the credential's budget of idle
    /// identities. What the stored rows must change goes into `rows`.
    pub(super) fn register(
        &mut self,
        worker: Registration,
        scheduler: &mut Scheduler,
        numbers: &mut CredentialNumbers,
        now: Instant,
        rows: &mut RowChanges,
    ) -> Result<(WorkerId, String), Refusal> {
        let proven = worker.previous_worker_id.and_then(|id| {
            let row = self.known.get(&id.get())?;
            let ok = row.credential == worker.credential.name
                && same_digest(&row.secret_digest, &digest(&worker.previous_secret));
            if !ok {
                tracing::warn!(claimed = %id, credential = %worker.credential.name, name = %worker.name, "re-registration as another worker without its secret: registered as a new worker");
            }
            ok.then_some(id)
        });
        let (worker_id, secret) = match proven {
            Some(id) => (id, worker.previous_secret),
            None => {
                self.make_room(&worker.credential.name, scheduler, rows)?;
                let id = WorkerId::new(self.next_id);
                self.next_id += 1;
                self.unproven.entry(worker.credential.name.clone()).or_default().insert(id);
                (id, new_secret())
            }
        };
        let row = WorkerRow {
            id: worker_id.get(),
            name: worker.name,
            host: worker.host,
            slots: worker.slots,
            version: worker.version,
            credential: worker.credential.name.clone(),
            secret_digest: digest(&secret).to_vec(),
            device: worker.device.clone(),
        };
        let credential = worker.credential.number(numbers);
        scheduler.set_credential(worker_id, credential);
        tracing::debug!(%worker_id, name = %row.name, host = %row.host, slots = row.slots, credential = %row.credential, reconnect = proven.is_some(), "worker registered");
        rows.written.push(row.clone());
        self.known.insert(worker_id.get(), row.clone());
        let device = worker.device;
        let entry = self.workers.entry(worker_id).or_insert_with(|| WorkerState {
            row: row.clone(),
            device: device.clone(),
            last_seen: now,
            recent: PerSecond::default(),
            results: 0,
            conflicts: 0,
            last_lease_size: 0,
        });
        entry.row = row;
        entry.device = device;
        entry.last_seen = now;
        Ok((worker_id, secret))
    }

    /// Keeps `credential` within its budget of idle identities before it gets a new one: the
    /// oldest that holds no job is forgotten; refused when every one holds jobs.
    fn make_room(
        &mut self,
        credential: &str,
        scheduler: &mut Scheduler,
        rows: &mut RowChanges,
    ) -> Result<(), Refusal> {
        let Some(unproven) = self.unproven.get_mut(credential) else { return Ok(()) };
        if unproven.len() < self.max_unproven {
            return Ok(());
        }
        let Some(&idle) = unproven.iter().find(|id| scheduler.leased_by(**id) == 0) else {
            tracing::warn!(credential, max = self.max_unproven, "registration refused: every identity of this credential that has not delivered yet holds jobs");
            return Err(Refusal::TooManyRegistrations);
        };
        unproven.remove(&idle);
        self.workers.remove(&idle);
        self.known.remove(&idle.get());
        scheduler.forget_worker(idle);
        rows.forgotten.push(idle.get());
        tracing::debug!(worker_id = %idle, credential, "idle identity forgotten to make room for a new one");
        Ok(())
    }

    /// `worker_id` delivered an answer: it no longer counts against its credential's budget.
    pub(super) fn proven(&mut self, worker_id: WorkerId) {
        if worker_id.get() < self.first_new_id {
            return;
        }
        if let Some(w) = self.workers.get(&worker_id) {
            if let Some(set) = self.unproven.get_mut(&w.row.credential) {
                set.remove(&worker_id);
            }
        }
    }

    /// Checks that `caller` is the worker it names: registered with this process, under the
    /// same credential, with its secret. Marks it seen if so; a refusal is logged (at most
    /// every [`REFUSAL_LOG_EVERY`]) and returned with whether it was a wrong secret.
    pub(super) fn authenticate(&mut self, caller: &Caller, now: Instant) -> Result<(), Refusal> {
        let Some(w) = self.workers.get_mut(&caller.worker_id) else {
            return Err(Refusal::UnknownWorker);
        };
        if w.row.credential == caller.credential.name
            && same_digest(&w.row.secret_digest, &digest(&caller.secret))
        {
            w.last_seen = now;
            return Ok(());
        }
        if self.last_refusal_log.is_none_or(|t| now.duration_since(t) >= REFUSAL_LOG_EVERY) {
            self.last_refusal_log = Some(now);
            tracing::warn!(worker_id = %caller.worker_id, credential = %caller.credential.name, "call refused: it names another worker (wrong secret or credential)");
        }
        Err(Refusal::BadSecret)
    }

    /// Whether a worker last seen at `last_seen` still counts as live at `now`.
    pub(super) fn live(&self, last_seen: Instant, now: Instant) -> bool {
        now.duration_since(last_seen) <= self.live_for
    }

    /// The name of worker `worker_id`: registered with this process, or known from its row.
    pub(super) fn name_of(&self, worker_id: WorkerId) -> Option<&str> {
        match self.workers.get(&worker_id) {
            Some(w) => Some(&w.row.name),
            None => self.known.get(&worker_id.get()).map(|row| row.name.as_str()),
        }
    }

    /// The worker `worker_id`, if registered with this process.
    pub(super) fn get(&self, worker_id: WorkerId) -> Option<&WorkerState> {
        self.workers.get(&worker_id)
    }

    /// The worker `worker_id`, if registered with this process, to update.
    pub(super) fn get_mut(&mut self, worker_id: WorkerId) -> Option<&mut WorkerState> {
        self.workers.get_mut(&worker_id)
    }

    /// Every worker registered with this process.
    pub(super) fn iter(&self) -> impl Iterator<Item = &WorkerState> {
        self.workers.values()
    }
}

#[cfg(test)]
mod rate_tests {
    use super::*;

    /// A worker that stops answering (idle at the run's end, or gone) shows a rate that falls to
    /// 0 within one lease period: the rate counts only what came in during the last one.
    #[test]
    fn an_idle_workers_rate_decays_to_zero_within_a_lease_period() {
        let period = Duration::from_secs(60);
        let start = Instant::now();
        let mut w = WorkerState {
            row: WorkerRow {
                id: 1,
                name: "w".into(),
                host: "h".into(),
                slots: 1,
                version: "0".into(),
                credential: String::new(),
                secret_digest: Vec::new(),
                device: String::new(),
            },
            device: String::new(),
            last_seen: start,
            recent: PerSecond::default(),
            results: 0,
            conflicts: 0,
            last_lease_size: 0,
        };
        for k in 0..120u64 {
            w.delivered(start + Duration::from_millis(500 * k), period);
        }
        let last = start + Duration::from_secs(60);
        assert!((w.results_per_second(last, period) - 2.0).abs() < 0.05, "2 results/s");
        let half = w.results_per_second(last + period / 2, period);
        assert!(half > 0.5 && half < 1.5, "half a period idle: about half the rate, {half}");
        assert_eq!(w.results_per_second(last + period + Duration::from_secs(1), period), 0.0);
    }
}
