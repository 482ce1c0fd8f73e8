//! Random sequences biased toward the attack shapes, and the shrinking of a failing one.

use super::*;

/// The events this model draws, and how often (out of 100).
const MIX: Mix = Mix(&[
    (EventKind::Register, 10),
    (EventKind::Lease, 24),
    (EventKind::Release, 12),
    (EventKind::Answer, 25),
    (EventKind::Late, 17),
    (EventKind::Flood, 8),
    (EventKind::Restart, 4),
]);

/// A sequence from `rng`: its setup, the first registrations, and events biased toward the
/// attack shapes (releases and late answers of the adversary, floods that forget its idle
/// identities, restarts).
pub(super) fn generate(rng: &mut SplitMix64) -> (Setup, Vec<Event>) {
    let setup = draw_setup(rng);
    // How often the adversary lies: rarely (to earn trust first), or mostly.
    let lie_in_10 = [2, 5, 9][rng.below(3) as usize];
    let party_count = setup.party_defs().len();
    let mut events = vec![Event::Register { party: 0 }, Event::Register { party: 0 }];
    events.extend((1..party_count).map(|party| Event::Register { party }));
    for _ in 0..EVENTS {
        let kind = MIX.draw(rng);
        let who = rng.below(8) as usize;
        let pick = rng.below(8) as usize;
        let lie = rng.below(10) < lie_in_10;
        let event = match kind {
            EventKind::Register => {
                let party =
                    if rng.below(10) < 6 { 0 } else { rng.below(party_count as u64) as usize };
                Event::Register { party }
            }
            EventKind::Lease => {
                let side = Side::draw(rng, 6, 10);
                Event::Lease { side, who, slots: 1 + rng.below(3) as u32 }
            }
            EventKind::Release => Event::Release { side: Side::draw(rng, 8, 10), who, pick },
            EventKind::Answer => Event::Answer { side: Side::draw(rng, 5, 10), who, pick, lie },
            EventKind::Late => Event::Late { side: Side::draw(rng, 8, 10), who, pick, lie },
            EventKind::Flood => Event::Flood,
            EventKind::Restart => Event::Restart,
            other => unreachable!("{other:?} is not in the engine model's mix"),
        };
        events.push(event);
    }
    (setup, events)
}

/// A run's setup, drawn.
fn draw_setup(rng: &mut SplitMix64) -> Setup {
    let mut below = |k: u64| rng.below(k) as usize;
    let adversary_shared = below(2) == 0;
    Setup {
        n: if below(5) == 0 { 9 } else { 8 },
        replication: if below(3) == 0 { 1 } else { 2 },
        max_unproven: 2 + below(2),
        referee: below(3) == 0,
        recheck: [0.0, 0.5, 1.0][below(3)],
        adversary_shared,
        honest_hosts: 2 + below(2),
        honest_shared: !adversary_shared && below(2) == 0,
    }
}

/// Drops events while the sequence still fails the same way (the shared delta debugging, for
/// two minutes at most); the shortest found.
pub(super) fn shrink(setup: Setup, events: &[Event], board: &Board, kind: &str) -> Vec<Event> {
    let fails = |events: &[Event]| match run_sequence(setup, events, board) {
        Err((e, _)) => (failure_kind(&e) == kind).then_some(()),
        Ok(_) => None,
    };
    nqueens_test_support::shrink(events, fails, Some(Duration::from_secs(120))).0
}
