//! The recent rates of a run: a ring of counter samples taken by a tokio task, from which the status
//! page draws results/s and nodes/s over the last hours and estimates the time left.

use crate::metrics::Metrics;
use nqueens_scheduler::state::JobState;
use parking_lot::Mutex;
use serde::Serialize;
use std::collections::VecDeque;
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

/// How often the coordinator samples its counters.
pub const SAMPLE_EVERY: Duration = Duration::from_secs(10);

/// How many samples are kept: six hours at one every [`SAMPLE_EVERY`].
pub const HISTORY_SAMPLES: usize = 6 * 3600 / 10;

/// The coordinator's counters at one moment.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Sample {
    /// Unix time in seconds.
    pub at: f64,
    /// Results committed since the coordinator started.
    pub results: u64,
    /// Search nodes of those results.
    pub nodes: u64,
    /// Jobs done (counted), over the whole run.
    pub done: u64,
}

impl Sample {
    /// The counters of `metrics` now.
    pub fn take(metrics: &Metrics) -> Sample {
        let at = SystemTime::now().duration_since(UNIX_EPOCH).map_or(0.0, |d| d.as_secs_f64());
        Sample {
            at,
            results: metrics.results_accepted.load(Ordering::Relaxed),
            nodes: metrics.nodes.load(Ordering::Relaxed),
            done: metrics.jobs[JobState::Done as usize].load(Ordering::Relaxed),
        }
    }
}

/// Rates between two samples, placed at the later one.
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
pub struct RatePoint {
    /// Seconds before the newest sample (or the moment asked about).
    pub ago_seconds: f64,
    /// Results committed per second.
    pub results_per_second: f64,
    /// Search nodes of those results per second.
    pub nodes_per_second: f64,
}

/// Rates over a window ending now.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Rates {
    /// Results committed per second.
    pub results_per_second: f64,
    /// Search nodes of those results per second.
    pub nodes_per_second: f64,
    /// Jobs done per second (less than results/s by the jobs solved twice for verification).
    pub done_per_second: f64,
}

/// A bounded ring of samples, oldest first; the oldest is dropped when it is full.
#[derive(Debug, Clone)]
pub struct History {
    samples: VecDeque<Sample>,
    capacity: usize,
}

impl History {
    /// An empty ring keeping at most `capacity` samples (at least two).
    pub fn new(capacity: usize) -> History {
        let capacity = capacity.max(2);
        History { samples: VecDeque::with_capacity(capacity.min(4096)), capacity }
    }

    /// Adds the newest sample, dropping the oldest when the ring is full.
    pub fn push(&mut self, sample: Sample) {
        if self.samples.len() == self.capacity {
            self.samples.pop_front();
        }
        self.samples.push_back(sample);
    }

    /// The samples kept, oldest first.
    #[cfg(test)]
    pub fn samples(&self) -> impl Iterator<Item = &Sample> {
        self.samples.iter()
    }

    /// How many samples are kept.
    #[cfg(test)]
    pub fn len(&self) -> usize {
        self.samples.len()
    }

    /// Whether no sample was taken yet.
    #[cfg(test)]
    pub fn is_empty(&self) -> bool {
        self.samples.is_empty()
    }

    /// The rates between consecutive samples, and from the newest sample to `now` (when at least a
    /// second apart), oldest first, averaged in groups so that there are at most `max_points`.
    /// `ago_seconds` counts back from `now`.
    pub fn rate_points(&self, now: &Sample, max_points: usize) -> Vec<RatePoint> {
        let mut all: Vec<Sample> = self.samples.iter().copied().collect();
        if all.last().is_some_and(|last| now.at - last.at >= 1.0) {
            all.push(*now);
        }
        let points: Vec<RatePoint> = all
            .windows(2)
            .filter(|w| w[1].at > w[0].at)
            .map(|w| {
                let dt = w[1].at - w[0].at;
                RatePoint {
                    ago_seconds: (now.at - w[1].at).max(0.0),
                    results_per_second: w[1].results.saturating_sub(w[0].results) as f64 / dt,
                    nodes_per_second: w[1].nodes.saturating_sub(w[0].nodes) as f64 / dt,
                }
            })
            .collect();
        let group = points.len().div_ceil(max_points.max(1)).max(1);
        points
            .chunks(group)
            .map(|c| {
                let k = c.len() as f64;
                RatePoint {
                    ago_seconds: c[c.len() - 1].ago_seconds,
                    results_per_second: c.iter().map(|p| p.results_per_second).sum::<f64>() / k,
                    nodes_per_second: c.iter().map(|p| p.nodes_per_second).sum::<f64>() / k,
                }
            })
            .collect()
    }

    /// The rates from the oldest sample at most `window` before `now` up to `now` (from the newest
    /// sample if all are older); `None` until the two are at least a second apart.
    pub fn rates_over(&self, now: &Sample, window: Duration) -> Option<Rates> {
        let since = now.at - window.as_secs_f64();
        let from = self.samples.iter().find(|s| s.at >= since).or(self.samples.back())?;
        let dt = now.at - from.at;
        (dt >= 1.0).then(|| Rates {
            results_per_second: now.results.saturating_sub(from.results) as f64 / dt,
            nodes_per_second: now.nodes.saturating_sub(from.nodes) as f64 / dt,
            done_per_second: now.done.saturating_sub(from.done) as f64 / dt,
        })
    }
}

/// Samples `metrics` into `history` now and then every `every`, until the task is dropped.
pub async fn sample_every(metrics: Arc<Metrics>, history: Arc<Mutex<History>>, every: Duration) {
    let mut tick = tokio::time::interval(every);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Skip);
    loop {
        tick.tick().await;
        history.lock().push(Sample::take(&metrics));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn s(at: f64, results: u64, nodes: u64, done: u64) -> Sample {
        Sample { at, results, nodes, done }
    }

    #[test]
    fn the_ring_keeps_the_newest_samples() {
        let mut h = History::new(3);
        assert!(h.is_empty());
        for i in 0..5u64 {
            h.push(s(i as f64 * 10.0, i, i * 100, i));
        }
        assert_eq!(h.len(), 3);
        let at: Vec<f64> = h.samples().map(|x| x.at).collect();
        assert_eq!(at, [20.0, 30.0, 40.0]);
        // Six hours at one sample every ten seconds.
        assert_eq!(HISTORY_SAMPLES, 2160);
        let mut full = History::new(HISTORY_SAMPLES);
        for i in 0..HISTORY_SAMPLES as u64 + 7 {
            full.push(s(i as f64, i, i, i));
        }
        assert_eq!(full.len(), HISTORY_SAMPLES);
        assert_eq!(full.samples().next().unwrap().at, 7.0);
    }

    #[test]
    fn rates_between_samples_and_up_to_now() {
        let mut h = History::new(10);
        h.push(s(100.0, 0, 0, 0));
        h.push(s(110.0, 50, 5_000, 40));
        h.push(s(120.0, 150, 25_000, 140));
        let now = s(125.0, 200, 30_000, 190);
        let points = h.rate_points(&now, 100);
        assert_eq!(
            points,
            [
                RatePoint { ago_seconds: 15.0, results_per_second: 5.0, nodes_per_second: 500.0 },
                RatePoint { ago_seconds: 5.0, results_per_second: 10.0, nodes_per_second: 2000.0 },
                RatePoint { ago_seconds: 0.0, results_per_second: 10.0, nodes_per_second: 1000.0 },
            ]
        );
        // Averaged in groups of two when at most two points are wanted.
        let two = h.rate_points(&now, 2);
        assert_eq!(two.len(), 2);
        assert_eq!(two[0].results_per_second, 7.5);
        assert_eq!(two[1], points[2]);
        // Over the last 15 s: from the sample at 110.
        let r = h.rates_over(&now, Duration::from_secs(15)).unwrap();
        assert_eq!((r.results_per_second, r.done_per_second), (10.0, 10.0));
        // A window shorter than the gap to the newest sample uses the newest sample.
        let r = h.rates_over(&now, Duration::from_secs(1)).unwrap();
        assert_eq!(r.nodes_per_second, 1000.0);
        // Nothing to measure yet.
        assert_eq!(History::new(5).rates_over(&now, Duration::from_secs(60)), None);
        assert_eq!(h.rates_over(&s(120.5, 151, 0, 0), Duration::from_millis(200)), None);
        assert!(History::new(5).rate_points(&now, 10).is_empty());
    }

    #[test]
    fn counters_that_go_back_give_zero_not_a_wrap() {
        let mut h = History::new(4);
        h.push(s(0.0, 10, 10, 10));
        let now = s(10.0, 10, 10, 5);
        assert_eq!(h.rates_over(&now, Duration::from_secs(60)).unwrap().done_per_second, 0.0);
    }
}
