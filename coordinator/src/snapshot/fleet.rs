//! A fleet of workers as a person can take it in: counts by state, device, version and credential,
//! and one page of workers in the order that needs attention first (untrusted, then those in
//! conflicts, then the slowest), optionally filtered. The status page and `/status.json` show
//! this instead of every worker, so that 10,000 workers cost a page of rows, not 10,000.

use super::WorkerView;
use serde::Serialize;
use std::cmp::Ordering;
use std::collections::HashMap;
use std::sync::Arc;

/// Workers on a page unless the reader asks for another number.
pub const DEFAULT_PAGE: usize = 100;

/// The most workers one page holds.
pub const MAX_PAGE: usize = 1_000;

/// The most groups listed per kind; the rest are counted together as `(others)`.
pub const MAX_GROUPS: usize = 12;

/// Workers sharing one value of a kind (a state, a device, a version or a credential).
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Group {
    /// The value they share (`(others)` for the small groups counted together).
    pub key: String,
    /// How many workers.
    pub workers: u64,
    /// Their lease slots, together.
    pub slots: u64,
    /// Jobs leased to them now.
    pub jobs_leased: u64,
    /// Their counted results.
    pub results: u64,
    /// Their counted results per second, together.
    pub results_per_second: f64,
}

/// The fleet in aggregate, and which workers the page beside it holds.
#[derive(Debug, Clone, Default, PartialEq, Serialize)]
pub struct Fleet {
    /// Workers registered with this process.
    pub workers: u64,
    /// By [`state_of`], in that order of attention.
    pub by_state: Vec<Group>,
    /// By device, the largest groups first (at most [`MAX_GROUPS`]).
    pub by_device: Vec<Group>,
    /// By version, the same way.
    pub by_version: Vec<Group>,
    /// By credential, the same way.
    pub by_credential: Vec<Group>,
    /// Workers the filter matches.
    pub matching: u64,
    /// Where the page starts among them.
    pub offset: u64,
    /// The most workers the page holds.
    pub limit: u64,
    /// The filter asked for (empty: every worker).
    pub filter: String,
}

/// Which workers a reader asks to see: `workers_offset`, `workers_limit` and `workers_filter` of a
/// query string (the filter matches name, host, version, device, credential or state, ignoring
/// case).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct WorkerQuery {
    /// Where the page starts in the order of attention.
    pub offset: usize,
    /// The most workers on the page.
    pub limit: usize,
    /// What the workers listed match (see [`WorkerQuery::new`]); empty: all.
    pub filter: String,
}

impl Default for WorkerQuery {
    fn default() -> Self {
        WorkerQuery { offset: 0, limit: DEFAULT_PAGE, filter: String::new() }
    }
}

impl WorkerQuery {
    /// A query as asked: a `limit` of 0 is the default page, a larger one than [`MAX_PAGE`] is
    /// held to it, and the filter to its first 200 bytes.
    pub fn new(offset: u64, limit: u64, filter: &str) -> WorkerQuery {
        let limit = match limit {
            0 => DEFAULT_PAGE,
            l => usize::try_from(l).unwrap_or(MAX_PAGE).min(MAX_PAGE),
        };
        let mut end = filter.len().min(200);
        while !filter.is_char_boundary(end) {
            end -= 1;
        }
        WorkerQuery {
            offset: usize::try_from(offset).unwrap_or(usize::MAX),
            limit,
            filter: filter[..end].to_owned(),
        }
    }

    /// The query of a URL (`a=1&b=2`, without the `?`); what is missing or unreadable keeps its
    /// default.
    pub fn from_query(query: Option<&str>) -> WorkerQuery {
        let (mut offset, mut limit, mut filter) = (0, 0, String::new());
        for pair in query.unwrap_or_default().split('&') {
            let (key, value) = pair.split_once('=').unwrap_or((pair, ""));
            match key {
                "workers_offset" => offset = value.parse().unwrap_or(0),
                "workers_limit" => limit = value.parse().unwrap_or(0),
                "workers_filter" => filter = percent_decoded(value),
                _ => {}
            }
        }
        WorkerQuery::new(offset, limit, &filter)
    }
}

/// `text` of a query string decoded: `+` is a space, `%XX` a byte; a bad escape stays as it is.
fn percent_decoded(text: &str) -> String {
    let bytes = text.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        let hex = |b: u8| (b as char).to_digit(16);
        match bytes[i] {
            b'+' => out.push(b' '),
            b'%' if i + 2 < bytes.len() => match (hex(bytes[i + 1]), hex(bytes[i + 2])) {
                (Some(h), Some(l)) => {
                    out.push((h * 16 + l) as u8);
                    i += 2;
                }
                _ => out.push(b'%'),
            },
            b => out.push(b),
        }
        i += 1;
    }
    String::from_utf8_lossy(&out).into_owned()
}

/// A worker's state for the page: `untrusted`, `conflicts` (party to a disagreement), `working`
/// (holds jobs) or `idle`.
pub fn state_of(w: &WorkerView) -> &'static str {
    if w.untrusted {
        "untrusted"
    } else if w.conflicts > 0 {
        "conflicts"
    } else if w.jobs_leased > 0 {
        "working"
    } else {
        "idle"
    }
}

const STATES: [&str; 4] = ["untrusted", "conflicts", "working", "idle"];

/// The order of attention: untrusted, in conflicts, then the slowest (fewest counted results per
/// second), then by id.
pub fn attention_order(a: &WorkerView, b: &WorkerView) -> Ordering {
    let rank = |w: &WorkerView| STATES.iter().position(|s| *s == state_of(w));
    rank(a)
        .cmp(&rank(b))
        .then(a.results_per_second.total_cmp(&b.results_per_second))
        .then(a.worker_id.cmp(&b.worker_id))
}

/// What a filter is matched against: the worker's words, lower case, one per line.
fn haystack(w: &WorkerView) -> String {
    [&w.name, &w.host, &w.version, &w.device, &w.credential].map(|f| f.to_lowercase()).join("\n")
}

fn matches(w: &WorkerView, haystack: &str, filter: &str) -> bool {
    filter.is_empty()
        || haystack.split('\n').any(|field| field.contains(filter))
        || state_of(w) == filter
        || w.worker_id.to_string() == filter
}

/// One published worker table in the order of attention, counted by state, device, version and
/// credential: built once per table (the engine rebuilds it at most every 100 ms above 1,000
/// workers), however many readers ask for pages of it. A page without a filter then costs its
/// rows alone.
pub struct FleetIndex {
    workers: Arc<[WorkerView]>,
    /// Indices into `workers`, in [`attention_order`].
    order: Vec<u32>,
    /// Each worker's [`haystack`], by index into `workers`: made for the first filter.
    haystacks: std::sync::OnceLock<Vec<String>>,
    /// The fleet without its page fields.
    counted: Fleet,
}

impl FleetIndex {
    /// Sorts and counts `workers`.
    pub fn new(workers: Arc<[WorkerView]>) -> FleetIndex {
        let mut order: Vec<u32> = (0..workers.len() as u32).collect();
        order
            .sort_unstable_by(|&a, &b| attention_order(&workers[a as usize], &workers[b as usize]));
        let counted = Fleet {
            workers: workers.len() as u64,
            by_state: {
                let mut groups = groups(&workers, |w| state_of(w).to_owned());
                groups.sort_by_key(|g| STATES.iter().position(|s| *s == g.key));
                groups
            },
            by_device: largest(groups(&workers, |w| w.device.clone())),
            by_version: largest(groups(&workers, |w| w.version.clone())),
            by_credential: largest(groups(&workers, |w| w.credential.clone())),
            ..Fleet::default()
        };
        FleetIndex { workers, order, haystacks: Default::default(), counted }
    }

    /// The table this index was built from.
    pub fn workers(&self) -> &Arc<[WorkerView]> {
        &self.workers
    }

    /// The fleet in aggregate, and the page of workers `query` asks for.
    pub fn select(&self, query: &WorkerQuery) -> (Fleet, Vec<WorkerView>) {
        let filter = query.filter.to_lowercase();
        let in_order = self.order.iter().map(|&i| i as usize);
        let (matching, page): (usize, Vec<WorkerView>) = if filter.is_empty() {
            let page = in_order.skip(query.offset).take(query.limit);
            (self.order.len(), page.map(|i| self.workers[i].clone()).collect())
        } else {
            let (mut matching, mut page) = (0, Vec::new());
            let haystacks =
                self.haystacks.get_or_init(|| self.workers.iter().map(haystack).collect());
            for i in in_order {
                if matches(&self.workers[i], &haystacks[i], &filter) {
                    if matching >= query.offset && page.len() < query.limit {
                        page.push(self.workers[i].clone());
                    }
                    matching += 1;
                }
            }
            (matching, page)
        };
        let fleet = Fleet {
            matching: matching as u64,
            offset: query.offset.min(matching) as u64,
            limit: query.limit as u64,
            filter: query.filter.clone(),
            ..self.counted.clone()
        };
        (fleet, page)
    }
}

/// The fleet of `workers` in aggregate, and the page of them `query` asks for (an index built
/// for one reading: a live coordinator's `StatusCache` keeps one per worker table).
#[cfg(test)]
pub fn select(workers: &[WorkerView], query: &WorkerQuery) -> (Fleet, Vec<WorkerView>) {
    FleetIndex::new(Arc::from(workers)).select(query)
}

impl Group {
    fn empty(key: String) -> Group {
        Group { key, workers: 0, slots: 0, jobs_leased: 0, results: 0, results_per_second: 0.0 }
    }

    fn add(&mut self, other: &Group) {
        self.workers += other.workers;
        self.slots += other.slots;
        self.jobs_leased += other.jobs_leased;
        self.results += other.results;
        self.results_per_second += other.results_per_second;
    }
}

impl From<&WorkerView> for Group {
    /// `w` alone, without a key.
    fn from(w: &WorkerView) -> Group {
        Group {
            key: String::new(),
            workers: 1,
            slots: u64::from(w.slots),
            jobs_leased: w.jobs_leased,
            results: w.results,
            results_per_second: w.results_per_second,
        }
    }
}

fn groups(workers: &[WorkerView], key: impl Fn(&WorkerView) -> String) -> Vec<Group> {
    let mut by_key: HashMap<String, Group> = HashMap::new();
    for w in workers {
        let k = key(w);
        by_key.entry(k.clone()).or_insert_with(|| Group::empty(k)).add(&Group::from(w));
    }
    by_key.into_values().collect()
}

/// The [`MAX_GROUPS`] largest groups (by workers, then key), the rest counted as `(others)`.
fn largest(mut groups: Vec<Group>) -> Vec<Group> {
    groups.sort_by(|a, b| b.workers.cmp(&a.workers).then_with(|| a.key.cmp(&b.key)));
    if groups.len() > MAX_GROUPS {
        let mut others = Group::empty("(others)".into());
        for g in groups.split_off(MAX_GROUPS - 1) {
            others.add(&g);
        }
        groups.push(others);
    }
    groups
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;

    fn worker(id: u64, rate: f64, device: &str) -> WorkerView {
        WorkerView {
            worker_id: id,
            name: format!("w{id}"),
            host: format!("host{}", id % 10),
            slots: 4,
            version: if id.is_multiple_of(2) { "0.1.0" } else { "0.2.0" }.into(),
            results: id,
            conflicts: 0,
            jobs_leased: 2,
            last_seen_seconds_ago: 1.0,
            untrusted: false,
            credential: format!("host-{}", id % 20),
            device: device.into(),
            results_per_second: rate,
            trust: "trusted".into(),
            lease_size: 8,
        }
    }

    /// `n` working workers on the CPU, at rates that differ.
    pub(crate) fn fleet_of(n: u64) -> Vec<WorkerView> {
        (1..=n).map(|i| worker(i, 100.0 + (i * 7919 % 1000) as f64, "cpu")).collect()
    }

    #[test]
    fn the_page_puts_untrusted_then_conflicts_then_the_slowest_first() {
        let mut workers = fleet_of(10_000);
        workers[5000].untrusted = true;
        workers[42].conflicts = 1;
        workers[7].jobs_leased = 0; // idle: last
        workers[9000].results_per_second = 0.5; // the slowest working one
        let (fleet, page) = select(&workers, &WorkerQuery::default());
        assert_eq!(page.len(), DEFAULT_PAGE);
        let ids: Vec<u64> = page.iter().take(3).map(|w| w.worker_id).collect();
        assert_eq!(ids, [5001, 43, 9001]);
        assert!(page.windows(2).all(|p| attention_order(&p[0], &p[1]).is_lt()));
        // The page is the first of the whole order.
        let mut all = workers.clone();
        all.sort_by(attention_order);
        assert_eq!(page, all[..DEFAULT_PAGE]);
        let last = select(&workers, &WorkerQuery { offset: 9_950, ..Default::default() }).1;
        assert_eq!(last, all[9_950..]);
        assert_eq!(last.last().unwrap().worker_id, 8, "the idle worker comes last");
        let states: Vec<(&str, u64)> =
            fleet.by_state.iter().map(|g| (g.key.as_str(), g.workers)).collect();
        assert_eq!(states, [("untrusted", 1), ("conflicts", 1), ("working", 9_997), ("idle", 1)]);
        assert_eq!((fleet.workers, fleet.matching, fleet.offset), (10_000, 10_000, 0));
    }

    #[test]
    fn groups_add_up_and_the_small_ones_are_counted_together() {
        let workers: Vec<WorkerView> =
            (1..=100).map(|i| worker(i, 1.0, &format!("gpu{}", i % 30))).collect();
        let (fleet, _) = select(&workers, &WorkerQuery::default());
        for kind in [&fleet.by_state, &fleet.by_device, &fleet.by_version, &fleet.by_credential] {
            assert!(kind.len() <= MAX_GROUPS);
            assert_eq!(kind.iter().map(|g| g.workers).sum::<u64>(), 100);
            assert_eq!(kind.iter().map(|g| g.slots).sum::<u64>(), 400);
            assert_eq!(kind.iter().map(|g| g.results).sum::<u64>(), 5050);
        }
        assert_eq!(fleet.by_device.last().unwrap().key, "(others)");
        assert_eq!(fleet.by_version.len(), 2);
    }

    #[test]
    fn a_filter_and_a_query_string_pick_the_workers() {
        let workers = fleet_of(500);
        let q = WorkerQuery::from_query(Some("token=x&workers_filter=HOST3&workers_limit=5000"));
        assert_eq!((q.limit, q.filter.as_str(), q.offset), (MAX_PAGE, "HOST3", 0));
        let (fleet, page) = select(&workers, &q);
        assert_eq!(fleet.matching, 50);
        assert!(page.iter().all(|w| w.host == "host3"));
        let q = WorkerQuery::from_query(Some("workers_filter=w1%32+&workers_offset=x"));
        assert_eq!((q.filter.as_str(), q.offset, q.limit), ("w12 ", 0, DEFAULT_PAGE));
        assert_eq!(WorkerQuery::from_query(Some("workers_filter=%zz%")).filter, "%zz%");
        let by_id = select(&workers, &WorkerQuery { filter: "77".into(), ..Default::default() });
        assert!(by_id.1.iter().any(|w| w.worker_id == 77));
        let past_end = WorkerQuery { offset: 10_000, ..Default::default() };
        let (fleet, page) = select(&workers, &past_end);
        assert!(page.is_empty());
        assert_eq!(fleet.offset, 500);
    }
}
