//! The published counts, carried in the binary: `reference/known-counts.tsv` (Total, Unique and the
//! symmetry classes, OEIS A000170, A002562, A033148 and A032522) and `reference/rotation-counts.tsv`
//! (the rotation-symmetric counts of boards whose Total is still unknown, OEIS A032522 and A033148).
//!
//! A run's result is compared with them wherever they are known: a cheap check of an exact answer,
//! also for a board no one has counted, since COUNT2 and COUNT4 come from the far smaller search
//! of the rotation-symmetric solutions.

use std::collections::BTreeMap;
use std::sync::OnceLock;

const KNOWN_COUNTS: &str = include_str!("../../reference/known-counts.tsv");
const ROTATION_COUNTS: &str = include_str!("../../reference/rotation-counts.tsv");

/// What is published for one board size: every field is `None` where no value is published (the
/// classes of N = 1, which is degenerate; Total, Unique and COUNT8 beyond the known Totals).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct PublishedCounts {
    /// The board size.
    pub n: u8,
    /// All solutions (OEIS A000170).
    pub total: Option<u128>,
    /// Solutions up to the 8 symmetries (OEIS A002562).
    pub unique: Option<u128>,
    /// Fundamental solutions with 2 distinct variants (fixed by the 90-degree rotation).
    pub count2: Option<u128>,
    /// Fundamental solutions with 4 distinct variants (fixed by the 180-degree rotation only).
    pub count4: Option<u128>,
    /// Fundamental solutions with 8 distinct variants.
    pub count8: Option<u128>,
}

/// One figure of a result that differs from its published value.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Mismatch {
    /// `Total`, `Unique`, `COUNT2`, `COUNT4` or `COUNT8`.
    pub figure: &'static str,
    /// What the result says.
    pub found: u128,
    /// What is published.
    pub published: u128,
}

impl std::fmt::Display for Mismatch {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{} is {} but the published value is {}", self.figure, self.found, self.published)
    }
}

impl PublishedCounts {
    /// The published figures against a result's (`None` where the result has no such figure):
    /// every figure that both have and that differs.
    pub fn mismatches(
        &self,
        total: Option<u128>,
        unique: Option<u128>,
        classes: Option<[u128; 3]>,
    ) -> Vec<Mismatch> {
        let [c2, c4, c8] = classes.map_or([None; 3], |c| c.map(Some));
        [
            ("Total", total, self.total),
            ("Unique", unique, self.unique),
            ("COUNT2", c2, self.count2),
            ("COUNT4", c4, self.count4),
            ("COUNT8", c8, self.count8),
        ]
        .into_iter()
        .filter_map(|(figure, found, published)| match (found, published) {
            (Some(found), Some(published)) if found != published => {
                Some(Mismatch { figure, found, published })
            }
            _ => None,
        })
        .collect()
    }

    /// Whether COUNT2 and COUNT4 are both published for this board.
    pub fn has_rotation_classes(&self) -> bool {
        self.count2.is_some() && self.count4.is_some()
    }
}

/// The published counts of board size `n`, or `None` where nothing is published.
pub fn published_counts(n: u32) -> Option<PublishedCounts> {
    table().get(&u8::try_from(n).ok()?).copied()
}

/// Every board size with published counts, in order.
pub fn published_table() -> &'static BTreeMap<u8, PublishedCounts> {
    table()
}

fn table() -> &'static BTreeMap<u8, PublishedCounts> {
    static TABLE: OnceLock<BTreeMap<u8, PublishedCounts>> = OnceLock::new();
    TABLE.get_or_init(|| {
        let mut table = BTreeMap::new();
        for row in rows(KNOWN_COUNTS, 8) {
            let n = row[0].expect("known-counts.tsv: n") as u8;
            let [total, unique, count2, count4, count8] = [row[1], row[2], row[5], row[6], row[7]];
            table.insert(n, PublishedCounts { n, total, unique, count2, count4, count8 });
        }
        for row in rows(ROTATION_COUNTS, 5) {
            let n = row[0].expect("rotation-counts.tsv: n") as u8;
            let entry = table.entry(n).or_insert(PublishedCounts { n, ..Default::default() });
            entry.count2 = entry.count2.or(row[3]);
            entry.count4 = entry.count4.or(row[4]);
        }
        table
    })
}

/// The data rows of an embedded table, each field a number or `None` for `-`. The files are part
/// of the source, so a malformed one is a build mistake that the unit tests catch.
fn rows(text: &'static str, columns: usize) -> impl Iterator<Item = Vec<Option<u128>>> {
    text.lines()
        .filter(|line| {
            !line.starts_with('#') && !line.starts_with("n\t") && !line.trim().is_empty()
        })
        .map(move |line| {
            let fields: Vec<Option<u128>> = line
                .split('\t')
                .map(|f| (f != "-").then(|| f.parse().expect("reference table: a number")))
                .collect();
            assert_eq!(fields.len(), columns, "reference table: {line}");
            fields
        })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_row_is_consistent_with_its_classes() {
        let table = published_table();
        assert!(table.len() >= 28, "{} rows", table.len());
        for p in table.values() {
            if let (Some(total), Some(c2), Some(c4), Some(c8)) =
                (p.total, p.count2, p.count4, p.count8)
            {
                assert_eq!(total, 2 * c2 + 4 * c4 + 8 * c8, "n = {}", p.n);
                assert_eq!(p.unique, Some(c2 + c4 + c8), "n = {}", p.n);
            }
        }
    }

    #[test]
    fn n28_carries_only_its_rotation_classes() {
        let p = published_counts(28).unwrap();
        assert_eq!((p.total, p.unique, p.count8), (None, None, None));
        assert_eq!((p.count2, p.count4), (Some(16_448), Some(312_717_136)));
        assert!(p.has_rotation_classes());
        assert_eq!(published_counts(8).unwrap().total, Some(92));
        assert!(published_counts(29).is_none() && published_counts(300).is_none());
    }

    #[test]
    fn a_differing_figure_is_named() {
        let p = published_counts(8).unwrap();
        assert!(p.mismatches(Some(92), Some(12), Some([0, 1, 11])).is_empty());
        let wrong = p.mismatches(Some(100), None, Some([0, 1, 11]));
        assert_eq!(wrong.len(), 1);
        assert_eq!(wrong[0].to_string(), "Total is 100 but the published value is 92");
        let p28 = published_counts(28).unwrap();
        assert_eq!(p28.mismatches(Some(5), Some(5), Some([16_448, 1, 1]))[0].figure, "COUNT4");
    }
}
