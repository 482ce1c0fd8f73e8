//! The workers the engine knows: registration (a new id, or the previous one where the caller
//! proves it is that worker), authentication of every later call, and who counts as live.

use super::{Caller, Engine, Refusal, Registration};
use crate::secrets::{digest, new_secret, same_digest};
use nqueens_scheduler::WorkerId;
use nqueens_store::WorkerRow;
use std::collections::VecDeque;
use std::sync::atomic::Ordering;
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
    pub(super) recent: VecDeque<(Instant, u32)>,
    pub(super) results: u64,
    pub(super) conflicts: u64,
    /// Jobs its last lease call was sized for (what the scheduler allowed it).
    pub(super) last_lease_size: usize,
}

impl WorkerState {
    /// A result of its was counted at `now`; what is older than `keep` is forgotten (every
    /// snapshot reads what is left).
    pub(super) fn delivered(&mut self, now: Instant, keep: Duration) {
        while self.recent.front().is_some_and(|(t, _)| now.duration_since(*t) > keep) {
            self.recent.pop_front();
        }
        match self.recent.back_mut() {
            Some((t, k)) if now.duration_since(*t) < Duration::from_secs(1) => *k += 1,
            _ => self.recent.push_back((now, 1)),
        }
    }

    /// Its counted results per second over the last `period` (a lease period): the one rate of a
    /// worker that every view shows.
    pub(super) fn counted_per_second(&self, now: Instant, period: Duration) -> f64 {
        let counted: u32 = self
            .recent
            .iter()
            .filter(|(t, _)| now.duration_since(*t) <= period)
            .map(|(_, k)| *k)
            .sum();
        counted as f64 / period.as_secs_f64()
    }
}

impl Engine {
    /// A registration: the previous id where the caller proves it is that worker (its secret,
    /// under the same credential), else a new id. None when the credential has registered too
    /// often lately.
    pub(super) fn register(
        &mut self,
        worker: Registration,
        now: Instant,
        worker_rows: &mut Vec<WorkerRow>,
    ) -> Option<(WorkerId, String)> {
        if !self.registrations.allow(&worker.credential.name, worker.peer, now) {
            tracing::warn!(credential = %worker.credential.name, peer = ?worker.peer, name = %worker.name, "registration refused: too many under this credential from this address in the last minute");
            return None;
        }
        let proven = worker.previous_worker_id.and_then(|id| {
            let row = self.known_workers.get(&id.get())?;
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
                self.next_worker_id += 1;
                (WorkerId::new(self.next_worker_id - 1), new_secret())
            }
        };
        let row = WorkerRow {
            id: worker_id.get(),
            name: worker.name,
            host: worker.host,
            cores: worker.cores,
            version: worker.version,
            credential: worker.credential.name.clone(),
            secret_digest: digest(&secret).to_vec(),
        };
        if let Some(group) = worker.credential.group(&mut self.credential_groups) {
            self.scheduler.set_group(worker_id, group);
        }
        tracing::info!(%worker_id, name = %row.name, host = %row.host, cores = row.cores, credential = %row.credential, reconnect = proven.is_some(), "worker registered");
        worker_rows.push(row.clone());
        self.known_workers.insert(worker_id.get(), row.clone());
        let device = worker.device.clone();
        let entry = self.workers.entry(worker_id).or_insert(WorkerState {
            row: row.clone(),
            device: device.clone(),
            last_seen: now,
            recent: VecDeque::new(),
            results: 0,
            conflicts: 0,
            last_lease_size: 0,
        });
        entry.row = row;
        entry.device = device;
        entry.last_seen = now;
        Some((worker_id, secret))
    }

    /// Checks that `caller` is the worker it names: registered with this process, under the
    /// same credential, with its secret. Marks it seen if so; refusals are logged (at most
    /// every [`REFUSAL_LOG_EVERY`]).
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
        self.metrics.auth_failures.fetch_add(1, Ordering::Relaxed);
        if self.last_refusal_log.is_none_or(|t| now.duration_since(t) >= REFUSAL_LOG_EVERY) {
            self.last_refusal_log = Some(now);
            tracing::warn!(worker_id = %caller.worker_id, credential = %caller.credential.name, "call refused: it names another worker (wrong secret or credential)");
        }
        Err(Refusal::BadSecret)
    }

    /// Whether a worker last seen at `last_seen` still counts as live.
    fn live(&self, last_seen: Instant, now: Instant) -> bool {
        now.duration_since(last_seen) <= self.config.heartbeat * 3 + Duration::from_secs(2)
    }

    pub(super) fn active_workers(&self, now: Instant) -> usize {
        self.workers.values().filter(|w| self.live(w.last_seen, now)).count()
    }

    /// The live workers other than `worker_id` whose credential delivered verified work lately
    /// (see [`nqueens_scheduler::Scheduler::delivering`]): who else could give a job an opinion.
    /// An identity that only registers or heartbeats is not among them: it holds nothing up.
    pub(super) fn other_active_workers(&self, worker_id: WorkerId, now: Instant) -> Vec<WorkerId> {
        self.workers
            .iter()
            .filter(|(&id, w)| {
                id != worker_id && self.live(w.last_seen, now) && self.scheduler.delivering(id, now)
            })
            .map(|(&id, _)| id)
            .collect()
    }
}
