//! Task ids: `t-<YYYYMMDD>-<6 random hex>`.
//!
//! The date in the id is the creation date, which is also the name of the folder holding the
//! task's event file, so a task is found from its id alone without reading the index. The
//! random part comes from the kernel so two processes creating tasks in the same second do not
//! collide (the store still retries if one ever does).

use std::io::Read;

use chrono::{DateTime, NaiveDate, Utc};

use crate::error::TaskError;

const URANDOM: &str = "/dev/urandom";

/// A fresh id for a task created at `now`.
pub fn new_task_id(now: DateTime<Utc>) -> Result<String, TaskError> {
    let mut bytes = [0u8; 3];
    std::fs::File::open(URANDOM)
        .and_then(|mut f| f.read_exact(&mut bytes))
        .map_err(TaskError::io(URANDOM))?;
    let hex: String = bytes.iter().map(|b| format!("{b:02x}")).collect();
    Ok(format!("t-{}-{hex}", now.format("%Y%m%d")))
}

/// The event folder name (`YYYY-MM-DD`) an id of our format points to; `None` for an id of
/// another shape (older tasks), which are then searched for.
pub(crate) fn date_dir_of(id: &str) -> Option<String> {
    let digits = id.strip_prefix("t-")?.get(..8)?;
    let date = NaiveDate::parse_from_str(digits, "%Y%m%d").ok()?;
    Some(date.format("%Y-%m-%d").to_string())
}

/// Whether `id` can safely be used as a file name: ids come from users and models, and must
/// never reach outside `tasks/`.
pub(crate) fn is_safe_id(id: &str) -> bool {
    !id.is_empty()
        && id.len() <= 128
        && !id.starts_with('.')
        && id
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || c == '-' || c == '_')
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used)]
    use super::*;
    use chrono::TimeZone;

    #[test]
    fn id_has_the_date_and_six_hex_digits_and_names_its_folder() {
        let now = Utc.with_ymd_and_hms(2026, 3, 7, 12, 0, 0).unwrap();
        let id = new_task_id(now).unwrap();
        assert!(id.starts_with("t-20260307-"), "{id}");
        let tail = &id["t-20260307-".len()..];
        assert_eq!(tail.len(), 6);
        assert!(tail.chars().all(|c| c.is_ascii_hexdigit()));
        assert_eq!(date_dir_of(&id).as_deref(), Some("2026-03-07"));
        assert!(is_safe_id(&id));
    }

    #[test]
    fn ids_that_could_escape_the_folder_are_unsafe() {
        for bad in ["", "../x", "a/b", ".hidden", "x y", "t-1\n"] {
            assert!(!is_safe_id(bad), "{bad:?}");
        }
        assert_eq!(date_dir_of("20260307-abc"), None);
        assert_eq!(date_dir_of("t-20261399-abcdef"), None);
    }
}
