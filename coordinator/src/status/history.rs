//! The rate chart of a run: a ring of samples of the counters in the engine's snapshots (results
//! counted, nodes searched), taken every [`CHART_SAMPLE_EVERY`] by the status cache's thread
//! (`cache.rs`), from which the status page draws results/s and nodes/s over the last six hours.
//! (The rate behind the ETA is the snapshot's own, by the one rule of `snapshot/rate.rs`.)

use crate::snapshot::RunSnapshot;
use serde::Serialize;
use std::collections::VecDeque;
use std::time::Duration;

/// How often the status cache samples the snapshot's counters for the rate chart (the live rate
/// behind the ETA keeps samples of its own, `snapshot/rate.rs`).
pub const CHART_SAMPLE_EVERY: Duration = Duration::from_secs(10);

/// How many samples are kept: six hours at one every [`CHART_SAMPLE_EVERY`].
pub const HISTORY_SAMPLES: usize = 6 * 3600 / CHART_SAMPLE_EVERY.as_secs() as usize;

/// The coordinator's counters at one moment.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Sample {
    /// Unix time in seconds.
    pub at: f64,
    /// Results committed since the coordinator started.
    pub results: u64,
    /// Search nodes of those results.
    pub nodes: u64,
}

impl Sample {
    /// The counters of `snapshot`, at the moment it shows.
    pub fn of(snapshot: &RunSnapshot) -> Sample {
        let counters = snapshot.live.counters.unwrap_or_default();
        Sample {
            at: snapshot.taken_unix,
            results: counters.results_accepted,
            nodes: counters.nodes,
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
}

#[cfg(test)]
mod tests {
    use super::*;

    fn s(at: f64, results: u64, nodes: u64) -> Sample {
        Sample { at, results, nodes }
    }

    #[test]
    fn the_ring_keeps_the_newest_samples() {
        let mut h = History::new(3);
        assert!(h.is_empty());
        for i in 0..5u64 {
            h.push(s(i as f64 * 10.0, i, i * 100));
        }
        assert_eq!(h.len(), 3);
        let at: Vec<f64> = h.samples().map(|x| x.at).collect();
        assert_eq!(at, [20.0, 30.0, 40.0]);
        // Six hours at one sample every ten seconds.
        assert_eq!(HISTORY_SAMPLES, 2160);
        let mut full = History::new(HISTORY_SAMPLES);
        for i in 0..HISTORY_SAMPLES as u64 + 7 {
            full.push(s(i as f64, i, i));
        }
        assert_eq!(full.len(), HISTORY_SAMPLES);
        assert_eq!(full.samples().next().unwrap().at, 7.0);
    }

    #[test]
    fn rates_between_samples_and_up_to_now() {
        let mut h = History::new(10);
        h.push(s(100.0, 0, 0));
        h.push(s(110.0, 50, 5_000));
        h.push(s(120.0, 150, 25_000));
        let now = s(125.0, 200, 30_000);
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
        assert!(History::new(5).rate_points(&now, 10).is_empty());
    }

    #[test]
    fn counters_that_go_back_give_zero_not_a_wrap() {
        let mut h = History::new(4);
        h.push(s(0.0, 10, 10));
        let points = h.rate_points(&s(10.0, 5, 5), 10);
        assert_eq!((points[0].results_per_second, points[0].nodes_per_second), (0.0, 0.0));
    }
}
