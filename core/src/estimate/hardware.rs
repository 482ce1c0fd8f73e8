//! The projection on given hardware: wall time on hosts of some cores and on cards of some speed.
//! Apart from [`super::Projection`] because the same sample is stated again for other hardware
//! (`estimate` learns the card's speed only after the sample: it is a rate over the host's).

use super::{Projection, CARD_COUNTS, CORE_COUNTS};
use serde::{Deserialize, Serialize};

/// The projected wall time of the run on some number of cores.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct OnCores {
    /// Cores (one solver thread each).
    pub cores: u64,
    /// `max(total_cpu_seconds / cores, longest_job_seconds / host_cores)`: a run can finish no
    /// sooner than its longest job, split over one host's cores, however many cores it has.
    pub wall_seconds: f64,
    /// The same in hours.
    pub wall_hours: f64,
}

/// The projected wall time of the run on some number of cards.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct OnCards {
    /// Cards, each as fast as [`Hardware::card_cores`] cores.
    pub cards: u64,
    /// `max(total_cpu_seconds / (cards * card_cores), longest_job_seconds / card_cores)`.
    pub wall_seconds: f64,
    /// The same in days.
    pub wall_days: f64,
}

/// The run's wall time on hosts of `host_cores` cores and on cards of `card_cores` cores each.
/// Field names are those of `estimate --json`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Hardware {
    /// Cores of one host: a worker splits a job over all of them, so the longest job takes
    /// `longest_job_seconds / host_cores` of wall time on one (1: one thread per job).
    pub host_cores: u64,
    /// The longest job's wall seconds on one host of `host_cores` cores.
    pub longest_job_on_host_seconds: f64,
    /// Projected wall time on [`CORE_COUNTS`] cores, in hosts of `host_cores`.
    pub on_cores: Vec<OnCores>,
    /// One card's speed in cores of this machine (a parameter until a card measures it).
    pub card_cores: f64,
    /// The longest job's wall seconds on one card.
    pub longest_job_on_card_seconds: f64,
    /// Projected wall time on [`CARD_COUNTS`] cards of `card_cores` each.
    pub on_cards: Vec<OnCards>,
}

impl Hardware {
    /// `projection` on hosts of `host_cores` cores (at least 1) and cards of `card_cores`.
    pub fn new(projection: &Projection, host_cores: u64, card_cores: f64) -> Hardware {
        let host_cores = host_cores.max(1);
        let on_cores = CORE_COUNTS
            .iter()
            .map(|&cores| {
                let wall_seconds = projection.wall_seconds_on(cores, host_cores);
                OnCores { cores, wall_seconds, wall_hours: wall_seconds / 3600.0 }
            })
            .collect();
        let on_cards = CARD_COUNTS
            .iter()
            .map(|&cards| {
                let wall_seconds = projection.wall_seconds_on_cards(cards, card_cores);
                OnCards { cards, wall_seconds, wall_days: wall_seconds / 86_400.0 }
            })
            .collect();
        let longest = projection.longest_job_seconds;
        Hardware {
            host_cores,
            longest_job_on_host_seconds: longest / host_cores as f64,
            on_cores,
            card_cores,
            longest_job_on_card_seconds: longest / card_cores.max(1e-9),
            on_cards,
        }
    }
}
