//! What one counted answer rests on, from the answers its job was given: the rule behind the
//! result file's evidence (the store reads it over its rows) and the adversary model's check. It
//! reads each answer's credential as it was given (see [`crate::Answer`]).

use crate::answer::Answer;
use crate::credential::UNKNOWN_CREDENTIAL;
use crate::ids::WorkerId;
use nqueens_core::JobCounts;
use std::collections::BTreeSet;

/// What a job's counted answer rests on.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Basis {
    /// Two or more independent answers: two credentials, or the coordinator and one credential.
    Independent,
    /// The coordinator's own solve alone.
    Coordinator,
    /// One credential's word: a trusted party alone, or identities of one credential agreeing.
    OneParty,
}

/// Who gave a job's counted answer: the coordinator's own solve, and how many independent
/// credentials (see [`support`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Support {
    /// The coordinator's own solve gave it.
    pub coordinator: bool,
    /// Distinct credentials of trusted workers that gave it.
    pub credentials: usize,
}

impl Support {
    /// What an answer with this support rests on.
    pub fn basis(&self) -> Basis {
        match (self.coordinator, self.credentials) {
            (true, 0) => Basis::Coordinator,
            (true, _) | (false, 2..) => Basis::Independent,
            (false, _) => Basis::OneParty,
        }
    }
}

/// Who stands behind `counted` among `answers` (every answer its job was given, the counted one
/// among them): the coordinator's, and the distinct credentials of the workers not
/// `untrusted` that gave the same. An answer of unknown credential adds a credential only where
/// no known one agrees (it may be any of them).
pub fn support<'a>(
    answers: impl IntoIterator<Item = &'a Answer>,
    counted: &JobCounts,
    untrusted: impl Fn(WorkerId) -> bool,
) -> Support {
    let mut coordinator = false;
    let mut unknown = false;
    let mut credentials = BTreeSet::new();
    for a in answers.into_iter().filter(|a| a.agrees(counted)) {
        if a.by_coordinator() {
            coordinator = true;
        } else if untrusted(a.worker_id) {
            continue;
        } else if a.credential == UNKNOWN_CREDENTIAL {
            unknown = true;
        } else {
            credentials.insert(a.credential);
        }
    }
    Support { coordinator, credentials: credentials.len().max(usize::from(unknown)) }
}

/// What `counted` rests on among `answers`: the [`Basis`] of its [`support`].
pub fn basis<'a>(
    answers: impl IntoIterator<Item = &'a Answer>,
    counted: &JobCounts,
    untrusted: impl Fn(WorkerId) -> bool,
) -> Basis {
    support(answers, counted, untrusted).basis()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{PER_HOST_CREDENTIALS, SHARED_CREDENTIAL};

    fn answer(worker: u64, credential: u64, solutions: u64) -> Answer {
        let counts = JobCounts { solutions, sym180: 0, sym90: 0, nodes: 10 };
        Answer { worker_id: WorkerId::new(worker), credential, counts, late: false }
    }

    #[test]
    fn independence_is_read_from_the_credentials_the_answers_were_given_under() {
        let right = answer(1, 0, 5).counts;
        let shared = [answer(1, SHARED_CREDENTIAL, 5), answer(2, SHARED_CREDENTIAL, 5)];
        assert_eq!(basis(&shared, &right, |_| false), Basis::OneParty);
        let two = [answer(1, SHARED_CREDENTIAL, 5), answer(2, PER_HOST_CREDENTIALS, 5)];
        assert_eq!(basis(&two, &right, |_| false), Basis::Independent);
        assert_eq!(basis(&two, &right, |w| w.get() == 2), Basis::OneParty);
        let unknown = [answer(1, UNKNOWN_CREDENTIAL, 5), answer(2, UNKNOWN_CREDENTIAL, 5)];
        assert_eq!(basis(&unknown, &right, |_| false), Basis::OneParty);
        let mixed = [answer(1, UNKNOWN_CREDENTIAL, 5), answer(2, PER_HOST_CREDENTIALS, 5)];
        assert_eq!(basis(&mixed, &right, |_| false), Basis::OneParty);
        let coordinator = [Answer::coordinator(right)];
        assert_eq!(basis(&coordinator, &right, |_| false), Basis::Coordinator);
        let wrong = [answer(1, SHARED_CREDENTIAL, 6), answer(2, PER_HOST_CREDENTIALS, 6)];
        assert_eq!(basis(&wrong, &right, |_| false), Basis::OneParty);
    }
}
