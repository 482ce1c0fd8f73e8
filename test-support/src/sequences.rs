//! Many seeded sequences run, and the first failure of each kind kept: the random tests of both
//! models, with the environment variables that size them.

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Mutex;

/// The number in environment variable `name` (`_` allowed between digits: `1_000_000`), if it
/// is set to one.
pub fn env_u64(name: &str) -> Option<u64> {
    std::env::var(name).ok().and_then(|v| v.replace('_', "").parse().ok())
}

/// Which seeds a random test runs, and how.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Sequences {
    /// The first seed; the others follow it (wrapping).
    pub first: u64,
    /// How many sequences.
    pub count: u64,
    /// Threads that run them (1: the test's own).
    pub threads: usize,
    /// Go on after a failure, for the first failure of every kind (else stop at the first).
    pub all_kinds: bool,
}

impl Sequences {
    /// Read from the environment: `{prefix}_SEQUENCES` (default `count`), `{prefix}_SEED` (the
    /// first seed, default `first`) and `{prefix}_ALL_KINDS=1`. More sequences than the default
    /// run on every core.
    pub fn from_env(prefix: &str, count: u64, first: u64) -> Sequences {
        let sequences = env_u64(&format!("{prefix}_SEQUENCES")).unwrap_or(count);
        let threads = if sequences > count {
            std::thread::available_parallelism().map_or(1, |n| n.get())
        } else {
            1
        };
        Sequences {
            first: env_u64(&format!("{prefix}_SEED")).unwrap_or(first),
            count: sequences,
            threads,
            all_kinds: std::env::var(format!("{prefix}_ALL_KINDS")).is_ok_and(|v| v == "1"),
        }
    }

    /// Runs `one` on each seed; the first failure (in seed order) of each kind (`kind`), with
    /// its seed. Without `all_kinds` no new sequence starts after a failure.
    pub fn run<F: Send>(
        &self,
        one: impl Fn(u64) -> Result<(), F> + Sync,
        kind: impl Fn(&F) -> String + Sync,
    ) -> BTreeMap<String, (u64, F)> {
        let next = AtomicU64::new(0);
        let failures = Mutex::new(BTreeMap::<String, (u64, F)>::new());
        let worker = || loop {
            let i = next.fetch_add(1, Ordering::Relaxed);
            let stop = !self.all_kinds && !failures.lock().unwrap().is_empty();
            if i >= self.count || stop {
                break;
            }
            let seed = self.first.wrapping_add(i);
            if let Err(failure) = one(seed) {
                let mut failures = failures.lock().unwrap();
                let earlier = |s: &u64| s.wrapping_sub(self.first) < i;
                match failures.get(&kind(&failure)) {
                    Some((s, _)) if earlier(s) => {}
                    _ => {
                        failures.insert(kind(&failure), (seed, failure));
                    }
                }
            }
        };
        if self.threads <= 1 {
            // On the test's thread: a panic keeps its own message.
            worker();
        } else {
            std::thread::scope(|scope| {
                for _ in 0..self.threads {
                    scope.spawn(worker);
                }
            });
        }
        failures.into_inner().unwrap()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sequences(first: u64, count: u64, threads: usize, all_kinds: bool) -> Sequences {
        Sequences { first, count, threads, all_kinds }
    }

    /// Seeds 13, 16, 19... fail "three" (one more than a multiple of 3), 15, 20, 30... "five".
    fn one(seed: u64) -> Result<(), (u64, &'static str)> {
        match seed {
            s if s % 3 == 1 => Err((s, "three")),
            s if s % 5 == 0 => Err((s, "five")),
            _ => Ok(()),
        }
    }

    #[test]
    fn the_first_failure_of_each_kind_is_kept_in_seed_order() {
        for threads in [1, 4] {
            let found = sequences(11, 20, threads, true).run(one, |f| f.1.to_string());
            let seeds: Vec<(&str, u64)> =
                found.iter().map(|(k, (s, _))| (k.as_str(), *s)).collect();
            assert_eq!(seeds, [("five", 15), ("three", 13)], "{threads} threads");
        }
        // Stopping at the first failure: one kind.
        let found = sequences(11, 20, 1, false).run(one, |f| f.1.to_string());
        assert_eq!(found.len(), 1);
        assert_eq!(found["three"].0, 13);
    }

    #[test]
    fn seeds_wrap_and_a_clean_run_has_no_failures() {
        let found = sequences(u64::MAX, 2, 1, true)
            .run(|seed| if seed == 0 { Err(seed) } else { Ok(()) }, |_| "zero".into());
        assert_eq!(found["zero"].0, 0);
        assert!(sequences(2, 5, 2, false).run(|_| Ok::<(), ()>(()), |_| String::new()).is_empty());
    }

    #[test]
    fn numbers_in_the_environment_may_have_underscores() {
        std::env::set_var("NQ_TEST_SUPPORT_NUMBER", "1_000");
        assert_eq!(env_u64("NQ_TEST_SUPPORT_NUMBER"), Some(1_000));
        assert_eq!(env_u64("NQ_TEST_SUPPORT_UNSET"), None);
    }
}
