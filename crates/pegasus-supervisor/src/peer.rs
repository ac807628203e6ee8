//! Who is on the other end of a control connection. The control socket is the user's (mode
//! 0600), but a model-run command (`exec` in a worker or in the MainAgent, `hydrate`,
//! `verify`, an MCP server) runs as the same user and could otherwise stop or steer every
//! project. Such a command runs in a PID namespace of its own (`pegasus_sandbox::confine`),
//! which no process can leave: a peer whose PID namespace is not pegasusd's is refused, and so
//! is one that cannot be told (its namespace unreadable). Ancestry is checked as well, for a
//! kernel without namespaces; unlike the namespace it is lost when a command outlives a
//! pegasusd (see the module of `pegasus_sandbox::contain`). `pegasusctl` started by the user
//! runs in pegasusd's namespace and never descends from it.

/// The parent of `pid`, from `/proc/<pid>/stat` (the field after the parenthesised command,
/// which may itself contain spaces and parentheses).
fn parent(pid: u32) -> Option<u32> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    let after = stat.get(stat.rfind(')')? + 1..)?;
    after.split_whitespace().nth(1)?.parse().ok()
}

/// The pid the kernel reports for the process on the other end of `stream` (`SO_PEERCRED`);
/// `None` when it cannot be read.
pub(crate) fn pid_of(stream: &interprocess::local_socket::tokio::Stream) -> Option<u32> {
    use interprocess::local_socket::tokio::prelude::*;
    stream
        .peer_creds()
        .ok()
        .and_then(|c| c.pid())
        .and_then(|p| u32::try_from(p).ok())
}

/// Why a control peer must be refused, or `None` when it may talk: it is in another PID
/// namespace (a command a model ran), its namespace cannot be read, or it descends from
/// pegasusd. A peer the kernel could not name (pid 0: a namespace pegasusd cannot see, which
/// no command of its own can be in) may talk.
pub(crate) fn refusal(peer: u32) -> Option<&'static str> {
    if peer == 0 {
        return None;
    }
    let ours = std::fs::read_link("/proc/self/ns/pid").ok();
    match (std::fs::read_link(format!("/proc/{peer}/ns/pid")), ours) {
        (Ok(theirs), Some(ours)) if theirs != ours => {
            return Some("in another PID namespace (a model-run command)")
        }
        (Err(_), Some(_)) => return Some("its PID namespace cannot be read"),
        _ => {}
    }
    descends_from(peer, std::process::id()).then_some("started by pegasusd (a model-run command)")
}

/// Whether `peer` descends from the process `ancestor`.
fn descends_from(peer: u32, ancestor: u32) -> bool {
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
    fn a_peer_in_its_own_pid_namespace_is_refused_and_a_stranger_is_not() {
        // A process of ours in our namespace: refused for its ancestry alone.
        let mut child = std::process::Command::new("sleep")
            .arg("5")
            .spawn()
            .unwrap();
        assert!(refusal(child.id()).unwrap().contains("started by pegasusd"));
        child.kill().unwrap();
        child.wait().unwrap();
        // Our own parent (the test runner's side): not ours, same namespace.
        assert_eq!(refusal(nix::unistd::getppid().as_raw() as u32), None);
        assert_eq!(refusal(0), None);
        if !pegasus_sandbox::probe().namespaces {
            return;
        }
        let mut cmd = std::process::Command::new("sleep");
        cmd.arg("5");
        pegasus_sandbox::confine(
            &mut cmd,
            pegasus_sandbox::Confinement {
                sandbox: None,
                workdir: std::path::Path::new("/"),
            },
        )
        .unwrap();
        let mut launcher = cmd.spawn().unwrap();
        // The command is the launcher's grandchild: find it by its parent's parent.
        let sleeper = common_poll(|| {
            std::fs::read_dir("/proc").ok()?.flatten().find_map(|e| {
                let pid: u32 = e.file_name().to_str()?.parse().ok()?;
                let init = parent(pid)?;
                (parent(init)? == launcher.id()).then_some(pid)
            })
        });
        assert!(refusal(sleeper).unwrap().contains("another PID namespace"));
        launcher.kill().unwrap();
        launcher.wait().unwrap();
    }

    fn common_poll<T>(mut f: impl FnMut() -> Option<T>) -> T {
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
        loop {
            if let Some(v) = f() {
                return v;
            }
            assert!(std::time::Instant::now() < deadline, "timed out");
            std::thread::sleep(std::time::Duration::from_millis(10));
        }
    }

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
