//! The ruling: where one job stands, as a pure function of what is stored for it (every answer
//! with its identity, credential, party and whether it was late; the answer counted now; the
//! coordinator's own answer; the job's verification and review marks), the set of untrusted
//! workers and the run's settings. Every path that can count, un-count or hold a job (an
//! answer, an untrust, the coordinator's answer, a restart's reload) asks [`rule`] and does what
//! it says; none decides on its own. So a job stands the same whichever path led to its answers,
//! and after a restart, which reads back exactly what [`rule`] reads.
//!
//! The rule, in order (`docs/threat-model.md`, "The ruling"):
//!
//! 1. Only the answers of workers not untrusted count; one identity's repeated answer is one.
//! 2. A party that gave two different answers to the job (one identity, or identities of one
//!    per-host credential) has shown that it lies or is broken: it is to be untrusted, and its
//!    answers are left out. One party never conflicts with itself.
//! 3. The coordinator's own answer settles the job: counted (on a live answer that agrees, else
//!    under the coordinator), and every party that said otherwise is to be untrusted. A spot
//!    check's reference that no worker answered yet waits for any answer (unless the job was
//!    referred to the coordinator: then it is its ruling).
//! 4. An answer given by two or more credentials is counted (independent evidence), and every
//!    party that said otherwise is to be untrusted. When two answers each have two or more
//!    credentials, the one with more credentials counts; with equally many the job is **held**:
//!    no rule can settle it (two honest parties disagree: a solver or hardware fault).
//! 5. Otherwise no answer has independent evidence. A record run waits for another credential.
//!    A dispute across credentials waits for another credential (one credential's word never
//!    settles a dispute with another), and so does one within a credential where the
//!    coordinator rules disputes. Within one credential (the shared token), an answer two of its
//!    parties gave outvotes the others (the shared token's stated limit), and those are to be
//!    untrusted once it counts.
//! 6. One party's word: an answer two parties of one credential gave, or a lone answer (given
//!    under a live lease) of a job that needs no second party (not drawn for verification, not
//!    under review). It counts only through the re-check draw, unless it is the counted answer
//!    already (it passed its draw). A drawn answer puts the job under review: it waits for
//!    another party. A late answer never counts by itself: it is its credential's opinion.

use crate::answer::Answer;
use crate::credential::UNKNOWN_CREDENTIAL;
use crate::evidence::Basis;
use crate::ids::WorkerId;
use crate::state::Review;
use nqueens_core::JobCounts;
use std::collections::BTreeSet;

/// What is stored for one job: what [`rule`] reads.
#[derive(Debug, Clone, Copy)]
pub struct Record<'a> {
    /// The answer counted now (its row is counted), if any.
    pub counted: Option<&'a Answer>,
    /// Every other answer kept for it.
    pub opinions: &'a [Answer],
    /// The coordinator's own answer, if it has one, and whether that answer is its ruling (the
    /// job was referred to it, or it is counted under the coordinator already) rather than a
    /// spot check's reference.
    pub coordinator: Option<(JobCounts, bool)>,
    /// Drawn, when the run was made, to be answered by two parties.
    pub verify: bool,
    /// Why it waits for another party's answer, if it does.
    pub review: Review,
}

/// The run's settings a ruling reads.
#[derive(Debug, Clone, Copy)]
pub struct Settings {
    /// How many independent answers every job needs (2: a record run).
    pub replication: u8,
    /// Whether the coordinator rules disputes itself (its referee).
    pub referee: bool,
}

/// Who may give a waiting job the answer it waits for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Need {
    /// Anyone (nobody answered it live yet).
    Anyone,
    /// A party that has not answered it.
    OtherParty,
    /// A credential that has not answered it (or the coordinator).
    OtherCredential,
}

/// Where a job stands.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Standing {
    /// Counted.
    Counted {
        /// The answer that carries the count (the coordinator's, or one a live worker gave).
        answer: Answer,
        /// What it rests on.
        basis: Basis,
    },
    /// Not counted: it waits for an answer.
    Waiting(Need),
    /// Two answers with equally strong independent evidence: no rule settles it.
    Held,
}

/// Why a party is to be untrusted.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Wrong {
    /// It gave two different answers to the job.
    SelfContradiction,
    /// It contradicted the coordinator's own answer.
    Coordinator,
    /// It contradicted an answer two or more credentials gave.
    Independent,
    /// It was outvoted within its own credential (the shared token's stated limit).
    Outvoted,
}

/// A ruling: where the job stands, whom the rule finds wrong, and whether a one-party count
/// was drawn for a re-check.
#[derive(Debug, Clone, PartialEq)]
pub struct Ruling {
    /// Where it stands.
    pub standing: Standing,
    /// One answer of each party to untrust, and why.
    pub wrong: Vec<(Answer, Wrong)>,
    /// A one-party count was drawn: the job goes under review ([`Review::Recheck`]).
    pub drawn: bool,
    /// Live answers disagree (a dispute, settled or not).
    pub dispute: bool,
}

/// The ruling on a job (see the module doc): `untrusted` says which workers are untrusted,
/// `drawn(counts, parties)` whether a one-party count of `counts` resting on `parties` parties
/// is drawn for a re-check, `prefer` which answer carries a count where several could (the one
/// just given).
pub fn rule(
    record: &Record,
    settings: &Settings,
    untrusted: impl Fn(WorkerId) -> bool,
    drawn: impl Fn(&JobCounts, usize) -> bool,
    prefer: Option<&Answer>,
) -> Ruling {
    let mut live = live_answers(record, &untrusted);
    let mut wrong = Vec::new();
    // 2. A party that contradicts itself.
    let mut liars: BTreeSet<u64> = BTreeSet::new();
    for (i, a) in live.iter().enumerate() {
        if live[..i].iter().any(|b| b.party() == a.party() && !b.agrees(&a.counts))
            && liars.insert(a.party())
        {
            wrong.push((*a, Wrong::SelfContradiction));
        }
    }
    live.retain(|a| !liars.contains(&a.party()));
    let values = distinct_values(&live);
    let dispute = values.len() > 1;
    let ruling = |standing, wrong, drawn| Ruling { standing, wrong, drawn, dispute };

    // 3. The coordinator's own answer.
    if let Some((truth, ruled)) = record.coordinator {
        let standing = by_coordinator(record, &live, truth, ruled, prefer, &mut wrong);
        return ruling(standing, wrong, false);
    }

    // 4. Independent evidence.
    let strength: Vec<(JobCounts, usize)> =
        values.iter().map(|v| (*v, credentials(&live, v))).collect();
    let best = strength.iter().map(|(_, n)| *n).max().unwrap_or(0);
    if best >= 2 {
        let leaders: Vec<&JobCounts> =
            strength.iter().filter(|(_, n)| *n == best).map(|(v, _)| v).collect();
        if leaders.len() > 1 {
            return ruling(Standing::Held, wrong, false);
        }
        let value = *leaders[0];
        dissenters(&live, &value, Wrong::Independent, &mut wrong);
        let answer = carrier(record, &live, &value, prefer);
        return ruling(Standing::Counted { answer, basis: Basis::Independent }, wrong, false);
    }

    // 5. and 6. No independent evidence.
    let (standing, drawn) =
        without_evidence(record, settings, &live, &values, &drawn, prefer, &mut wrong);
    ruling(standing, wrong, drawn)
}

/// Step 3: the coordinator's answer `truth` (`ruled`: its ruling) settles the job.
fn by_coordinator(
    record: &Record,
    live: &[Answer],
    truth: JobCounts,
    ruled: bool,
    prefer: Option<&Answer>,
    wrong: &mut Vec<(Answer, Wrong)>,
) -> Standing {
    dissenters(live, &truth, Wrong::Coordinator, wrong);
    let agreeing: Vec<&Answer> = live.iter().filter(|a| a.agrees(&truth)).collect();
    let counted = record
        .counted
        .filter(|c| c.agrees(&truth) && (c.by_coordinator() || live.iter().any(|a| same(a, c))));
    let answered = record.counted.into_iter().chain(record.opinions).any(|a| !a.by_coordinator());
    if let Some(c) = counted {
        let basis = if agreeing.is_empty() { Basis::Coordinator } else { Basis::Independent };
        Standing::Counted { answer: *c, basis }
    } else if !agreeing.is_empty() {
        let answer = match prefer.filter(|p| agreeing.iter().any(|a| same(a, p))) {
            Some(p) => *p,
            None => Answer::coordinator(truth),
        };
        Standing::Counted { answer, basis: Basis::Independent }
    } else if ruled || answered {
        Standing::Counted { answer: Answer::coordinator(truth), basis: Basis::Coordinator }
    } else {
        Standing::Waiting(Need::Anyone)
    }
}

/// Steps 5 and 6: no answer has independent evidence. Where the job stands, and whether a
/// one-party count was drawn for a re-check.
fn without_evidence(
    record: &Record,
    settings: &Settings,
    live: &[Answer],
    values: &[JobCounts],
    drawn: &impl Fn(&JobCounts, usize) -> bool,
    prefer: Option<&Answer>,
    wrong: &mut Vec<(Answer, Wrong)>,
) -> (Standing, bool) {
    let dispute = values.len() > 1;
    if values.is_empty() {
        return (Standing::Waiting(Need::Anyone), false);
    }
    if settings.replication >= 2 {
        return (Standing::Waiting(Need::OtherCredential), false);
    }
    let across = live
        .iter()
        .any(|a| live.iter().any(|b| !b.agrees(&a.counts) && b.credential != a.credential));
    if across || (dispute && settings.referee) {
        return (Standing::Waiting(Need::OtherCredential), false);
    }
    // Within one credential: the values two or more of its parties gave under live leases.
    let backed: Vec<(JobCounts, usize)> =
        values.iter().map(|v| (*v, live_parties(live, v))).filter(|(_, n)| *n >= 2).collect();
    let (value, parties) = match backed.as_slice() {
        [one] => *one,
        [] if !dispute => {
            let lone_ok = !record.verify && record.review == Review::None;
            let given_live = live.iter().any(|a| !a.late);
            if !(lone_ok && given_live) {
                let need = if given_live { Need::OtherParty } else { Need::Anyone };
                return (Standing::Waiting(need), false);
            }
            (values[0], 1)
        }
        [] => return (Standing::Waiting(Need::OtherParty), false),
        _ => return (Standing::Waiting(Need::OtherCredential), false),
    };
    // 6. One party's word, through the re-check draw.
    if let Some(c) = record.counted.filter(|c| c.agrees(&value) && live.iter().any(|a| same(a, c)))
    {
        dissenters(live, &value, Wrong::Outvoted, wrong);
        return (Standing::Counted { answer: *c, basis: Basis::OneParty }, false);
    }
    if drawn(&value, parties) {
        return (Standing::Waiting(Need::OtherParty), true);
    }
    dissenters(live, &value, Wrong::Outvoted, wrong);
    let answer = carrier(record, live, &value, prefer);
    (Standing::Counted { answer, basis: Basis::OneParty }, false)
}

/// The workers' answers that count: not untrusted, one per identity and answer (live where any
/// of its copies was), in the order kept.
fn live_answers(record: &Record, untrusted: &impl Fn(WorkerId) -> bool) -> Vec<Answer> {
    let mut live: Vec<Answer> = Vec::with_capacity(record.opinions.len() + 1);
    for a in record.counted.into_iter().chain(record.opinions) {
        if a.by_coordinator() || untrusted(a.worker_id) {
            continue;
        }
        match live.iter_mut().find(|b| same(b, a)) {
            Some(b) => b.late &= a.late,
            None => live.push(*a),
        }
    }
    live
}

/// Whether `a` and `b` are one identity's same answer.
fn same(a: &Answer, b: &Answer) -> bool {
    a.worker_id == b.worker_id && a.agrees(&b.counts)
}

/// The distinct answers among `live`, in order of first appearance.
fn distinct_values(live: &[Answer]) -> Vec<JobCounts> {
    let mut values: Vec<JobCounts> = Vec::new();
    for a in live {
        if !values.iter().any(|v| a.agrees(v)) {
            values.push(a.counts);
        }
    }
    values
}

/// How many credentials gave `value` (an unknown credential counts only where no known one did:
/// it may be any of them).
fn credentials(live: &[Answer], value: &JobCounts) -> usize {
    let mut known = BTreeSet::new();
    let mut unknown = false;
    for a in live.iter().filter(|a| a.agrees(value)) {
        if a.credential == UNKNOWN_CREDENTIAL {
            unknown = true;
        } else {
            known.insert(a.credential);
        }
    }
    known.len().max(usize::from(unknown))
}

/// How many parties gave `value` under live leases (a late answer speaks for its credential
/// only, never as a party of its own).
fn live_parties(live: &[Answer], value: &JobCounts) -> usize {
    live.iter()
        .filter(|a| !a.late && a.agrees(value))
        .map(Answer::party)
        .collect::<BTreeSet<_>>()
        .len()
}

/// Adds one answer of each party among `live` that said other than `value`.
fn dissenters(live: &[Answer], value: &JobCounts, why: Wrong, out: &mut Vec<(Answer, Wrong)>) {
    for a in live.iter().filter(|a| !a.agrees(value)) {
        if !out.iter().any(|(b, _)| b.party() == a.party()) {
            out.push((*a, why));
        }
    }
}

/// The answer that carries a count of `value`: the counted one where it agrees, else `prefer`
/// where it gave it, else the first answer under a live lease that gave it, else the first.
fn carrier(record: &Record, live: &[Answer], value: &JobCounts, prefer: Option<&Answer>) -> Answer {
    let giving = |a: &&Answer| a.agrees(value);
    if let Some(c) = record.counted.filter(|c| c.agrees(value) && live.iter().any(|a| same(a, c))) {
        return *c;
    }
    if let Some(p) = prefer.filter(|p| p.agrees(value) && live.iter().any(|a| same(a, p))) {
        return *p;
    }
    let first_live = live.iter().filter(giving).find(|a| !a.late);
    *first_live.or_else(|| live.iter().find(giving)).expect("a value some answer gave")
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{PER_HOST_CREDENTIALS, SHARED_CREDENTIAL};

    fn counts(solutions: u64) -> JobCounts {
        JobCounts { solutions, sym180: 0, sym90: 0, nodes: 10 }
    }
    fn answer(worker: u64, credential: u64, solutions: u64, late: bool) -> Answer {
        Answer { worker_id: WorkerId::new(worker), credential, counts: counts(solutions), late }
    }
    const PLAIN: Settings = Settings { replication: 1, referee: false };
    const HOST_A: u64 = PER_HOST_CREDENTIALS;
    const HOST_B: u64 = PER_HOST_CREDENTIALS + 1;

    fn ruled(record: &Record, settings: &Settings, drawn: bool) -> Ruling {
        rule(record, settings, |_| false, |_, _| drawn, None)
    }
    fn record(opinions: &[Answer]) -> Record<'_> {
        Record { counted: None, opinions, coordinator: None, verify: false, review: Review::None }
    }

    #[test]
    fn one_party_never_conflicts_with_itself_it_is_found_wrong() {
        // Route 2: one identity answering one job several ways.
        let answers = [
            answer(1, HOST_A, 5, false),
            answer(1, HOST_A, 6, true),
            answer(1, HOST_A, 7, true),
            answer(2, HOST_A, 8, true),
        ];
        let r = ruled(&record(&answers), &PLAIN, false);
        assert_eq!(r.standing, Standing::Waiting(Need::Anyone));
        assert_eq!(r.wrong, vec![(answers[1], Wrong::SelfContradiction)]);
        assert!(!r.dispute);
    }

    #[test]
    fn two_late_answers_of_one_credential_are_not_two_parties() {
        // Route 1: two shared-token identities' late lies.
        let answers =
            [answer(1, SHARED_CREDENTIAL, 6, true), answer(2, SHARED_CREDENTIAL, 6, true)];
        let r = ruled(&record(&answers), &PLAIN, false);
        assert_eq!(r.standing, Standing::Waiting(Need::Anyone));
        let live = [answer(1, SHARED_CREDENTIAL, 6, false), answer(2, SHARED_CREDENTIAL, 6, false)];
        let r = ruled(&record(&live), &PLAIN, true);
        assert_eq!((r.standing, r.drawn), (Standing::Waiting(Need::OtherParty), true));
    }

    #[test]
    fn a_contradiction_of_two_credentials_leaves_the_count_and_finds_the_liar() {
        // Route 3: a spot check of a two-credential count answered wrongly.
        let right = answer(1, HOST_A, 5, false);
        let answers = [answer(2, HOST_B, 5, false), answer(3, SHARED_CREDENTIAL, 9, false)];
        let rec = Record { counted: Some(&right), ..record(&answers) };
        let r = ruled(&rec, &PLAIN, true);
        assert_eq!(r.standing, Standing::Counted { answer: right, basis: Basis::Independent });
        assert_eq!(r.wrong, vec![(answers[1], Wrong::Independent)]);
    }

    #[test]
    fn equally_strong_independent_answers_are_held_and_more_credentials_settle_them() {
        let mut answers = vec![
            answer(1, HOST_A, 5, false),
            answer(2, HOST_B, 5, false),
            answer(3, HOST_A + 2, 9, false),
            answer(4, HOST_A + 3, 9, false),
        ];
        assert_eq!(ruled(&record(&answers), &PLAIN, false).standing, Standing::Held);
        answers.push(answer(5, HOST_A + 4, 5, true));
        let r = ruled(&record(&answers), &PLAIN, false);
        assert!(matches!(r.standing, Standing::Counted { basis: Basis::Independent, .. }));
        assert_eq!(r.wrong.len(), 2);
    }

    #[test]
    fn a_dispute_across_credentials_waits_for_another_credential() {
        let answers = [answer(1, HOST_A, 5, false), answer(2, HOST_B, 6, false)];
        let r = ruled(&record(&answers), &PLAIN, false);
        assert_eq!(r.standing, Standing::Waiting(Need::OtherCredential));
        assert!(r.wrong.is_empty() && r.dispute);
    }

    #[test]
    fn the_coordinators_answer_settles_and_finds_every_dissenter() {
        let answers = [answer(1, HOST_A, 5, false), answer(2, HOST_B, 6, false)];
        let rec = Record { coordinator: Some((counts(5), false)), ..record(&answers) };
        let r = ruled(&rec, &PLAIN, false);
        assert!(matches!(r.standing, Standing::Counted { basis: Basis::Independent, .. }));
        assert_eq!(r.wrong, vec![(answers[1], Wrong::Coordinator)]);
        let none: [Answer; 0] = [];
        let rec = Record { coordinator: Some((counts(5), false)), ..record(&none) };
        assert_eq!(ruled(&rec, &PLAIN, false).standing, Standing::Waiting(Need::Anyone));
        let rec = Record { coordinator: Some((counts(5), false)), ..record(&answers[1..]) };
        assert!(matches!(
            ruled(&rec, &PLAIN, false).standing,
            Standing::Counted { basis: Basis::Coordinator, .. }
        ));
        let rec = Record { coordinator: Some((counts(5), true)), ..record(&none) };
        assert!(matches!(
            ruled(&rec, &PLAIN, false).standing,
            Standing::Counted { basis: Basis::Coordinator, .. }
        ));
    }

    #[test]
    fn a_lone_answer_counts_only_under_a_live_lease_without_a_review_and_through_the_draw() {
        let lone = [answer(1, HOST_A, 5, false)];
        let r = ruled(&record(&lone), &PLAIN, false);
        assert_eq!(r.standing, Standing::Counted { answer: lone[0], basis: Basis::OneParty });
        assert!(ruled(&record(&lone), &PLAIN, true).drawn);
        let late = [answer(1, HOST_A, 5, true)];
        assert_eq!(ruled(&record(&late), &PLAIN, false).standing, Standing::Waiting(Need::Anyone));
        let rec = Record { review: Review::Recheck, ..record(&lone) };
        assert_eq!(ruled(&rec, &PLAIN, false).standing, Standing::Waiting(Need::OtherParty));
        let record_run = Settings { replication: 2, referee: false };
        assert_eq!(
            ruled(&record(&lone), &record_run, false).standing,
            Standing::Waiting(Need::OtherCredential)
        );
        // Counted already: it passed its draw.
        let rec = Record { counted: Some(&lone[0]), opinions: &[], ..record(&lone) };
        assert!(matches!(ruled(&rec, &PLAIN, true).standing, Standing::Counted { .. }));
    }
}
