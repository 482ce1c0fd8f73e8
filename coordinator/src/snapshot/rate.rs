//! The one rule for a run's rate: jobs counted per second over a window, and the quiet time since
//! the last counted result. The engine measures it live over the last [`RATE_WINDOW`] of this
//! process ([`RunRate`]); a state file read offline has no live clock, so it measures the same way
//! over the span of its result rows ([`per_second`] on that span).

use std::collections::VecDeque;
use std::time::{Duration, Instant};

/// How far back the live rate looks: long enough for a steady ETA, short enough to follow a
/// change in the cluster within minutes.
pub const RATE_WINDOW: Duration = Duration::from_secs(5 * 60);

/// How often the live rate keeps a sample of the counts (at most): the steps its window moves in.
const RATE_SAMPLE_EVERY: Duration = Duration::from_secs(1);

/// `count` things over `seconds`, per second; `None` over an empty or negative span.
pub fn per_second(count: u64, seconds: f64) -> Option<f64> {
    (seconds > 0.0).then(|| count as f64 / seconds)
}

/// The counts at one moment.
#[derive(Debug, Clone, Copy)]
struct Sample {
    at: Instant,
    done: u64,
    nodes: u64,
}

/// The rate measured at one moment.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct RateNow {
    /// Jobs counted (done) per second over the window: the rate behind the ETA.
    pub jobs_per_second: f64,
    /// Search nodes of the counted results per second over the same window.
    pub nodes_per_second: f64,
    /// Seconds since the last counted result, or since the start when none was counted yet.
    pub quiet_seconds: f64,
}

/// The live rate of a run, kept by the engine.
#[derive(Debug, Clone)]
pub struct RunRate {
    started: Instant,
    samples: VecDeque<Sample>,
    last_counted: Option<Instant>,
}

impl RunRate {
    /// A rate starting at `now` with `done` jobs already counted (by earlier processes).
    pub fn new(now: Instant, done: u64) -> RunRate {
        let mut samples = VecDeque::new();
        samples.push_back(Sample { at: now, done, nodes: 0 });
        RunRate { started: now, samples, last_counted: None }
    }

    /// A result was counted at `now`.
    pub fn counted(&mut self, now: Instant) {
        self.last_counted = Some(now);
    }

    /// The rate at `now`, with `done` jobs counted and `nodes` searched by this process. Keeps a
    /// sample now and then, and forgets those the window no longer needs.
    pub fn measure(&mut self, now: Instant, done: u64, nodes: u64) -> RateNow {
        if self.samples.back().is_none_or(|s| now.duration_since(s.at) >= RATE_SAMPLE_EVERY) {
            self.samples.push_back(Sample { at: now, done, nodes });
        }
        // The oldest sample kept is the newest one at least a window old.
        while self.samples.get(1).is_some_and(|s| now.duration_since(s.at) >= RATE_WINDOW) {
            self.samples.pop_front();
        }
        let from = self.samples.front().copied().unwrap_or(Sample { at: now, done, nodes });
        let span = now.duration_since(from.at).as_secs_f64().max(1e-3);
        let since_start = now.duration_since(self.started).as_secs_f64();
        RateNow {
            jobs_per_second: per_second(done.saturating_sub(from.done), span).unwrap_or(0.0),
            nodes_per_second: per_second(nodes.saturating_sub(from.nodes), span).unwrap_or(0.0),
            quiet_seconds: self
                .last_counted
                .map_or(since_start, |t| now.duration_since(t).as_secs_f64()),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_rate_covers_the_window_and_no_more() {
        let t0 = Instant::now();
        let mut rate = RunRate::new(t0, 100);
        let at = |s: u64| t0 + Duration::from_secs(s);
        // 10 jobs a second for the first 10 s (counted on top of the 100 of earlier processes).
        for s in 1..=10 {
            rate.counted(at(s));
            let now = rate.measure(at(s), 100 + 10 * s, 1000 * s);
            assert_eq!(now.jobs_per_second, 10.0);
            assert_eq!(now.nodes_per_second, 1000.0);
            assert_eq!(now.quiet_seconds, 0.0);
        }
        // Then nothing: the rate falls as the window fills with quiet, the quiet time grows.
        let window = RATE_WINDOW.as_secs();
        let now = rate.measure(at(window), 200, 10_000);
        assert_eq!(now.jobs_per_second, 100.0 / window as f64);
        assert_eq!(now.quiet_seconds, (window - 10) as f64);
        // A window later, only the quiet is left in it.
        let now = rate.measure(at(2 * window + 20), 200, 10_000);
        assert_eq!(now.jobs_per_second, 0.0);
    }

    #[test]
    fn quiet_counts_from_the_start_until_a_first_result() {
        let t0 = Instant::now();
        let mut rate = RunRate::new(t0, 0);
        let now = rate.measure(t0 + Duration::from_secs(7), 0, 0);
        assert_eq!((now.jobs_per_second, now.quiet_seconds), (0.0, 7.0));
        assert_eq!(per_second(5, 0.0), None);
        assert_eq!(per_second(5, 2.0), Some(2.5));
    }
}
