//! pegasusd's record of when it first saw each waiting request (`<home>/approvals.seen`).

use std::collections::BTreeMap;
use std::path::Path;

use chrono::{DateTime, Utc};
use pegasus_store::atomic::write_atomic;
use pegasus_store::Result;

use crate::request::{valid_id, ApprovalRequest};

/// The file under the home where pegasusd remembers when it first saw each waiting request.
pub const SEEN_FILE: &str = "approvals.seen";

/// When pegasusd first saw each waiting request (DESIGN.md §11: expiry is judged by pegasusd's
/// clock from that moment, so a remote host whose clock is behind or ahead neither hides its
/// requests nor stretches them). `<home>/approvals.seen`, lines `ID RFC3339`, written
/// atomically by pegasusd only; a request answered or gone is forgotten.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Seen {
    map: BTreeMap<String, DateTime<Utc>>,
}

impl Seen {
    /// The record of the home at `home_root` (empty when missing or unreadable: every request
    /// then counts as seen at its next look).
    pub fn load(home_root: &Path) -> Seen {
        let path = home_root.join(SEEN_FILE);
        let text = pegasus_store::read_text_limited(&path, 4 << 20).unwrap_or_default();
        let map = text
            .lines()
            .filter_map(|l| {
                let (id, at) = l.trim().split_once(' ')?;
                let at = DateTime::parse_from_rfc3339(at.trim()).ok()?;
                valid_id(id).then(|| (id.to_string(), at.with_timezone(&Utc)))
            })
            .collect();
        Seen { map }
    }

    /// Writes the record atomically.
    pub fn save(&self, home_root: &Path) -> Result<()> {
        let mut text = String::new();
        for (id, at) in &self.map {
            text.push_str(&format!(
                "{id} {}\n",
                at.to_rfc3339_opts(chrono::SecondsFormat::Millis, true)
            ));
        }
        write_atomic(&home_root.join(SEEN_FILE), text.as_bytes())
    }

    /// When pegasusd first saw request `id`.
    pub fn get(&self, id: &str) -> Option<DateTime<Utc>> {
        self.map.get(id).copied()
    }

    /// When `request` runs out of time by pegasusd's clock (one not seen yet counts as seen
    /// `now`).
    pub fn expires_at(&self, request: &ApprovalRequest, now: DateTime<Utc>) -> DateTime<Utc> {
        let from = self.get(&request.id).unwrap_or(now);
        from + chrono::Duration::seconds(request.timeout_s.min(i64::MAX as u64 / 4) as i64)
    }

    /// Notes the first sight of `id` at `now`; whether it is new.
    pub fn note(&mut self, id: &str, now: DateTime<Utc>) -> bool {
        if !valid_id(id) || self.map.contains_key(id) {
            return false;
        }
        self.map.insert(id.to_string(), now);
        true
    }

    /// Forgets every request not in `waiting`; whether any was forgotten.
    pub fn keep_only(&mut self, waiting: &std::collections::HashSet<&str>) -> bool {
        let before = self.map.len();
        self.map.retain(|id, _| waiting.contains(id.as_str()));
        self.map.len() != before
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;
    use crate::request::tests::request;
    use crate::request::{waiting, waiting_seen, write_request};

    #[test]
    fn pegasusds_clock_starts_when_it_first_sees_a_request() {
        let home = tempfile::tempdir().unwrap();
        let now = Utc::now();
        // Asked five hours ago by a host's clock: pegasusd sees it now, so it waits its 60 s.
        let behind = request("ap-behind", now - chrono::Duration::hours(5));
        let mut seen = Seen::load(home.path());
        assert!(seen.note("ap-behind", now));
        assert!(!seen.note("ap-behind", now + chrono::Duration::seconds(30)));
        assert!(!seen.note("../x", now));
        assert_eq!(
            seen.expires_at(&behind, now + chrono::Duration::seconds(50)),
            now + chrono::Duration::seconds(60)
        );
        seen.save(home.path()).unwrap();
        let again = Seen::load(home.path());
        let ms = |t: DateTime<Utc>| t.timestamp_millis();
        assert_eq!(again.get("ap-behind").map(ms), Some(ms(now)));
        // Unseen: counts from now.
        let other = request("ap-other", now - chrono::Duration::hours(5));
        assert_eq!(
            again.expires_at(&other, now),
            now + chrono::Duration::seconds(60)
        );
        let mut pruned = again.clone();
        assert!(pruned.keep_only(&std::collections::HashSet::from(["ap-other"])));
        assert_eq!(pruned.get("ap-behind"), None);
        // `waiting` lists it by that clock.
        let projects = home.path().join("projects");
        let p = projects.join("web");
        std::fs::create_dir_all(&p).unwrap();
        write_request(&p, &behind).unwrap();
        assert_eq!(waiting(&projects, None).len(), 1);
        let mut old = Seen::default();
        old.note("ap-behind", now - chrono::Duration::seconds(61));
        assert!(waiting_seen(&projects, None, &old).is_empty());
    }
}
