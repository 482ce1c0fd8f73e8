//! Counts kept per second of arrival over a sliding window: the one form of "how much lately"
//! for the scheduler's pace (each party's deliveries) and the coordinator's worker rates.

use std::collections::VecDeque;
use std::time::{Duration, Instant};

/// Events counted per second of arrival (oldest first), and their sum. A second opens with its
/// first event and holds every event less than a second after it.
#[derive(Debug, Default, Clone)]
pub struct PerSecond {
    seconds: VecDeque<(Instant, u32)>,
    total: usize,
}

impl PerSecond {
    /// One more event at `now`; true when it opened a new second.
    pub fn add(&mut self, now: Instant) -> bool {
        self.total += 1;
        match self.seconds.back_mut() {
            Some((t, k)) if now.saturating_duration_since(*t) < Duration::from_secs(1) => {
                *k += 1;
                false
            }
            _ => {
                self.seconds.push_back((now, 1));
                true
            }
        }
    }

    /// Forgets the oldest second kept, and says its count.
    pub fn pop_oldest(&mut self) -> Option<u32> {
        let (_, k) = self.seconds.pop_front()?;
        self.total -= k as usize;
        Some(k)
    }

    /// Forgets the seconds that opened more than `keep` before `now`.
    pub fn forget_older(&mut self, now: Instant, keep: Duration) {
        while self.seconds.front().is_some_and(|(t, _)| now.saturating_duration_since(*t) > keep) {
            self.pop_oldest();
        }
    }

    /// The events of the seconds that opened within `window` before `now`.
    pub fn within(&self, now: Instant, window: Duration) -> usize {
        self.seconds
            .iter()
            .filter(|(t, _)| now.saturating_duration_since(*t) <= window)
            .map(|(_, k)| *k as usize)
            .sum()
    }

    /// The count of the `i`-th oldest second kept (0 past the newest).
    pub fn nth(&self, i: usize) -> u32 {
        self.seconds.get(i).map_or(0, |(_, k)| *k)
    }

    /// Every event kept.
    pub fn total(&self) -> usize {
        self.total
    }

    /// Whether nothing is kept.
    pub fn is_empty(&self) -> bool {
        self.seconds.is_empty()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn events_are_counted_per_second_and_forgotten_in_order() {
        let start = Instant::now();
        let mut p = PerSecond::default();
        let ms = |m: u64| start + Duration::from_millis(m);
        assert!(p.add(ms(0)));
        assert!(!p.add(ms(999)));
        assert!(p.add(ms(1000)));
        assert_eq!((p.total(), p.nth(0), p.nth(1), p.nth(2)), (3, 2, 1, 0));
        assert_eq!(p.within(ms(1500), Duration::from_millis(600)), 1);
        assert_eq!(p.within(ms(1500), Duration::from_secs(2)), 3);
        p.forget_older(ms(1500), Duration::from_millis(600));
        assert_eq!((p.total(), p.is_empty()), (1, false));
        assert_eq!(p.pop_oldest(), Some(1));
        assert!(p.is_empty() && p.total() == 0 && p.pop_oldest().is_none());
    }
}
