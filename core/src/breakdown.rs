//! Where the search's time goes, part by part: timestamp-counter ticks and state counts, kept per
//! thread, of the AVX-512 build's parts (the six-row count, the dead-state tests, each batched
//! row, and the depth-first search above them).
//!
//! The probes are compiled in only with the crate's `breakdown` feature (the solver bench's
//! `--record-trend` prints them: `cargo bench -p nqueens-core --features breakdown --bench solver
//! -- --record-trend 18,27`); without it [`start`] returns 0 and the other probes are empty, so
//! the search compiles to what it is without them. [`ENABLED`] says which it is.
//!
//! A probe reads the timestamp counter twice per batch of states (tens to thousands of states),
//! not per state: it adds a few percent to the parts it times.

/// Whether the probes are compiled in (the `breakdown` feature on an x86-64 target).
pub const ENABLED: bool = cfg!(all(feature = "breakdown", target_arch = "x86_64"));

/// A timed part of the AVX-512 build's search.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Part {
    /// The whole count of one start state (every other part is inside it).
    Total,
    /// The six-row closed form over the states of row `last` that the dead-state test leaves.
    Count,
    /// The dead-state test of the states of row `last` (with forced squares).
    DeadLast,
    /// Row `last - 1`: its dead-state test, its nodes in closed form, and its children.
    Row1,
    /// Row `last - 2` expanded into row `last - 1`.
    Row2,
    /// Row `last - 3` expanded into row `last - 2`.
    Row3,
    /// Row `last - 4` expanded into row `last - 3`.
    Row4,
}

/// A counted event of the AVX-512 build's search.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Event {
    /// States of row `last` given to the dead-state test.
    LastTested,
    /// States of row `last` that it dropped.
    LastDead,
    /// States of row `last - 1` given to their dead-state test.
    Row1Tested,
    /// States of row `last - 1` that it dropped.
    Row1Dead,
}

const PARTS: usize = 7;
const EVENTS: usize = 4;

/// What the probes of one thread gathered since the last [`take`].
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct Breakdown {
    /// Ticks per [`Part`], indexed by `Part as usize`.
    pub ticks: [u64; PARTS],
    /// Counts per [`Event`], indexed by `Event as usize`.
    pub events: [u64; EVENTS],
}

impl Breakdown {
    /// Ticks spent in `part`.
    pub fn ticks(&self, part: Part) -> u64 {
        self.ticks[part as usize]
    }

    /// Times `event` happened.
    pub fn events(&self, event: Event) -> u64 {
        self.events[event as usize]
    }
}

#[cfg(all(feature = "breakdown", target_arch = "x86_64"))]
mod probes {
    use super::{Breakdown, Event, Part};
    use std::cell::Cell;

    thread_local! {
        static GATHERED: Cell<Breakdown> = const {
            Cell::new(Breakdown { ticks: [0; super::PARTS], events: [0; super::EVENTS] })
        };
    }

    #[inline(always)]
    pub fn start() -> u64 {
        // SAFETY: `rdtsc` exists on every x86-64 CPU.
        unsafe { core::arch::x86_64::_rdtsc() }
    }

    #[inline(always)]
    pub fn stop(part: Part, started: u64) {
        let took = start().wrapping_sub(started);
        GATHERED.with(|g| {
            let mut b = g.get();
            b.ticks[part as usize] += took;
            g.set(b);
        });
    }

    #[inline(always)]
    pub fn count(event: Event, times: u64) {
        GATHERED.with(|g| {
            let mut b = g.get();
            b.events[event as usize] += times;
            g.set(b);
        });
    }

    pub fn take() -> Breakdown {
        GATHERED.with(|g| g.take())
    }
}

#[cfg(not(all(feature = "breakdown", target_arch = "x86_64")))]
mod probes {
    use super::{Breakdown, Event, Part};

    #[inline(always)]
    pub fn start() -> u64 {
        0
    }

    #[inline(always)]
    pub fn stop(_: Part, _: u64) {}

    #[inline(always)]
    pub fn count(_: Event, _: u64) {}

    pub fn take() -> Breakdown {
        Breakdown::default()
    }
}

/// The timestamp counter now, to hand to [`stop`] (0 without the probes).
#[inline(always)]
pub(crate) fn start() -> u64 {
    probes::start()
}

/// Adds the ticks since `started` to `part`.
#[inline(always)]
pub(crate) fn stop(part: Part, started: u64) {
    probes::stop(part, started)
}

/// Adds `times` to `event`.
#[inline(always)]
pub(crate) fn count(event: Event, times: u64) {
    probes::count(event, times)
}

/// What this thread's probes gathered since the last call, and starts again from zero (all zero
/// without the probes).
pub fn take() -> Breakdown {
    probes::take()
}
