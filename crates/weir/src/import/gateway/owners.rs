//! The hosts the Gateways' routes claimed, oldest route first, each to its Gateway: another
//! Gateway's routes do not get it (`HostnameConflict`). Indexed (exact names in a map, `*.`
//! wildcards apart, few): a scan of every claimed host for each host of each route was
//! quadratic, a share of the control loop's CPU per rebuild at 2,000 HTTPRoutes.

use std::collections::HashMap;

use super::host_matches;

/// A Gateway: (namespace, name).
type Gw = (String, String);

#[derive(Debug, Default)]
pub(super) struct Owners {
    exact: HashMap<String, Gw>,
    /// `*.` names, in the order claimed.
    wild: Vec<(String, Gw)>,
}

impl Owners {
    /// A claimed host overlapping `h` (the same name, or a wildcard covering the other) that
    /// is not `gw`'s, with its Gateway.
    pub(super) fn taken_from(&self, h: &str, gw: &Gw) -> Option<(&str, &Gw)> {
        if let Some((o, g)) = self.exact.get_key_value(h).filter(|(_, g)| *g != gw) {
            return Some((o.as_str(), g));
        }
        let overlaps = |o: &str| o == h || host_matches(o, h) || host_matches(h, o);
        if let Some((o, g)) = self.wild.iter().find(|(o, g)| g != gw && overlaps(o)) {
            return Some((o.as_str(), g));
        }
        if h.starts_with("*.") {
            // A wildcard covering exact names claimed before (rare: scanned, the first by
            // name so that the note is the same from one rebuild to the next).
            return self
                .exact
                .iter()
                .filter(|(o, g)| *g != gw && host_matches(h, o))
                .min_by_key(|(o, _)| o.as_str())
                .map(|(o, g)| (o.as_str(), g));
        }
        None
    }

    /// `h` claimed for `gw`, unless it is claimed already.
    pub(super) fn claim(&mut self, h: &str, gw: &Gw) {
        if h.starts_with("*.") {
            if !self.wild.iter().any(|(o, _)| o == h) {
                self.wild.push((h.to_string(), gw.clone()));
            }
        } else {
            self.exact
                .entry(h.to_string())
                .or_insert_with(|| gw.clone());
        }
    }

    /// The hosts claimed (in no order).
    pub(super) fn into_hosts(self) -> Vec<String> {
        self.exact
            .into_keys()
            .chain(self.wild.into_iter().map(|(h, _)| h))
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_host_is_its_first_claimant_s_and_wildcards_overlap_both_ways() {
        let (a, b) = (
            ("ns".to_string(), "a".to_string()),
            ("ns".to_string(), "b".to_string()),
        );
        let mut o = Owners::default();
        o.claim("shop.test", &a);
        o.claim("*.blog.test", &a);
        assert_eq!(o.taken_from("shop.test", &a), None);
        assert_eq!(
            o.taken_from("shop.test", &b).map(|(h, _)| h),
            Some("shop.test")
        );
        assert_eq!(
            o.taken_from("x.blog.test", &b).map(|(h, _)| h),
            Some("*.blog.test")
        );
        // Covered both ways: a wildcard claimed, and an exact name under the route's.
        assert_eq!(
            o.taken_from("*.test", &b).map(|(h, _)| h),
            Some("*.blog.test")
        );
        assert_eq!(o.taken_from("*.shop.test", &b), None);
        let mut o2 = Owners::default();
        o2.claim("a.shop.test", &a);
        assert_eq!(
            o2.taken_from("*.shop.test", &b).map(|(h, _)| h),
            Some("a.shop.test")
        );
        assert_eq!(o.taken_from("other.test", &b), None);
        o.claim("shop.test", &b);
        assert_eq!(o.taken_from("shop.test", &a), None, "the first claim stays");
        let mut hosts = o.into_hosts();
        hosts.sort();
        assert_eq!(hosts, ["*.blog.test", "shop.test"]);
    }
}
