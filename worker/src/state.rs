//! The worker's state, with one owner: [`State`] holds the [`Ledger`] (who this worker is, which
//! leases it holds, which jobs are with the lanes, which answers await acknowledgement, where new
//! answers go, whether it is stopping) behind one lock, and only its methods change it.
//!
//! Why one owner: the session (leasing, heartbeats, the result stream, reconnects), the CPU lane
//! and the GPU lane all need parts of this state. Spread over atomics set from several files, each
//! fact had several writers and no place said what it meant. Here the lanes never touch it: they
//! leave a [`Report`] per task in the [`Inbox`], and [`collect`] (one task) records each in the
//! ledger and forwards answers to the open result stream. The session calls named steps
//! ([`State::leased`], [`State::acknowledged`], [`State::connected`], ...) and reads what it needs.
//!
//! The run's end and a fatal refusal are not state: the session call that learns of them returns
//! them ([`crate::session`]'s `Ended`), and the reconnect loop is the one place that acts on them.
//!
//! The lock is held for a few map operations, never across an await or a solve.

use crate::work::{Finished, Inbox, JobId, LeaseId, Report, ReportTx, INBOX_FULL};
use parking_lot::Mutex;
use std::collections::{BTreeMap, HashMap, HashSet};
use tokio::sync::{mpsc, Notify};

/// Who this worker is to the coordinator, once registered.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Identity {
    /// The run's board size.
    pub n: u32,
    /// The run's fingerprint.
    pub fingerprint: String,
    /// The id the coordinator gave this worker.
    pub worker_id: u64,
    /// The secret that proves `worker_id` is this worker's.
    pub secret: String,
}

/// The facts, changed only by [`State`]'s methods.
#[derive(Default)]
struct Ledger {
    /// Set by the latest registration.
    identity: Option<Identity>,
    /// Jobs leased and without an answer yet, by lease.
    held: HashMap<LeaseId, HashSet<JobId>>,
    /// Answers sent (or waiting to be sent) and not yet acknowledged, by (job, lease).
    unacked: BTreeMap<(JobId, LeaseId), Finished>,
    /// Where new answers go while a result stream is open.
    stream: Option<mpsc::Sender<Finished>>,
    /// Set once by a stop request: no more leases are asked for.
    stopping: bool,
}

/// The owner of the worker's state. See the module docs.
#[derive(Default)]
pub(crate) struct State {
    ledger: Mutex<Ledger>,
    /// The lanes' reports, and how many jobs are with them.
    inbox: std::sync::Arc<Inbox>,
    /// Woken whenever the coordinator acknowledges an answer.
    acked: Notify,
    /// Asks [`collect`] to send the answers it holds back now.
    flush: Notify,
}

impl State {
    /// The identity of the latest registration, if any.
    pub fn identity(&self) -> Option<Identity> {
        self.ledger.lock().identity.clone()
    }

    /// A registration: this is who the worker now is (answers not yet acknowledged are sent
    /// under it).
    pub fn registered(&self, identity: Identity) {
        self.ledger.lock().identity = Some(identity);
    }

    /// Where the lanes report.
    pub fn reports(&self) -> ReportTx {
        ReportTx::new(self.inbox.clone())
    }

    /// A lease's jobs, about to be handed to the lanes.
    pub fn leased(&self, lease: LeaseId, jobs: impl IntoIterator<Item = JobId>) {
        let mut ledger = self.ledger.lock();
        let held = ledger.held.entry(lease).or_default();
        let mut added = 0;
        for job in jobs {
            held.insert(job);
            added += 1;
        }
        self.inbox.handed(added);
    }

    /// The leases with jobs still held, for the heartbeat.
    pub fn held_leases(&self) -> Vec<LeaseId> {
        self.ledger.lock().held.keys().copied().collect()
    }

    /// Jobs with the lanes now.
    pub fn in_flight(&self) -> usize {
        self.inbox.with_lanes()
    }

    /// Answers not yet acknowledged (those still in the inbox included).
    pub fn unacked(&self) -> usize {
        let ledger = self.ledger.lock();
        ledger.unacked.len() + self.inbox.waiting()
    }

    /// Waits (at most `patience`) until no more than `queued` jobs are with the lanes: whether
    /// they are.
    pub async fn wait_for_room(&self, queued: usize, patience: std::time::Duration) -> bool {
        self.inbox.wait_for_room(queued, patience).await
    }

    /// A result stream opened: new answers go to `stream`. Returns every answer not yet
    /// acknowledged, to be re-sent on it (answers outlive connections).
    pub fn connected(&self, stream: mpsc::Sender<Finished>) -> Vec<Finished> {
        let mut ledger = self.ledger.lock();
        ledger.stream = Some(stream);
        ledger.unacked.values().cloned().collect()
    }

    /// The session ended: answers wait for the next stream.
    pub fn disconnected(&self) {
        self.ledger.lock().stream = None;
    }

    /// The coordinator committed (or refused for good) this answer: it is forgotten.
    pub fn acknowledged(&self, job: JobId, lease: LeaseId) {
        self.ledger.lock().unacked.remove(&(job, lease));
        self.acked.notify_waiters();
    }

    /// Waits (at most `patience`) for the coordinator's next acknowledgement, when an answer
    /// awaits one: a committed answer is what frees room under the coordinator's cap on held
    /// jobs. With none awaited, waits the whole `patience`.
    pub async fn wait_for_ack(&self, patience: std::time::Duration) {
        let acked = self.acked.notified();
        if self.unacked() == 0 {
            tokio::time::sleep(patience).await;
            return;
        }
        let _ = tokio::time::timeout(patience, acked).await;
    }

    /// Answers held back for a burst (see [`collect`]) leave now: the lease loop is about to
    /// ask for work, and the coordinator counts unanswered jobs against the room it has.
    pub fn flush(&self) {
        self.flush.notify_one();
    }

    /// A stop request: no more leases are asked for.
    pub fn stop(&self) {
        self.ledger.lock().stopping = true;
    }

    /// Whether a stop was requested.
    pub fn stopping(&self) -> bool {
        self.ledger.lock().stopping
    }

    /// Records every report in the inbox (under the ledger's lock, so that an answer is always
    /// counted by [`unacked`](Self::unacked)); returns the answers to send, with the stream to
    /// send them on, if one is open.
    fn record_inbox(&self) -> Option<(mpsc::Sender<Finished>, Vec<Finished>)> {
        let mut ledger = self.ledger.lock();
        let mut answers = Vec::new();
        for report in self.inbox.take() {
            let Report::Finished(finished) = report else { continue };
            if let Some(jobs) = ledger.held.get_mut(&finished.lease) {
                jobs.remove(&finished.id);
                if jobs.is_empty() {
                    ledger.held.remove(&finished.lease);
                }
            }
            ledger.unacked.insert((finished.id, finished.lease), finished.clone());
            answers.push(finished);
        }
        ledger.stream.clone().map(|stream| (stream, answers))
    }
}

/// How long an answer may wait for others to leave with it: a worker of short jobs finishes
/// hundreds a second, and the coordinator's cost is per message read, wake-up and commit more than
/// per answer. An answer waits only while the lanes are busy: the lease loop flushes before it
/// asks for work (see [`State::flush`]), and the lanes running dry or the inbox filling up
/// ([`INBOX_FULL`]) end a burst as well.
pub const RESULT_BURST: std::time::Duration = std::time::Duration::from_millis(20);

/// The one reader of the lanes' reports: records them in `state` and sends answers on the open
/// result stream, in bursts of at most [`RESULT_BURST`]. It wakes on the first report of a burst
/// (see [`Inbox`]), not on each. The lanes' threads never wait on the network; this task does.
pub(crate) async fn collect(state: std::sync::Arc<State>) {
    let _closed = state.inbox.close_on_drop();
    loop {
        let flushed = tokio::select! {
            _ = state.inbox.ready.notified() => false,
            _ = state.flush.notified() => true,
        };
        let waiting = state.inbox.waiting();
        if waiting == 0 {
            continue;
        }
        if !flushed && waiting < INBOX_FULL && state.in_flight() > 0 {
            tokio::select! {
                _ = tokio::time::sleep(RESULT_BURST) => {}
                _ = state.inbox.ready.notified() => {}
                _ = state.flush.notified() => {}
            }
        }
        if let Some((stream, answers)) = state.record_inbox() {
            for finished in answers {
                let _ = stream.send(finished).await;
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::work::Task;

    fn task(lease: u64, job: u64) -> Task {
        let mut job_spec = nqueens_core::job_list(8, &Default::default()).unwrap().jobs[0].clone();
        job_spec.id = JobId::new(job);
        Task { lease: LeaseId::new(lease), job: job_spec }
    }

    /// A lease is held until its last job is answered; an answer is kept until acknowledged and
    /// offered again on the next stream.
    #[test]
    fn the_ledger_follows_a_lease_to_its_acknowledgement() {
        let state = State::default();
        let reports = state.reports();
        state.leased(LeaseId::new(7), [JobId::new(1), JobId::new(2)]);
        assert_eq!(state.in_flight(), 2);
        assert_eq!(state.held_leases(), vec![LeaseId::new(7)]);
        reports.finished(&task(7, 1), Err("x".into()));
        assert_eq!(state.unacked(), 1, "an answer in the inbox is not acknowledged");
        assert!(state.record_inbox().is_none(), "no stream open");
        reports.abandoned();
        assert_eq!(state.in_flight(), 0);
        assert_eq!(state.held_leases(), vec![LeaseId::new(7)], "job 2 is still held");
        let (tx, _rx) = mpsc::channel(4);
        assert_eq!(state.connected(tx).len(), 1);
        reports.finished(&task(7, 2), Err("x".into()));
        assert_eq!(state.record_inbox().map(|(_, answers)| answers.len()), Some(1));
        assert!(state.held_leases().is_empty());
        state.acknowledged(JobId::new(1), LeaseId::new(7));
        assert_eq!(state.unacked(), 1);
        state.disconnected();
        assert_eq!(state.connected(mpsc::channel(1).0).len(), 1);
    }

    /// While the lanes are busy an answer waits for a burst; a flush (the lease loop about to
    /// ask for work) sends it at once, and so do the lanes running dry. The lease loop is woken
    /// when the jobs left with the lanes reach its low-water mark, not before.
    #[test]
    fn answers_leave_in_bursts_on_a_flush_or_when_the_lanes_run_dry() {
        let rt = tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap();
        rt.block_on(async {
            let state = std::sync::Arc::new(State::default());
            let reports = state.reports();
            let (stream, mut sent) = mpsc::channel(16);
            assert!(state.connected(stream).is_empty());
            tokio::spawn(collect(state.clone()));
            state.leased(LeaseId::new(1), [1, 2, 3, 4].map(JobId::new));
            let wait = std::time::Duration::from_secs(5);
            let room = tokio::spawn({
                let state = state.clone();
                async move { state.wait_for_room(1, wait).await }
            });
            tokio::task::yield_now().await;

            reports.finished(&task(1, 1), Err("x".into()));
            for _ in 0..10 {
                tokio::task::yield_now().await;
            }
            assert_eq!(state.in_flight(), 3);
            assert!(!room.is_finished(), "three jobs are still with the lanes");
            assert!(sent.try_recv().is_err(), "held while three jobs are with the lanes");
            state.flush();
            let first = tokio::time::timeout(wait, sent.recv()).await.unwrap().unwrap();
            assert_eq!(first.id, JobId::new(1));

            reports.finished(&task(1, 2), Err("x".into()));
            reports.finished(&task(1, 3), Err("x".into()));
            assert!(room.await.unwrap(), "one job left: the lease loop is woken");
            reports.finished(&task(1, 4), Err("x".into()));
            let mut got = Vec::new();
            for _ in 0..3 {
                got.push(tokio::time::timeout(wait, sent.recv()).await.unwrap().unwrap().id);
            }
            assert_eq!(got, [2, 3, 4].map(JobId::new));
            assert_eq!(state.unacked(), 4, "every answer is kept until acknowledged");
        });
    }
}
