//! The decisions on leases: handing jobs out ([`Scheduler::lease_checked`]), keeping them
//! ([`Scheduler::heartbeat`]), taking them back when their deadline passes
//! ([`Scheduler::expire`]) or when the worker gives them up ([`Scheduler::release`]).

use crate::ids::{JobId, LeaseId, WorkerId};
use crate::jobs::{Pick, Standing};
use crate::outcome::Change;
use crate::ruling::Need;
use crate::Scheduler;
use std::cmp::Reverse;
use std::time::Instant;

impl Scheduler {
    /// Leases up to `max_jobs` pending jobs (longest first; cheapest first on probation) to
    /// `worker_id`, without spot checks
    /// (see [`Scheduler::lease_checked`]).
    pub fn lease(
        &mut self,
        worker_id: WorkerId,
        max_jobs: usize,
        now: Instant,
    ) -> Option<(LeaseId, Vec<JobId>)> {
        self.lease_checked(worker_id, max_jobs, false, now)
    }

    /// Leases up to `max_jobs` jobs to `worker_id`, within the room its party's cap leaves (see
    /// [`Scheduler::party_cap`]): pending ones, longest first (cheapest first for a party on
    /// probation); when too few are left, copies of jobs leased far past their expected time. A job awaiting another opinion goes to a party that
    /// has not given one yet, never back to the one that did.
    ///
    /// With `spot_checks`, the worker's first lease and about `spot_check_rate` of the jobs it
    /// is given afterwards are jobs whose answer is already known, in place of a pending job and
    /// sorted among the others by cost like any job: nothing tells the worker which they are.
    pub fn lease_checked(
        &mut self,
        worker_id: WorkerId,
        max_jobs: usize,
        spot_checks: bool,
        now: Instant,
    ) -> Option<(LeaseId, Vec<JobId>)> {
        let max_jobs = max_jobs.min(self.room(worker_id, now));
        if self.is_untrusted(worker_id) || max_jobs == 0 {
            return None;
        }
        let mut picked = self.pick_pending(worker_id, max_jobs);
        let mut extra = Vec::new();
        if picked.len() < max_jobs {
            self.overdue_copies(worker_id, max_jobs - picked.len(), now, &mut extra);
        }
        if spot_checks {
            self.add_spot_check(worker_id, max_jobs, &mut picked, &mut extra);
        }
        if picked.is_empty() && extra.is_empty() {
            return None;
        }
        let lease_id = self.leases.next_id();
        let mut job_ids: Vec<JobId> = picked.iter().chain(&extra).copied().collect();
        job_ids.sort_by_key(|&id| (Reverse(self.jobs.entry(id).estimate), id));
        self.outbox.push(Change::Lease { lease_id, worker_id, job_ids: job_ids.clone() });
        let deadline = now + self.config.lease_duration;
        for &id in &picked {
            let leased = Standing::Leased { lease_id, worker_id, deadline, since: now };
            self.move_job(id, leased);
        }
        let issued = self.leases.issue(worker_id, job_ids.clone(), extra);
        debug_assert_eq!(issued, lease_id);
        self.checked("lease");
        Some((lease_id, job_ids))
    }

    /// Up to `max_jobs` pending jobs for `worker_id`, taken off the queue: longest first, or the
    /// cheapest first for a party on probation (every answer it gives is checked, by the referee
    /// or another party: cheap ones keep those checks cheap and the probation short; a lone
    /// worker then reaches full speed within its first second or so). A job on which
    /// `worker_id`'s party already gave an opinion is left for another party where it waits for
    /// one (another credential, where it waits for that: see `ruling.rs`): its second answer
    /// would prove nothing. A job the referee is also solving is leased all the
    /// same: the second answer is one more cross-check on its party (leasing such jobs last saved
    /// under half a percent of the work, but cut the checks on a worker with a small share so far
    /// that a one-in-fifty faulty worker ended a test run with a wrong total).
    fn pick_pending(&mut self, worker_id: WorkerId, max_jobs: usize) -> Vec<JobId> {
        let probation = self.on_probation(worker_id);
        let end = if probation { Pick::Cheapest } else { Pick::Longest };
        let mut picked = Vec::new();
        let mut set_aside = Vec::new();
        while picked.len() < max_jobs {
            let Some(id) = self.jobs.pop_queued(end) else { break };
            if self.gave_what_it_needs(worker_id, id) {
                set_aside.push(id);
                continue;
            }
            picked.push(id);
        }
        self.jobs.requeue(set_aside);
        picked
    }

    /// Whether `worker_id`'s answer to job `id` would be no evidence the job waits for: its
    /// party already answered it, or the job waits for another credential and `worker_id`'s
    /// credential already backs every answer it has. Where it waits for anyone (nobody answered
    /// it under a live lease), a party may answer it again.
    fn gave_what_it_needs(&self, worker_id: WorkerId, id: JobId) -> bool {
        let job = self.jobs.entry(id);
        if job.counted.is_none() && job.opinions.is_empty() {
            return false;
        }
        let (party, credential) = (self.party(worker_id), self.credential(worker_id));
        let answered = |by: &dyn Fn(&crate::Answer) -> bool| {
            job.counted
                .iter()
                .chain(&job.opinions)
                .any(|o| !self.is_untrusted(o.worker_id) && by(o))
        };
        match self.need(id) {
            Need::Anyone => false,
            Need::OtherParty => answered(&|o| o.party() == party),
            // Its credential adds evidence only to an answer it does not back yet.
            Need::OtherCredential => {
                answered(&|o| o.party() == party)
                    || !answered(&|o| {
                        !answered(&|p| p.credential == credential && p.agrees(&o.counts))
                    })
            }
        }
    }

    /// Adds a spot check to a lease when one is due: on the worker's first lease, then at about
    /// `spot_check_rate` per job. It takes a pending job's place, so the lease keeps its size.
    fn add_spot_check(
        &mut self,
        worker_id: WorkerId,
        max_jobs: usize,
        picked: &mut Vec<JobId>,
        extra: &mut Vec<JobId>,
    ) {
        let due = !self.checks.checked.contains(&worker_id)
            || self.rng.unit()
                < self.config.spot_check_rate * (picked.len() + extra.len()).max(1) as f64;
        if !due {
            return;
        }
        let Some(id) = self.draw_spot_check(worker_id, picked, extra) else { return };
        self.checks.checked.insert(worker_id);
        if picked.len() + extra.len() >= max_jobs {
            if let Some(back) = picked.pop() {
                self.jobs.requeue([back]);
            }
        }
        if self.jobs.standing(id) == Standing::Pending {
            picked.push(id);
        } else {
            extra.push(id);
        }
    }

    /// Extends `lease_ids` of `worker_id`: each job still held under them gets a new deadline,
    /// one lease duration away but never past its hard deadline (twice its overdue time at the
    /// measured rate): heartbeats keep a lease alive, they cannot hold a job for ever. A job that
    /// left the lease (expired, answered, taken back) is not re-attached. A lease with nothing
    /// left is reported lost.
    pub fn heartbeat(
        &mut self,
        worker_id: WorkerId,
        lease_ids: &[LeaseId],
        now: Instant,
    ) -> Vec<LeaseId> {
        // Nothing durable changes: deadlines are not stored.
        let renewal = now + self.config.lease_duration;
        let mut lost = Vec::new();
        let rate = self.seconds_per_estimate(now);
        // Each lease once, however often the call names it (a renewal walks the lease's jobs).
        let mut lease_ids = lease_ids.to_vec();
        lease_ids.sort_unstable();
        lease_ids.dedup();
        for lease_id in lease_ids {
            let Some(lease) = self.leases.get(lease_id) else {
                lost.push(lease_id);
                continue;
            };
            if lease.worker_id != worker_id || self.is_untrusted(worker_id) || !lease.active {
                lost.push(lease_id);
                continue;
            }
            let mut holds_any = false;
            let extra = lease.extra.clone();
            for id in lease.job_ids.clone() {
                let job = self.jobs.entry(id);
                if let Standing::Leased { lease_id: l, since, .. } = job.standing() {
                    if l == lease_id {
                        let hard = self.hard_deadline(rate, job.estimate, since);
                        let deadline = hard.map_or(renewal, |h| h.min(renewal));
                        holds_any |= self.jobs.renew(id, lease_id, deadline);
                        continue;
                    }
                }
                // A spot check or an overdue copy: held until answered (or given up).
                let open = matches!(job.standing(), Standing::Done | Standing::Leased { .. });
                if open && extra.contains(&id) && !self.answered(worker_id, id) {
                    holds_any = true;
                }
            }
            if let Some(lease) = self.leases.get_mut(lease_id) {
                lease.active = holds_any;
            }
            if !holds_any {
                lost.push(lease_id);
            }
        }
        self.checked("heartbeat");
        lost
    }

    /// Returns the jobs of leases past their deadline to the pending queue; how many leases
    /// expired.
    pub fn expire(&mut self, now: Instant) -> u64 {
        self.pace.age_out(now, self.config.lease_duration);
        let mut expired_leases = 0;
        for lease_id in self.leases.active(None) {
            let job_ids = self.leases.get(lease_id).map(|l| l.job_ids.clone()).unwrap_or_default();
            let mut expired_any = false;
            let mut still_held = false;
            for id in job_ids {
                if let Standing::Leased { lease_id: l, deadline, .. } = self.jobs.standing(id) {
                    if l == lease_id {
                        if deadline <= now {
                            self.move_job(id, Standing::Pending);
                            expired_any = true;
                        } else {
                            still_held = true;
                        }
                    }
                }
            }
            if expired_any {
                expired_leases += 1;
            }
            if !still_held {
                if let Some(lease) = self.leases.get_mut(lease_id) {
                    lease.active = false;
                }
            }
        }
        self.leases.expiries += expired_leases;
        self.checked("expire");
        expired_leases
    }

    /// Gives back jobs of a lease (all of them when `job_ids` is empty). Lease id 0 means every
    /// active lease of the worker, including one whose grant it never received. How many jobs
    /// went back to pending.
    pub fn release(&mut self, worker_id: WorkerId, lease_id: LeaseId, job_ids: &[JobId]) -> u32 {
        let released = if lease_id == LeaseId::new(0) {
            let mine = self.leases.active(Some(worker_id));
            mine.into_iter().map(|id| self.release_one(worker_id, id, &[])).sum()
        } else {
            self.release_one(worker_id, lease_id, job_ids)
        };
        self.checked("release");
        released
    }

    fn release_one(&mut self, worker_id: WorkerId, lease_id: LeaseId, job_ids: &[JobId]) -> u32 {
        let Some(lease) = self.leases.get(lease_id) else { return 0 };
        if lease.worker_id != worker_id {
            return 0;
        }
        let ids: Vec<JobId> =
            if job_ids.is_empty() { lease.job_ids.clone() } else { job_ids.to_vec() };
        let mut released = 0;
        for id in ids {
            let held = self.jobs.get(id).is_some_and(
                |j| matches!(j.standing(), Standing::Leased { lease_id: l, .. } if l == lease_id),
            );
            if held {
                self.move_job(id, Standing::Pending);
                released += 1;
            }
        }
        released
    }
}
