//! What the two adversary models of the trust rules share: the scheduler's
//! (`scheduler/tests/adversary.rs`, the scheduler alone, driven through its calls) and the
//! engine's (`coordinator/src/engine/adversary.rs`, the engine over a state file). Each model
//! keeps its own world and checks; this crate is their generator:
//!
//! - `vocabulary.rs`: the kinds of event both draw from ([`EventKind`]) and the mix of them a
//!   model draws ([`Mix`]), which side acts ([`Side`]), the parties and their credentials
//!   ([`PartyDef`]);
//! - `sequences.rs`: many seeded sequences run (on one thread or every core), the first failure
//!   of each kind kept ([`Sequences`]), read from a model's environment variables;
//! - `shrink.rs`: the kind of a failure ([`failure_kind`]), a failing sequence shrunk by delta
//!   debugging ([`shrink`]), a panic turned into a failure ([`catch_panic`], [`panic_text`]).
//!
//! The random sequence is `nqueens_core`'s [`SplitMix64`], re-exported here.

mod sequences;
mod shrink;
mod vocabulary;

pub use nqueens_core::SplitMix64;
pub use sequences::{env_u64, Sequences};
pub use shrink::{catch_panic, failure_kind, panic_text, shrink};
pub use vocabulary::{pick, EventKind, Mix, PartyDef, Side, ADVERSARY};
