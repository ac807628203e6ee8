//! The Pegasus home directory: where every file lives (DESIGN.md §3).
//!
//! All path knowledge is here so that no other crate spells `"projects"` or `"run/w.sock"`
//! itself; moving a file means changing one function.

use std::fs;
use std::os::unix::ffi::OsStrExt;
use std::os::unix::fs::{DirBuilderExt, PermissionsExt};
use std::path::{Path, PathBuf};

use crate::error::{Result, StoreError};

/// Longest socket path a Unix `sockaddr_un` can hold (108 bytes including the NUL).
const MAX_SOCKET_PATH: usize = 107;

/// The Pegasus home directory and every path in it (DESIGN.md §3). Cheap to clone.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Home {
    root: PathBuf,
}

impl Home {
    /// Wraps a directory as a home, as is; use [`Home::resolve`] for user input.
    pub fn new(root: impl Into<PathBuf>) -> Self {
        Home { root: root.into() }
    }

    /// Finds the home the user meant: `--home` arg, else `$PEGASUS_HOME`, else
    /// `$XDG_DATA_HOME/pegasus`, else `$HOME/.local/share/pegasus`. Relative paths are made
    /// absolute against the cwd, so the daemon and its workers agree after a `chdir`.
    pub fn resolve(arg: Option<PathBuf>) -> Result<Self> {
        let var = |k: &str| {
            std::env::var_os(k)
                .filter(|v| !v.is_empty())
                .map(PathBuf::from)
        };
        let root = arg
            .filter(|p| !p.as_os_str().is_empty())
            .or_else(|| var("PEGASUS_HOME"))
            .or_else(|| var("XDG_DATA_HOME").map(|x| x.join("pegasus")))
            .or_else(|| var("HOME").map(|h| h.join(".local/share/pegasus")))
            .ok_or_else(|| {
                StoreError::Invalid(
                    "cannot find a home directory: pass --home DIR or set PEGASUS_HOME".into(),
                )
            })?;
        let root = std::path::absolute(&root).map_err(StoreError::io(&root))?;
        Ok(Home { root })
    }

    /// The home directory itself.
    pub fn root(&self) -> &Path {
        &self.root
    }

    /// `config.yml`: optional user settings.
    pub fn config_file(&self) -> PathBuf {
        self.root.join("config.yml")
    }

    /// `pegasusd.pid`: locked while the daemon lives, so only one runs per home.
    pub fn pid_file(&self) -> PathBuf {
        self.root.join("pegasusd.pid")
    }

    /// `run/`: sockets; mode 0700 so only the user can talk to the daemon.
    pub fn run_dir(&self) -> PathBuf {
        self.root.join("run")
    }

    /// `run/pegasusd.sock`: the control socket used by `pegasusctl`.
    pub fn control_socket(&self) -> PathBuf {
        self.run_dir().join("pegasusd.sock")
    }

    /// `run/dashboard.token`: the web dashboard's access token (0600; made by pegasusd once).
    pub fn dashboard_token_file(&self) -> PathBuf {
        self.run_dir().join("dashboard.token")
    }

    /// `run/dashboard.addr`: the address the running dashboard listens on (written by pegasusd
    /// after binding, removed when it stops).
    pub fn dashboard_addr_file(&self) -> PathBuf {
        self.run_dir().join("dashboard.addr")
    }

    /// `run/w.sock`: the one listener every project worker connects to.
    pub fn worker_socket(&self) -> PathBuf {
        self.run_dir().join("w.sock")
    }

    /// `logs/`: daemon and per-worker logs.
    pub fn logs_dir(&self) -> PathBuf {
        self.root.join("logs")
    }

    /// `costs/ledger.jsonl`: one line per LLM call.
    pub fn ledger_file(&self) -> PathBuf {
        self.root.join("costs").join("ledger.jsonl")
    }

    /// `costs/pending.jsonl`: the gateway's journal of calls sent and not yet settled.
    pub fn pending_calls_file(&self) -> PathBuf {
        self.root.join("costs").join("pending.jsonl")
    }

    /// `main/`: the MainAgent's own session and memory.
    pub fn main_dir(&self) -> PathBuf {
        self.root.join("main")
    }

    /// `skills/`: global skills, visible to every project.
    pub fn skills_dir(&self) -> PathBuf {
        self.root.join("skills")
    }

    /// `preferences.md`: the user's standing preferences, in every agent's system prompt.
    pub fn preferences_file(&self) -> PathBuf {
        self.root.join("preferences.md")
    }

    /// `schedules.yml`: the scheduled jobs (DESIGN.md §10).
    pub fn schedules_file(&self) -> PathBuf {
        self.root.join("schedules.yml")
    }

    /// `schedules.state.json`: when each scheduled job last ran and last tried.
    pub fn schedules_state_file(&self) -> PathBuf {
        self.root.join("schedules.state.json")
    }

    /// `windows.state.json`: the context windows model servers reported (a cache of what
    /// they say, so a restarted pegasusd knows them without asking).
    pub fn context_windows_file(&self) -> PathBuf {
        self.root.join("windows.state.json")
    }

    /// `roles/`: user roles overriding the built-in ones.
    pub fn roles_dir(&self) -> PathBuf {
        self.root.join("roles")
    }

    /// `remote/`: what pegasusd alone decided for each remote project (its launcher, workdir
    /// and commands; see [`crate::remote_record`]), outside the shared `projects/`.
    pub fn remote_records_dir(&self) -> PathBuf {
        self.root.join("remote")
    }

    /// `projects/`: one folder per project; the folder list *is* the project list.
    pub fn projects_dir(&self) -> PathBuf {
        self.root.join("projects")
    }

    /// `projects/<name>`: a project's folder (the name is not validated here).
    pub fn project_dir(&self, name: &str) -> PathBuf {
        self.projects_dir().join(name)
    }

    /// `run/exec-<name>.jsonl`: the process groups a project's `exec` started (see
    /// `pegasus_sandbox::exec_groups`); `main` for the MainAgent.
    pub fn exec_registry(&self, name: &str) -> PathBuf {
        self.run_dir().join(format!("exec-{name}.jsonl"))
    }

    /// Creates the fixed directories of the layout. Idempotent; also tightens `run/` back to
    /// 0700 if someone loosened it, since its sockets accept commands.
    pub fn ensure_layout(&self) -> Result<()> {
        let main = self.main_dir();
        let costs = self.root.join("costs");
        for dir in [
            self.root.clone(),
            self.logs_dir(),
            costs,
            main.join("session"),
            main.join("memory"),
            self.skills_dir(),
            self.roles_dir(),
            self.projects_dir(),
        ] {
            fs::create_dir_all(&dir).map_err(StoreError::io(&dir))?;
        }
        // The home is the user's alone (DESIGN.md §12): sessions, the ledger and logs must not be
        // readable by other local users, whatever the umask made of it (also for old homes).
        fs::set_permissions(&self.root, fs::Permissions::from_mode(0o700))
            .map_err(StoreError::io(&self.root))?;
        let run = self.run_dir();
        match fs::DirBuilder::new().mode(0o700).create(&run) {
            Ok(()) => {}
            Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => {}
            Err(e) => return Err(StoreError::io(&run)(e)),
        }
        let meta = fs::metadata(&run).map_err(StoreError::io(&run))?;
        if !meta.is_dir() {
            return Err(StoreError::Invalid(format!(
                "{} is not a directory: remove it so Pegasus can create its run directory",
                run.display()
            )));
        }
        if meta.permissions().mode() & 0o777 != 0o700 {
            fs::set_permissions(&run, fs::Permissions::from_mode(0o700))
                .map_err(StoreError::io(&run))?;
        }
        Ok(())
    }

    /// Refuses a home whose socket paths would not fit in a Unix socket address; binding would
    /// otherwise fail later with an obscure error.
    pub fn check_socket_paths(&self) -> Result<()> {
        for sock in [self.control_socket(), self.worker_socket()] {
            let n = sock.as_os_str().as_bytes().len();
            if n > MAX_SOCKET_PATH {
                return Err(StoreError::Invalid(format!(
                    "socket path {} is {n} bytes, over the {MAX_SOCKET_PATH}-byte Unix limit: use a shorter --home",
                    sock.display()
                )));
            }
        }
        Ok(())
    }
}

/// Home directory of a project folder: `projects/<name>` -> `<home>`. Used by the worker, which
/// is given only its project path. `None` if the folder is not inside a `projects/` directory.
pub fn home_of_project(project_dir: &Path) -> Option<Home> {
    let dir = std::path::absolute(project_dir).ok()?;
    let projects = dir.parent()?;
    if projects.file_name()? != "projects" {
        return None;
    }
    Some(Home::new(projects.parent()?))
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used)]
    use super::*;

    #[test]
    fn paths_follow_the_spec_layout() {
        let h = Home::new("/h");
        assert_eq!(h.config_file(), Path::new("/h/config.yml"));
        assert_eq!(h.pid_file(), Path::new("/h/pegasusd.pid"));
        assert_eq!(h.control_socket(), Path::new("/h/run/pegasusd.sock"));
        assert_eq!(h.worker_socket(), Path::new("/h/run/w.sock"));
        assert_eq!(h.logs_dir(), Path::new("/h/logs"));
        assert_eq!(h.ledger_file(), Path::new("/h/costs/ledger.jsonl"));
        assert_eq!(h.main_dir(), Path::new("/h/main"));
        assert_eq!(h.skills_dir(), Path::new("/h/skills"));
        assert_eq!(h.roles_dir(), Path::new("/h/roles"));
        assert_eq!(h.project_dir("foo"), Path::new("/h/projects/foo"));
    }

    #[test]
    fn resolve_prefers_the_argument_and_makes_it_absolute() {
        let h = Home::resolve(Some(PathBuf::from("rel/home"))).unwrap();
        assert!(h.root().is_absolute());
        assert!(h.root().ends_with("rel/home"));
        let h = Home::resolve(Some(PathBuf::from("/abs"))).unwrap();
        assert_eq!(h.root(), Path::new("/abs"));
    }

    #[test]
    fn ensure_layout_creates_dirs_and_tightens_run() {
        let dir = tempfile::tempdir().unwrap();
        let h = Home::new(dir.path().join("home"));
        h.ensure_layout().unwrap();
        for d in [
            "logs",
            "costs",
            "main/session",
            "main/memory",
            "skills",
            "roles",
            "projects",
        ] {
            assert!(h.root().join(d).is_dir(), "{d}");
        }
        let mode = |p: &Path| fs::metadata(p).unwrap().permissions().mode() & 0o777;
        assert_eq!(mode(&h.run_dir()), 0o700);
        fs::set_permissions(h.run_dir(), fs::Permissions::from_mode(0o755)).unwrap();
        h.ensure_layout().unwrap();
        assert_eq!(mode(&h.run_dir()), 0o700);
        assert_eq!(mode(h.root()), 0o700, "the home is the user's alone");
        fs::set_permissions(h.root(), fs::Permissions::from_mode(0o755)).unwrap();
        h.ensure_layout().unwrap();
        assert_eq!(mode(h.root()), 0o700, "an old home is tightened");
    }

    #[test]
    fn long_socket_paths_are_refused() {
        assert!(Home::new("/tmp/h").check_socket_paths().is_ok());
        let long = format!("/{}", "x".repeat(100));
        let err = Home::new(long)
            .check_socket_paths()
            .unwrap_err()
            .to_string();
        assert!(
            err.contains("107-byte Unix limit: use a shorter --home"),
            "{err}"
        );
    }

    #[test]
    fn home_of_project_walks_up_two_levels() {
        let h = home_of_project(Path::new("/h/projects/foo")).unwrap();
        assert_eq!(h.root(), Path::new("/h"));
        assert!(home_of_project(Path::new("/h/other/foo")).is_none());
    }
}
