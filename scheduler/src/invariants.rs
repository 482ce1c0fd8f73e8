//! The invariants every decision keeps, checked after each public decision in debug builds
//! (and on demand): the counters agree with a recount, every pending job is queued, every
//! leased job's lease is live and belongs to the job's worker, a done job has a counted answer,
//! and the untrusted hold nothing.

use crate::jobs::Standing;
use crate::Scheduler;

impl Scheduler {
    /// Checks the scheduler's invariants.
    ///
    /// # Panics
    /// With a message naming the decision and the broken invariant, when one does not hold.
    pub fn check_invariants(&self) {
        if let Err(broken) = self.invariants() {
            panic!("scheduler invariant broken: {broken}");
        }
    }

    /// After the decision `what`: the invariants, in debug builds only (they walk every job).
    pub(crate) fn checked(&self, what: &str) {
        #[cfg(debug_assertions)]
        if let Err(broken) = self.invariants() {
            panic!("scheduler invariant broken after {what}: {broken}");
        }
        #[cfg(not(debug_assertions))]
        let _ = what;
    }

    /// The first invariant that does not hold, if one does not.
    fn invariants(&self) -> Result<(), String> {
        self.jobs.check()?;
        for id in self.jobs.ids() {
            let job = self.jobs.entry(id);
            match job.standing() {
                Standing::Leased { lease_id, worker_id, .. } => {
                    let Some(lease) = self.leases.get(lease_id) else {
                        return Err(format!("job {id} is leased under unknown lease {lease_id}"));
                    };
                    if lease.worker_id != worker_id {
                        return Err(format!(
                            "job {id} is held by worker {worker_id} under lease {lease_id} of worker {}",
                            lease.worker_id
                        ));
                    }
                    if !lease.active {
                        return Err(format!("job {id} is held under ended lease {lease_id}"));
                    }
                    if self.is_untrusted(worker_id) {
                        return Err(format!("job {id} is held by untrusted worker {worker_id}"));
                    }
                }
                Standing::Done if job.counted.is_none() => {
                    return Err(format!("job {id} is done without a counted answer"));
                }
                _ => {}
            }
            if let Some(by) = job.counted.map(|c| c.worker_id) {
                if self.is_untrusted(by) {
                    return Err(format!("job {id} counts the answer of untrusted worker {by}"));
                }
            }
        }
        let mut holds = self.party_holds.clone();
        holds.retain(|_, held| *held > 0);
        if holds != self.recount_party_holds() {
            return Err("the jobs held per party disagree with a recount".into());
        }
        if self.leases.next_id().get() == 0 {
            return Err("lease ids start at 1".into());
        }
        Ok(())
    }
}
