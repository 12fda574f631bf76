//! Counts of events not kept, by named reason.

use std::collections::BTreeMap;

/// Events not kept, counted by named reason (`non_finite`, `met_count`, `too_few_nodes`, …).
///
/// A malformed event is data, not an error: every stage that drops one adds it here, and the
/// counts are reported to the user and stored with the cache.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct SkipCounts {
    counts: BTreeMap<String, u64>,
}

impl SkipCounts {
    /// Counts one event under `reason`.
    pub fn add(&mut self, reason: &str) {
        self.add_n(reason, 1);
    }

    /// Counts `n` events under `reason`.
    pub fn add_n(&mut self, reason: &str, n: u64) {
        if n == 0 {
            return;
        }
        match self.counts.get_mut(reason) {
            Some(c) => *c += n,
            None => {
                self.counts.insert(reason.to_owned(), n);
            }
        }
    }

    /// Adds every count of `other`.
    pub fn merge(&mut self, other: &SkipCounts) {
        for (reason, n) in &other.counts {
            self.add_n(reason, *n);
        }
    }

    /// The count for one reason (0 when never seen).
    pub fn get(&self, reason: &str) -> u64 {
        self.counts.get(reason).copied().unwrap_or(0)
    }

    /// Total events skipped, all reasons together.
    pub fn total(&self) -> u64 {
        self.counts.values().sum()
    }

    /// `(reason, count)` pairs in reason order.
    pub fn iter(&self) -> impl Iterator<Item = (&str, u64)> {
        self.counts.iter().map(|(r, n)| (r.as_str(), *n))
    }
}

impl std::fmt::Display for SkipCounts {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        if self.counts.is_empty() {
            return f.write_str("none");
        }
        let parts: Vec<String> = self.iter().map(|(r, n)| format!("{r}: {n}")).collect();
        f.write_str(&parts.join(", "))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn counts_merge_and_display() {
        let mut a = SkipCounts::default();
        a.add("non_finite");
        a.add_n("met_count", 2);
        a.add_n("ignored", 0);
        let mut b = SkipCounts::default();
        b.add("non_finite");
        b.merge(&a);
        assert_eq!(b.get("non_finite"), 2);
        assert_eq!(b.total(), 4);
        assert_eq!(b.to_string(), "met_count: 2, non_finite: 2");
        assert_eq!(SkipCounts::default().to_string(), "none");
    }
}
