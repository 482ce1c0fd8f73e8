//! The vocabulary of both models' sequences: the kinds of event, the mix a model draws them in,
//! which side acts, and the parties with the credential each holds.

use nqueens_core::SplitMix64;

/// The adversary's name: always the first party (party 0).
pub const ADVERSARY: &str = "adv";

/// A real party: who controls identities, and the one credential it holds (no rule can tell
/// two credentials of one party apart, so each party holds one).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PartyDef {
    /// [`ADVERSARY`] for the adversary; honest parties are `h1`, `h2`...
    pub name: String,
    /// Holds the shared token (else a per-host token of its own).
    pub shared: bool,
}

impl PartyDef {
    /// The adversary, holding the shared token or a per-host token.
    pub fn adversary(shared: bool) -> PartyDef {
        PartyDef { name: ADVERSARY.into(), shared }
    }

    /// Honest party number `i` (from 1): `h1`, `h2`...
    pub fn honest(i: usize, shared: bool) -> PartyDef {
        PartyDef { name: format!("h{i}"), shared }
    }

    /// Whether this is the adversary.
    pub fn is_adversary(&self) -> bool {
        self.name == ADVERSARY
    }
}

/// Whose identity an event acts through.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Side {
    /// One of the adversary's identities.
    Adversary,
    /// One of an honest party's identities.
    Honest,
}

impl Side {
    /// The adversary `k` times in `n`, else an honest party (one draw of `below(n)`).
    pub fn draw(rng: &mut SplitMix64, k: u64, n: u64) -> Side {
        if rng.below(n) < k {
            Side::Adversary
        } else {
            Side::Honest
        }
    }

    /// Whether this is the adversary's side.
    pub fn is_adversary(self) -> bool {
        self == Side::Adversary
    }
}

/// The kinds of event of the models' sequences. A model draws those it can drive ([`Mix`]); how
/// an event names its identity and job is the model's own.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum EventKind {
    /// A new identity of a party, under the party's credential.
    Register,
    /// An identity forgotten, where the engine's rule for unproven idle identities allows it.
    Forget,
    /// An identity leases jobs.
    Lease,
    /// An identity answers a job it holds (the adversary's answer may be a lie).
    Answer,
    /// An answer under a lease that no longer holds the job.
    Late,
    /// An identity gives its jobs back.
    Release,
    /// An identity's heartbeat.
    Heartbeat,
    /// Time passes: leases expire.
    Wait,
    /// The coordinator restarts from its stored rows.
    Restart,
    /// The coordinator's referee rules on the jobs it was handed.
    Referee,
    /// The coordinator's own answer to a job (a spot check's).
    Reference,
    /// The adversary floods the run with fresh identities (the engine forgets idle ones).
    Flood,
    /// An honest identity leases and answers in full.
    HonestBurst,
}

/// The kinds of event a model draws, each with its weight.
#[derive(Debug, Clone, Copy)]
pub struct Mix(pub &'static [(EventKind, u64)]);

impl Mix {
    /// One kind, drawn by weight (one draw of `below` the total weight; the kinds take its
    /// values in their order).
    pub fn draw(&self, rng: &mut SplitMix64) -> EventKind {
        let total: u64 = self.0.iter().map(|(_, w)| w).sum();
        let mut roll = rng.below(total);
        for &(kind, weight) in self.0 {
            if roll < weight {
                return kind;
            }
            roll -= weight;
        }
        unreachable!("a roll below the total weight")
    }
}

/// One of `from`, uniformly; none if it is empty.
pub fn pick<T: Copy>(rng: &mut SplitMix64, from: &[T]) -> Option<T> {
    (!from.is_empty()).then(|| from[rng.below(from.len() as u64) as usize])
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_mix_draws_each_kind_on_its_share_of_one_roll() {
        const MIX: Mix = Mix(&[(EventKind::Lease, 3), (EventKind::Answer, 1)]);
        let (mut a, mut b) = (SplitMix64::new(9), SplitMix64::new(9));
        let mut seen = [0; 2];
        for _ in 0..1_000 {
            let expected = if b.below(4) < 3 { EventKind::Lease } else { EventKind::Answer };
            let kind = MIX.draw(&mut a);
            assert_eq!(kind, expected);
            seen[usize::from(kind == EventKind::Answer)] += 1;
        }
        assert!(seen[0] > 2 * seen[1] && seen[1] > 100, "{seen:?}");
    }

    #[test]
    fn sides_and_picks_draw_once_each() {
        let (mut a, mut b) = (SplitMix64::new(3), SplitMix64::new(3));
        for _ in 0..100 {
            assert_eq!(Side::draw(&mut a, 6, 10).is_adversary(), b.below(10) < 6);
            assert_eq!(pick(&mut a, &[4, 5, 6]), Some([4, 5, 6][b.below(3) as usize]));
        }
        assert_eq!(pick::<u8>(&mut a, &[]), None);
        assert!(
            PartyDef::adversary(true).is_adversary() && !PartyDef::honest(1, true).is_adversary()
        );
    }
}
