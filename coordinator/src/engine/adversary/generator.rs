//! Random sequences biased toward the attack shapes, and the shrinking of a failing one.

use super::*;

/// A sequence from `rng`: its setup, the first registrations, and events biased toward the
/// attack shapes (releases and late answers of the adversary, floods that forget its idle
/// identities, restarts).
pub(super) fn generate(rng: &mut SplitMix64) -> (Setup, Vec<Event>) {
    let mut below = |k: u64| rng.below(k) as usize;
    let adversary_shared = below(2) == 0;
    let setup = Setup {
        n: if below(5) == 0 { 9 } else { 8 },
        replication: if below(3) == 0 { 1 } else { 2 },
        max_unproven: 2 + below(2),
        referee: below(3) == 0,
        recheck: [0.0, 0.5, 1.0][below(3)],
        adversary_shared,
        honest_hosts: 2 + below(2),
        honest_shared: !adversary_shared && below(2) == 0,
    };
    // How often the adversary lies: rarely (to earn trust first), or mostly.
    let lie_in_10 = [2, 5, 9][below(3)];
    let party_count = 1 + setup.honest_hosts + usize::from(setup.honest_shared);
    let mut events = vec![Event::Register { party: 0 }, Event::Register { party: 0 }];
    events.extend((1..party_count).map(|party| Event::Register { party }));
    for _ in 0..EVENTS {
        let side = |below: &mut dyn FnMut(u64) -> usize, adversary_in_10: usize| {
            if below(10) < adversary_in_10 {
                Side::Adversary
            } else {
                Side::Honest
            }
        };
        let roll = below(100);
        let who = below(8);
        let pick = below(8);
        let lie = below(10) < lie_in_10;
        let event = match roll {
            0..=9 => {
                let party = if below(10) < 6 { 0 } else { below(party_count as u64) };
                Event::Register { party }
            }
            10..=33 => Event::Lease { side: side(&mut below, 6), who, slots: 1 + below(3) as u32 },
            34..=45 => Event::Release { side: side(&mut below, 8), who, pick },
            46..=70 => Event::Answer { side: side(&mut below, 5), who, pick, lie },
            71..=87 => Event::Late { side: side(&mut below, 8), who, pick, lie },
            88..=95 => Event::Flood,
            _ => Event::Restart,
        };
        events.push(event);
    }
    (setup, events)
}

/// Drops events while the sequence still fails the same way; the shortest found.
pub(super) fn shrink(
    setup: Setup,
    mut events: Vec<Event>,
    board: &Board,
    kind: &str,
) -> Vec<Event> {
    let fails = |events: &[Event]| match run_sequence(setup, events, board) {
        Err((e, _)) => failure_kind(&e) == kind,
        Ok(_) => false,
    };
    let started = Instant::now();
    let mut chunk = events.len() / 2;
    while chunk >= 1 && started.elapsed() < Duration::from_secs(120) {
        let mut at = 0;
        let mut dropped = false;
        while at < events.len() {
            let mut candidate = events.clone();
            candidate.drain(at..(at + chunk).min(events.len()));
            if fails(&candidate) {
                events = candidate;
                dropped = true;
            } else {
                at += chunk;
            }
        }
        if !dropped {
            chunk /= 2;
        }
    }
    events
}

/// Which check a failure broke ("invariant 1", "end", ...).
pub(super) fn failure_kind(failure: &str) -> String {
    let tail = failure.split_once(": ").map_or(failure, |(head, tail)| {
        if head.starts_with("after step") {
            tail
        } else {
            failure
        }
    });
    tail.split(':').next().unwrap_or(tail).to_owned()
}
