//! Who is on the other end of a control connection. The control socket is the user's (mode
//! 0600), but a model-run command (`exec` in a worker, or in the MainAgent) runs as the same
//! user and could otherwise stop or steer every project. Such a command always descends from
//! pegasusd — workers are its children, and the MainAgent's commands are too — so a peer with
//! pegasusd among its ancestors is refused. `pegasusctl` started by the user never is.

/// The parent of `pid`, from `/proc/<pid>/stat` (the field after the parenthesised command,
/// which may itself contain spaces and parentheses).
fn parent(pid: u32) -> Option<u32> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    let after = stat.get(stat.rfind(')')? + 1..)?;
    after.split_whitespace().nth(1)?.parse().ok()
}

/// Whether `peer` descends from the process `ancestor`.
pub(crate) fn descends_from(peer: u32, ancestor: u32) -> bool {
    let mut pid = peer;
    // Bounded: a chain of pids cannot be longer than the number of processes, and a cycle
    // (a pid reused mid-walk) must not loop forever.
    for _ in 0..4096 {
        match parent(pid) {
            Some(p) if p == ancestor => return true,
            Some(0) | None => return false,
            Some(p) if p == pid => return false,
            Some(p) => pid = p,
        }
    }
    false
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used)]
    use super::*;

    #[test]
    fn a_child_descends_from_us_and_we_do_not_descend_from_it() {
        let mut child = std::process::Command::new("sleep")
            .arg("5")
            .spawn()
            .unwrap();
        let (me, kid) = (std::process::id(), child.id());
        assert!(descends_from(kid, me));
        assert!(!descends_from(me, kid));
        assert!(!descends_from(me, me + 1_000_000));
        child.kill().unwrap();
        child.wait().unwrap();
    }
}
