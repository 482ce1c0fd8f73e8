//! Every string, byte string and repeated field of the contract, bounded: what comes off the wire
//! is checked by [`CheckBounds::check_bounds`] before anything reads, logs or stores it, on both
//! sides (the coordinator checks every request and every streamed result, the worker and the status
//! client every answer). A message past a bound is refused whole, with the field named; nothing is
//! cut silently here (the coordinator itself cuts the error texts it stores to 4 KiB).
//!
//! Whole messages are bounded too: the coordinator decodes at most [`MAX_REQUEST`] bytes per
//! message (tonic's `max_decoding_message_size`), so no single field can take more memory than
//! that before these checks run.
//!
//! Strings that are shown (names, hosts, devices, versions, run fingerprints) must be plain text:
//! no character that is hidden or changes how the text around it reads ([`is_unshown`]), so that
//! none can forge a log line or reorder a line of `status` or the status page. Where such a
//! string is shown anyway (a state file written before this rule), [`shown`] makes each of those
//! characters visible as `\u{...}`.

use std::borrow::Cow;

use crate::convert::WireError;
use crate::v1 as pb;

/// The largest request message the coordinator decodes: 1 MiB (the largest honest one, a release
/// of a whole lease of [`MAX_IDS`] job ids, is under 700 KB).
pub const MAX_REQUEST: usize = 1 << 20;
/// Worker names, host names, device descriptions and credential names, in bytes.
pub const MAX_NAME: usize = 256;
/// A software version (strict semver, checked where it is used), in bytes.
pub const MAX_VERSION: usize = 64;
/// A worker secret (ours are 64 hex digits), in bytes.
pub const MAX_SECRET: usize = 128;
/// A run fingerprint (`n<N>-<16 hex digits>-p<major>`), in bytes.
pub const MAX_FINGERPRINT: usize = 128;
/// An error text or a refusal's message on the wire, in bytes (64 KiB).
pub const MAX_TEXT: usize = 64 * 1024;
/// Ids in one list (lease ids of a heartbeat, job ids of a release or a lease, workers of a status
/// answer): the scheduler's largest lease is 65,536 jobs.
pub const MAX_IDS: usize = 65_536;
/// A job's prefix: one column per searched row, fewer than 64 rows on any board a run can hold.
pub const MAX_PREFIX: usize = 64;
/// Groups of one kind in a status answer's fleet (a coordinator sends at most 12).
pub const MAX_GROUPS: usize = 64;

/// A message whose every string and list is checked against its bound.
pub trait CheckBounds {
    /// `Err` naming the first field past its bound.
    fn check_bounds(&self) -> Result<(), WireError>;
}

/// `text` (of `field`) if it is at most `max` bytes.
fn text(field: &'static str, text: &str, max: usize) -> Result<(), WireError> {
    if text.len() > max {
        return Err(WireError::Invalid {
            field,
            reason: format!("{} bytes, at most {max}", text.len()),
        });
    }
    Ok(())
}

/// Unicode's general category Cf (format characters: bidirectional embeddings, overrides and
/// isolates, zero-width characters, the byte order mark, invisible operators, tags...), as of
/// Unicode 16.0: inclusive ranges, in order.
const FORMAT: &[(u32, u32)] = &[
    (0x00AD, 0x00AD),
    (0x0600, 0x0605),
    (0x061C, 0x061C),
    (0x06DD, 0x06DD),
    (0x070F, 0x070F),
    (0x0890, 0x0891),
    (0x08E2, 0x08E2),
    (0x180E, 0x180E),
    (0x200B, 0x200F),
    (0x202A, 0x202E),
    (0x2060, 0x2064),
    (0x2066, 0x206F),
    (0xFEFF, 0xFEFF),
    (0xFFF9, 0xFFFB),
    (0x110BD, 0x110BD),
    (0x110CD, 0x110CD),
    (0x13430, 0x1343F),
    (0x1BCA0, 0x1BCA3),
    (0x1D173, 0x1D17A),
    (0xE0001, 0xE0001),
    (0xE0020, 0xE007F),
];

/// Whether `c` is hidden, or changes how the text around it is shown, rather than showing as
/// itself: Unicode general categories Cc (control: CR, LF, ESC...), Cf (format: U+202E
/// RIGHT-TO-LEFT OVERRIDE, U+200B ZERO WIDTH SPACE, U+FEFF...), Zl (U+2028 LINE SEPARATOR) and Zp
/// (U+2029 PARAGRAPH SEPARATOR).
pub fn is_unshown(c: char) -> bool {
    let code = c as u32;
    c.is_control()
        || matches!(c, '\u{2028}' | '\u{2029}')
        || FORMAT
            .binary_search_by(|&(first, last)| {
                if last < code {
                    std::cmp::Ordering::Less
                } else if first > code {
                    std::cmp::Ordering::Greater
                } else {
                    std::cmp::Ordering::Equal
                }
            })
            .is_ok()
}

/// `text` as it may be shown: each [`is_unshown`] character written as `\u{hex}`, everything else
/// as it is.
pub fn shown(text: &str) -> Cow<'_, str> {
    if !text.chars().any(is_unshown) {
        return Cow::Borrowed(text);
    }
    let mut out = String::with_capacity(text.len() + 8);
    for c in text.chars() {
        if is_unshown(c) {
            out.push_str(&format!("\\u{{{:x}}}", c as u32));
        } else {
            out.push(c);
        }
    }
    Cow::Owned(out)
}

/// `text` (of `field`, shown in logs, `status` and the status page) if it is at most `max` bytes
/// of plain text (no [`is_unshown`] character).
fn plain(field: &'static str, text: &str, max: usize) -> Result<(), WireError> {
    self::text(field, text, max)?;
    match text.chars().find(|&c| is_unshown(c)) {
        None => Ok(()),
        Some(c) => Err(WireError::Invalid {
            field,
            reason: format!(
                "U+{:04X} is a control, format or separator character (names are plain text)",
                c as u32
            ),
        }),
    }
}

/// A list (of `field`) of at most `max` entries.
fn list<T>(field: &'static str, items: &[T], max: usize) -> Result<(), WireError> {
    if items.len() > max {
        return Err(WireError::Invalid {
            field,
            reason: format!("{} entries, at most {max}", items.len()),
        });
    }
    Ok(())
}

fn run(run: &Option<pb::RunId>) -> Result<(), WireError> {
    run.as_ref().map_or(Ok(()), CheckBounds::check_bounds)
}

impl CheckBounds for pb::RunId {
    fn check_bounds(&self) -> Result<(), WireError> {
        plain("run fingerprint", &self.fingerprint, MAX_FINGERPRINT)
    }
}

impl CheckBounds for pb::RegisterRequest {
    fn check_bounds(&self) -> Result<(), WireError> {
        run(&self.run)?;
        plain("name", &self.name, MAX_NAME)?;
        plain("host", &self.host, MAX_NAME)?;
        plain("version", &self.version, MAX_VERSION)?;
        text("previous_worker_secret", &self.previous_worker_secret, MAX_SECRET)?;
        plain("device", &self.device, MAX_NAME)
    }
}

impl CheckBounds for pb::LeaseRequest {
    fn check_bounds(&self) -> Result<(), WireError> {
        run(&self.run)?;
        text("worker_secret", &self.worker_secret, MAX_SECRET)
    }
}

impl CheckBounds for pb::HeartbeatRequest {
    fn check_bounds(&self) -> Result<(), WireError> {
        run(&self.run)?;
        list("lease_ids", &self.lease_ids, MAX_IDS)?;
        text("worker_secret", &self.worker_secret, MAX_SECRET)
    }
}

impl CheckBounds for pb::JobResult {
    fn check_bounds(&self) -> Result<(), WireError> {
        run(&self.run)?;
        text("error", &self.error, MAX_TEXT)?;
        text("worker_secret", &self.worker_secret, MAX_SECRET)
    }
}

impl CheckBounds for pb::ReleaseRequest {
    fn check_bounds(&self) -> Result<(), WireError> {
        run(&self.run)?;
        list("job_ids", &self.job_ids, MAX_IDS)?;
        text("worker_secret", &self.worker_secret, MAX_SECRET)
    }
}

impl CheckBounds for pb::StatusRequest {
    fn check_bounds(&self) -> Result<(), WireError> {
        text("workers_filter", &self.workers_filter, MAX_NAME)
    }
}

impl CheckBounds for pb::Fleet {
    fn check_bounds(&self) -> Result<(), WireError> {
        text("fleet filter", &self.filter, MAX_NAME)?;
        for groups in [&self.by_state, &self.by_device, &self.by_version, &self.by_credential] {
            list("fleet groups", groups, MAX_GROUPS)?;
            for g in groups {
                text("fleet group key", &g.key, MAX_NAME)?;
            }
        }
        Ok(())
    }
}

impl CheckBounds for pb::RegisterResponse {
    fn check_bounds(&self) -> Result<(), WireError> {
        run(&self.run)?;
        text("worker_secret", &self.worker_secret, MAX_SECRET)
    }
}

impl CheckBounds for pb::LeaseResponse {
    fn check_bounds(&self) -> Result<(), WireError> {
        list("jobs", &self.jobs, MAX_IDS)?;
        self.jobs.iter().try_for_each(|j| list("job prefix", &j.prefix, MAX_PREFIX))
    }
}

impl CheckBounds for pb::HeartbeatResponse {
    fn check_bounds(&self) -> Result<(), WireError> {
        list("lost_lease_ids", &self.lost_lease_ids, MAX_IDS)
    }
}

impl CheckBounds for pb::ResultAck {
    fn check_bounds(&self) -> Result<(), WireError> {
        text("ack message", &self.message, MAX_TEXT)
    }
}

impl CheckBounds for pb::ErrorDetail {
    fn check_bounds(&self) -> Result<(), WireError> {
        text("error detail message", &self.message, MAX_TEXT)
    }
}

impl CheckBounds for pb::WorkerInfo {
    fn check_bounds(&self) -> Result<(), WireError> {
        text("worker name", &self.name, MAX_NAME)?;
        text("worker host", &self.host, MAX_NAME)?;
        text("worker version", &self.version, MAX_VERSION)?;
        text("worker credential", &self.credential, MAX_NAME)?;
        text("worker device", &self.device, MAX_NAME)
    }
}

impl CheckBounds for pb::StatusResponse {
    fn check_bounds(&self) -> Result<(), WireError> {
        run(&self.run)?;
        list("workers", &self.workers, MAX_IDS)?;
        self.fleet.as_ref().map_or(Ok(()), CheckBounds::check_bounds)?;
        self.workers.iter().try_for_each(CheckBounds::check_bounds)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The field a check refused, if it refused.
    fn refused(message: &(impl CheckBounds + ?Sized)) -> Option<&'static str> {
        match message.check_bounds() {
            Ok(()) => None,
            Err(WireError::Invalid { field, .. }) => Some(field),
            Err(e) => panic!("unexpected {e}"),
        }
    }

    fn long(bytes: usize) -> String {
        "x".repeat(bytes)
    }

    fn run_id(fingerprint: String) -> Option<pb::RunId> {
        Some(pb::RunId { n: 18, fingerprint })
    }

    /// Each string of a request: at its bound it passes, one byte past it the message is
    /// refused, naming the field.
    #[test]
    fn every_request_string_is_bounded() {
        type Case = (&'static str, usize, fn(String) -> Box<dyn CheckBounds>);
        let cases: Vec<Case> = vec![
            ("run fingerprint", MAX_FINGERPRINT, |s| {
                Box::new(pb::LeaseRequest { run: run_id(s), ..Default::default() })
            }),
            ("name", MAX_NAME, |s| Box::new(pb::RegisterRequest { name: s, ..Default::default() })),
            ("host", MAX_NAME, |s| Box::new(pb::RegisterRequest { host: s, ..Default::default() })),
            ("version", MAX_VERSION, |s| {
                Box::new(pb::RegisterRequest { version: s, ..Default::default() })
            }),
            ("previous_worker_secret", MAX_SECRET, |s| {
                Box::new(pb::RegisterRequest { previous_worker_secret: s, ..Default::default() })
            }),
            ("device", MAX_NAME, |s| {
                Box::new(pb::RegisterRequest { device: s, ..Default::default() })
            }),
            ("run fingerprint", MAX_FINGERPRINT, |s| {
                Box::new(pb::RegisterRequest { run: run_id(s), ..Default::default() })
            }),
            ("worker_secret", MAX_SECRET, |s| {
                Box::new(pb::LeaseRequest { worker_secret: s, ..Default::default() })
            }),
            ("worker_secret", MAX_SECRET, |s| {
                Box::new(pb::HeartbeatRequest { worker_secret: s, ..Default::default() })
            }),
            ("run fingerprint", MAX_FINGERPRINT, |s| {
                Box::new(pb::HeartbeatRequest { run: run_id(s), ..Default::default() })
            }),
            ("error", MAX_TEXT, |s| Box::new(pb::JobResult { error: s, ..Default::default() })),
            ("worker_secret", MAX_SECRET, |s| {
                Box::new(pb::JobResult { worker_secret: s, ..Default::default() })
            }),
            ("run fingerprint", MAX_FINGERPRINT, |s| {
                Box::new(pb::JobResult { run: run_id(s), ..Default::default() })
            }),
            ("worker_secret", MAX_SECRET, |s| {
                Box::new(pb::ReleaseRequest { worker_secret: s, ..Default::default() })
            }),
            ("run fingerprint", MAX_FINGERPRINT, |s| {
                Box::new(pb::ReleaseRequest { run: run_id(s), ..Default::default() })
            }),
        ];
        for (field, max, make) in cases {
            assert_eq!(refused(&*make(long(max))), None, "{field} at its bound");
            assert_eq!(refused(&*make(long(max + 1))), Some(field), "{field} past its bound");
        }
        assert_eq!(refused(&pb::StatusRequest::default()), None);
        let filter = pb::StatusRequest { workers_filter: long(MAX_NAME + 1), ..Default::default() };
        assert_eq!(refused(&filter), Some("workers_filter"));
        let groups =
            pb::Fleet { by_device: vec![Default::default(); MAX_GROUPS + 1], ..Default::default() };
        let status = pb::StatusResponse { fleet: Some(groups), ..Default::default() };
        assert_eq!(refused(&status), Some("fleet groups"));
    }

    /// Each list of a request, and each string and list of an answer.
    #[test]
    fn every_list_and_every_answer_is_bounded() {
        let ids = |k: usize| vec![7u64; k];
        for k in [MAX_IDS, MAX_IDS + 1] {
            let over = (k > MAX_IDS).then_some(());
            let heartbeat = pb::HeartbeatRequest { lease_ids: ids(k), ..Default::default() };
            assert_eq!(refused(&heartbeat), over.map(|()| "lease_ids"));
            let release = pb::ReleaseRequest { job_ids: ids(k), ..Default::default() };
            assert_eq!(refused(&release), over.map(|()| "job_ids"));
            let lost = pb::HeartbeatResponse { lost_lease_ids: ids(k), ..Default::default() };
            assert_eq!(refused(&lost), over.map(|()| "lost_lease_ids"));
            let lease =
                pb::LeaseResponse { jobs: vec![Default::default(); k], ..Default::default() };
            assert_eq!(refused(&lease), over.map(|()| "jobs"));
            let status =
                pb::StatusResponse { workers: vec![Default::default(); k], ..Default::default() };
            assert_eq!(refused(&status), over.map(|()| "workers"));
        }
        let job = pb::JobSpec { prefix: vec![0; MAX_PREFIX + 1], ..Default::default() };
        assert_eq!(
            refused(&pb::LeaseResponse { jobs: vec![job], ..Default::default() }),
            Some("job prefix")
        );
        let secret =
            pb::RegisterResponse { worker_secret: long(MAX_SECRET + 1), ..Default::default() };
        assert_eq!(refused(&secret), Some("worker_secret"));
        let fingerprint =
            pb::RegisterResponse { run: run_id(long(MAX_FINGERPRINT + 1)), ..Default::default() };
        assert_eq!(refused(&fingerprint), Some("run fingerprint"));
        let ack = pb::ResultAck { message: long(MAX_TEXT + 1), ..Default::default() };
        assert_eq!(refused(&ack), Some("ack message"));
        let detail = pb::ErrorDetail { message: long(MAX_TEXT + 1), ..Default::default() };
        assert_eq!(refused(&detail), Some("error detail message"));
        let worker =
            |w: pb::WorkerInfo| pb::StatusResponse { workers: vec![w], ..Default::default() };
        let cases: [(&str, pb::WorkerInfo); 5] = [
            ("worker name", pb::WorkerInfo { name: long(MAX_NAME + 1), ..Default::default() }),
            ("worker host", pb::WorkerInfo { host: long(MAX_NAME + 1), ..Default::default() }),
            (
                "worker version",
                pb::WorkerInfo { version: long(MAX_VERSION + 1), ..Default::default() },
            ),
            (
                "worker credential",
                pb::WorkerInfo { credential: long(MAX_NAME + 1), ..Default::default() },
            ),
            ("worker device", pb::WorkerInfo { device: long(MAX_NAME + 1), ..Default::default() }),
        ];
        for (field, info) in cases {
            assert_eq!(refused(&worker(info)), Some(field));
        }
        let status =
            pb::StatusResponse { run: run_id(long(MAX_FINGERPRINT + 1)), ..Default::default() };
        assert_eq!(refused(&status), Some("run fingerprint"));
    }

    /// Characters of each class refused in every shown string of a registration, naming the
    /// field; letters of every script, accents, emoji and spaces pass.
    #[test]
    fn shown_strings_refuse_control_format_and_separator_characters() {
        let classes: [(&str, &[char]); 4] = [
            ("Cc", &['\n', '\r', '\t', '\u{0}', '\u{7}', '\u{1b}', '\u{7f}', '\u{85}', '\u{9b}']),
            (
                "Cf",
                &[
                    '\u{ad}',
                    '\u{61c}',
                    '\u{180e}',
                    '\u{200b}',
                    '\u{200c}',
                    '\u{200d}',
                    '\u{200e}',
                    '\u{200f}',
                    '\u{202a}',
                    '\u{202b}',
                    '\u{202c}',
                    '\u{202d}',
                    '\u{202e}',
                    '\u{2060}',
                    '\u{2066}',
                    '\u{2067}',
                    '\u{2068}',
                    '\u{2069}',
                    '\u{feff}',
                    '\u{fff9}',
                    '\u{1343f}',
                    '\u{e0001}',
                    '\u{e007f}',
                ],
            ),
            ("Zl", &['\u{2028}']),
            ("Zp", &['\u{2029}']),
        ];
        type Make = fn(String) -> pb::RegisterRequest;
        let fields: [(&str, Make); 5] = [
            ("name", |s| pb::RegisterRequest { name: s, ..Default::default() }),
            ("host", |s| pb::RegisterRequest { host: s, ..Default::default() }),
            ("device", |s| pb::RegisterRequest { device: s, ..Default::default() }),
            ("version", |s| pb::RegisterRequest { version: s, ..Default::default() }),
            ("run fingerprint", |s| pb::RegisterRequest { run: run_id(s), ..Default::default() }),
        ];
        for (class, chars) in classes {
            for &c in chars {
                assert!(is_unshown(c), "{class} U+{:04X}", c as u32);
                for (field, make) in fields {
                    let message = make(format!("gpu{c}7"));
                    let e = message.check_bounds().unwrap_err();
                    assert_eq!(refused(&message), Some(field), "{class} U+{:04X}", c as u32);
                    assert!(e.to_string().contains(&format!("U+{:04X}", c as u32)), "{e}");
                }
            }
        }
        for plain in
            ["worker-7", "węzeł ß", "節点", "عامل", "עובד", "🦀 crab", "a\u{a0}b", "e\u{301}"]
        {
            assert!(!plain.chars().any(is_unshown), "{plain:?}");
            for (field, make) in fields {
                assert_eq!(refused(&make(plain.into())), None, "{field}: {plain:?}");
            }
        }
        // The binary search agrees with a plain scan at both ends of each range and beside them.
        let scan = |code: u32| FORMAT.iter().any(|(first, last)| (*first..=*last).contains(&code));
        for (first, last) in FORMAT {
            for code in [first - 1, *first, *last, last + 1] {
                let c = char::from_u32(code).unwrap();
                let separator = matches!(c, '\u{2028}' | '\u{2029}');
                assert_eq!(
                    is_unshown(c),
                    c.is_control() || separator || scan(code),
                    "U+{code:04X}"
                );
            }
        }
    }

    /// What `status` and the page show of a string from an old state file: every unshown
    /// character visible, the rest as it was.
    #[test]
    fn shown_makes_every_unshown_character_visible() {
        assert!(matches!(shown("plain wörker"), Cow::Borrowed("plain wörker")));
        assert_eq!(shown("evil\u{202e}fdp.exe"), "evil\\u{202e}fdp.exe");
        assert_eq!(shown("a\nb\u{2028}c\u{feff}"), "a\\u{a}b\\u{2028}c\\u{feff}");
    }
}
