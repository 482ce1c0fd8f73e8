//! A failure's kind, the shrinking of a failing sequence, and panics taken as failures.

use std::any::Any;
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::time::{Duration, Instant};

/// The kind of a failure ("invariant 1", "panic", "end"...): its text up to the first `:`, past
/// an `after step N: ` the engine's model puts first. Shrinking keeps the kind.
pub fn failure_kind(failure: &str) -> &str {
    let tail = match failure.split_once(": ") {
        Some((head, tail)) if head.starts_with("after step") => tail,
        _ => failure,
    };
    tail.split(':').next().unwrap_or(tail)
}

/// Delta debugging: drops chunks of `events` (halving the chunk down to one event) while
/// `fails` still says the rest fails (with a message), until no one event can be dropped or
/// `within` has passed. The shortest sequence found, and the message of its failure (none if
/// nothing could be dropped).
pub fn shrink<E: Clone, M>(
    events: &[E],
    mut fails: impl FnMut(&[E]) -> Option<M>,
    within: Option<Duration>,
) -> (Vec<E>, Option<M>) {
    let started = Instant::now();
    let out_of_time = || within.is_some_and(|w| started.elapsed() >= w);
    let mut best = events.to_vec();
    let mut message = None;
    let mut chunk = (best.len() / 2).max(1);
    loop {
        let mut progress = false;
        let mut i = 0;
        while i < best.len() && !out_of_time() {
            let mut candidate = best.clone();
            candidate.drain(i..(i + chunk).min(best.len()));
            match fails(&candidate) {
                Some(m) => {
                    best = candidate;
                    message = Some(m);
                    progress = true;
                }
                None => i += chunk,
            }
        }
        if (chunk == 1 && !progress) || out_of_time() {
            break;
        }
        if !progress || chunk > 1 {
            chunk = (chunk / 2).max(1);
        }
    }
    (best, message)
}

/// Runs `f`; a panic is a failure, `panic: ` and its text.
pub fn catch_panic<T>(f: impl FnOnce() -> Result<T, String>) -> Result<T, String> {
    catch_unwind(AssertUnwindSafe(f)).unwrap_or_else(|e| Err(format!("panic: {}", panic_text(&e))))
}

/// The message of a caught panic.
pub fn panic_text(e: &Box<dyn Any + Send>) -> String {
    e.downcast_ref::<String>()
        .cloned()
        .or_else(|| e.downcast_ref::<&str>().map(|s| s.to_string()))
        .unwrap_or_else(|| "a panic".into())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn kinds_are_the_text_before_the_first_colon_past_the_step() {
        assert_eq!(failure_kind("invariant 1: job 3 counted"), "invariant 1");
        assert_eq!(failure_kind("after step 7: invariant 3: w2 untrusted"), "invariant 3");
        assert_eq!(failure_kind("panic: index out of bounds"), "panic");
        assert_eq!(failure_kind("the run did not end"), "the run did not end");
    }

    #[test]
    fn shrinking_keeps_only_the_events_the_failure_needs() {
        let events: Vec<u32> = (0..40).collect();
        let mut runs = 0;
        let fails = |e: &[u32]| {
            runs += 1;
            (e.contains(&7) && e.contains(&31)).then(|| format!("{} events", e.len()))
        };
        let (small, message) = shrink(&events, fails, None);
        assert_eq!(small, [7, 31]);
        assert_eq!(message.as_deref(), Some("2 events"));
        assert!(runs < 200, "{runs} runs");
        // Nothing to drop: the sequence as it was, no message.
        let (same, none) = shrink(&[7, 31], |e| (e.len() == 2).then_some(()), None);
        assert_eq!((same, none), (vec![7, 31], None));
    }

    #[test]
    fn a_panic_is_a_failure_with_its_text() {
        assert_eq!(catch_panic(|| Ok::<_, String>(3)), Ok(3));
        let failed = catch_panic::<()>(|| panic!("boom {}", 1));
        assert_eq!(failed, Err("panic: boom 1".to_string()));
    }
}
