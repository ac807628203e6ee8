//! The loop guard: a model that keeps making the same call is stuck, and each repeat costs.

/// Counts identical tool calls in a row. Arguments are compared as parsed JSON re-serialised
/// (object keys sorted), so `{"a":1,"b":2}` and `{"b":2, "a":1}` are the same call.
#[derive(Debug)]
pub struct RepeatGuard {
    limit: u32,
    last: Option<(String, String)>,
    count: u32,
}

impl RepeatGuard {
    /// A guard that trips at `limit` identical calls in a row (a limit of 0 or 1 trips on the
    /// first repeat-free call too, so it is raised to 2).
    pub fn new(limit: u32) -> Self {
        RepeatGuard {
            limit: limit.max(2),
            last: None,
            count: 0,
        }
    }

    /// Records a call; true when it makes `limit` identical calls in a row.
    pub fn observe(&mut self, name: &str, input_json: &str) -> bool {
        let canonical = serde_json::from_str::<serde_json::Value>(input_json)
            .map(|v| v.to_string())
            .unwrap_or_else(|_| input_json.to_string());
        let key = (name.to_string(), canonical);
        if self.last.as_ref() == Some(&key) {
            self.count += 1;
        } else {
            self.last = Some(key);
            self.count = 1;
        }
        self.count >= self.limit
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn trips_on_the_nth_identical_call_in_a_row() {
        let mut g = RepeatGuard::new(3);
        assert!(!g.observe("read_file", r#"{"path":"a","x":1}"#));
        assert!(!g.observe("read_file", r#"{"x":1, "path":"a"}"#));
        assert!(g.observe("read_file", r#"{"path":"a","x":1}"#));
    }

    #[test]
    fn a_different_call_resets_the_count() {
        let mut g = RepeatGuard::new(3);
        for _ in 0..5 {
            assert!(!g.observe("read_file", r#"{"path":"a"}"#));
            assert!(!g.observe("read_file", r#"{"path":"b"}"#));
        }
        assert!(!g.observe("list_dir", r#"{"path":"b"}"#));
    }
}
