//! Workers on other hosts (DESIGN.md §14): the TCP listener on `workers.listen` (mutual TLS only)
//! and what a launch needs from it. A connection is enrollment (a token traded for a client
//! certificate) or a worker link (a certificate, then the same hello as on the Unix socket,
//! see [`crate::worker_server::hello`]); everything else is refused, logged with the peer's
//! address and the reason, and closed within [`pegasus_remote::ACCEPT_TIMEOUT`].

use crate::{
    gate::{Caps, Gate, Peer as Who, PeerKey, RefusalLog},
    pending::PendingSpawns,
    slot::{LinkRead, LinkWrite},
    worker_server::{hello, Peer},
};
use pegasus_remote::{Accepted, Authority};
use pegasus_store::{
    launcher::{LauncherConfig, Setting},
    Config, Home,
};
use std::{net::SocketAddr, sync::Arc};
use tokio::net::{TcpListener, TcpStream};

/// How pegasusd reaches workers elsewhere: the link's authority (with `workers.listen`) and
/// the Kubernetes launchers.
#[derive(Default)]
pub(crate) struct Elsewhere {
    pub remote: Option<Arc<Remote>>,
    pub pods: std::collections::HashMap<String, Arc<pegasus_kube::PodLauncher>>,
}

/// pegasusd's side of remote links: its certificate authority and where it listens.
pub(crate) struct Remote {
    pub authority: Authority,
}

impl Remote {
    /// The authority under `<home>/tls/`, with a server certificate for every name a launcher
    /// connects to (and the listen address).
    pub fn open(home: &Home, config: &Config, listen: SocketAddr) -> Result<Remote, String> {
        let mut names: Vec<String> = config
            .launchers
            .values()
            .filter_map(|l| match l {
                LauncherConfig::Command(c) => Some(c.connect.clone()),
                LauncherConfig::Kubernetes(k) => match &k.connect {
                    Setting::Given(c) => Some(c.clone()),
                    Setting::Absent | Setting::Wrong(_) => None,
                },
            })
            .filter_map(|c| pegasus_remote::host_of(&c).map(str::to_string))
            .collect();
        if !listen.ip().is_unspecified() {
            names.push(listen.ip().to_string());
        }
        names.sort();
        names.dedup();
        let authority = Authority::open_or_create(&home.root().join("tls"), &names)
            .map_err(|e| e.to_string())?;
        Ok(Remote { authority })
    }
}

/// The Kubernetes launchers of config.yml, each checked and connected to its cluster; the
/// pods of this home that a previous pegasusd left are adopted (those of active projects
/// using that launcher, still running) or deleted. An error names the launcher's key.
pub(crate) async fn pod_launchers(
    home: &Home,
    config: &Config,
) -> Result<std::collections::HashMap<String, Arc<pegasus_kube::PodLauncher>>, String> {
    let mut out = std::collections::HashMap::new();
    for (name, launcher) in &config.launchers {
        let entry = match launcher {
            LauncherConfig::Kubernetes(entry) => entry,
            // A command launcher has no client to connect and no pods to adopt.
            LauncherConfig::Command(_) => continue,
        };
        let settings = pegasus_kube::KubeSettings::from_entry(entry, home.root())
            .map_err(|e| format!("launchers.{name}: {e}"))?;
        let id = pegasus_kube::HomeId::new(&home_id(home)?).map_err(|e| e.to_string())?;
        let pods = pegasus_kube::PodLauncher::connect(settings, id)
            .await
            .map_err(|e| format!("launchers.{name}: {e}"))?;
        let active: Vec<String> = pegasus_store::scan_projects(home)
            .map_err(|e| e.to_string())?
            .into_iter()
            .filter(|e| {
                // A remote project's launcher is pegasusd's record's, not its shared folder's.
                let recorded = pegasus_store::remote_record::read(home, &e.name)
                    .ok()
                    .flatten()
                    .map(|r| r.launcher);
                e.project.as_ref().is_ok_and(|p| {
                    let launcher = recorded
                        .as_deref()
                        .or(p.launcher())
                        .unwrap_or(&config.default_launcher);
                    p.status() == pegasus_store::ProjectStatus::Active && launcher == name
                })
            })
            .map(|e| e.name)
            .collect();
        match pods.adopt_or_delete(&active).await {
            Ok(a) => {
                tracing::info!(launcher = %name, adopted = a.adopted.len(), deleted = a.deleted.len(), "pods of an earlier pegasusd looked at")
            }
            Err(e) => {
                tracing::warn!(launcher = %name, "cannot look at the pods an earlier pegasusd left: {e}")
            }
        }
        out.insert(name.clone(), Arc::new(pods));
    }
    Ok(out)
}

/// This home's id (made once, kept in `<home>/home-id`): what its pods are labelled with, so
/// two homes can share a namespace.
fn home_id(home: &Home) -> Result<String, String> {
    let path = home.root().join("home-id");
    if let Ok(id) = pegasus_store::read_text_limited(&path, 128) {
        let id = id.trim().to_string();
        if !id.is_empty() {
            return Ok(id);
        }
    }
    let id = crate::spawn::new_token().map_err(|e| format!("cannot make a home id: {e}"))?;
    pegasus_store::write_atomic(&path, id.as_bytes())
        .map_err(|e| format!("cannot write {}: {e}", path.display()))?;
    Ok(id)
}

/// The most a remote worker's share of the home may weigh: well below a frame's limit.
const HOME_FILES_MAX: usize = 4 << 20;
/// The most one of those files may weigh.
const HOME_FILE_MAX: u64 = 1 << 20;

/// The home's roles, global skills and preferences, for a worker on another host that has
/// only its project folder (DESIGN.md §14: everything else comes over the link). A file that
/// cannot be read, or is too large, is left out with a warning.
pub(crate) fn home_files(home: &Home) -> pegasus_proto::worker::HomeFiles {
    let mut files = pegasus_proto::worker::HomeFiles::default();
    let mut total = 0usize;
    let take = |path: &std::path::Path, total: &mut usize| -> Option<String> {
        match pegasus_store::read_text_limited(path, HOME_FILE_MAX) {
            Ok(text) if *total + text.len() <= HOME_FILES_MAX => {
                *total += text.len();
                Some(text)
            }
            Ok(_) => {
                tracing::warn!(file = %path.display(), "a remote worker's share of the home is full; not sending this file");
                None
            }
            Err(pegasus_store::ReadError::NotFound) => None,
            Err(e) => {
                tracing::warn!(file = %path.display(), "not sent to remote workers: {e}");
                None
            }
        }
    };
    let names = |dir: &std::path::Path| -> Vec<String> {
        let mut names: Vec<String> = std::fs::read_dir(dir)
            .into_iter()
            .flatten()
            .flatten()
            .filter_map(|e| e.file_name().to_str().map(str::to_string))
            .collect();
        names.sort();
        names
    };
    let roles = home.roles_dir();
    for name in names(&roles).into_iter().filter(|n| n.ends_with(".md")) {
        if let Some(text) = take(&roles.join(&name), &mut total) {
            files.roles.push((name, text));
        }
    }
    let skills = home.skills_dir();
    for name in names(&skills) {
        if name.starts_with('.') {
            continue;
        }
        let rel = format!("{name}/SKILL.md");
        if let Some(text) = take(&skills.join(&rel), &mut total) {
            files.skills.push((rel, text));
        }
    }
    files.preferences = take(&home.preferences_file(), &mut total);
    files
}

/// Binds `workers.listen`; a refusal names the key.
pub(crate) async fn bind(listen: &str) -> Result<(SocketAddr, TcpListener), String> {
    let addr: SocketAddr = listen
        .parse()
        .map_err(|_| format!("workers.listen: `{listen}` must be IP:PORT, e.g. 0.0.0.0:7475"))?;
    let listener = TcpListener::bind(addr).await.map_err(|e| {
        format!("workers.listen: cannot listen on {addr}: {e}; pick a free port or an address of this host")
    })?;
    let bound = listener.local_addr().unwrap_or(addr);
    Ok((bound, listener))
}

/// A connection counts from its accept until its hello hands it to its slot (at most
/// [`pegasus_remote::ACCEPT_TIMEOUT`] for the TLS and enrollment, then the hello's): one peer —
/// a host, or one user of this host — may have that many handshakes under way, so a flood of
/// silent connections is refused at once instead of delaying a real worker's.
const CAPS: Caps = Caps {
    total: 256,
    per_peer: 32,
    per_process: 32,
};

/// Accepts remote worker connections until `shutdown`; each hello claims one of `spawns`.
pub(crate) async fn serve(
    remote: Arc<Remote>,
    spawns: Arc<PendingSpawns>,
    shutdown: tokio_util::sync::CancellationToken,
    listener: TcpListener,
) {
    let gate = Gate::new("workers.listen", CAPS);
    let log = gate.log().clone();
    crate::accept::serve(gate, listener, shutdown, move |conn, who| {
        connection(remote.clone(), spawns.clone(), conn, who, log.clone())
    })
    .await
}

async fn connection(
    remote: Arc<Remote>,
    spawns: Arc<PendingSpawns>,
    (tcp, addr): (TcpStream, SocketAddr),
    who: Who,
    log: Arc<RefusalLog>,
) {
    // Refusals are grouped by the address (a local peer's uid too), not the port.
    let label = match who.key {
        PeerKey::User { uid, .. } => format!("{} (uid {uid})", addr.ip()),
        _ => addr.ip().to_string(),
    };
    let _ = tcp.set_nodelay(true);
    match remote.authority.accept(tcp).await {
        Ok(Accepted::Enrolled { project }) => {
            tracing::info!(peer = %addr, %project, "remote worker enrolled");
        }
        Ok(Accepted::Worker { certified, stream }) => {
            let (recv, send) = tokio::io::split(stream);
            let peer = Peer::Remote { addr, certified };
            hello(
                &spawns,
                Box::new(recv) as LinkRead,
                Box::new(send) as LinkWrite,
                peer,
                &log,
            )
            .await;
        }
        Err(refusal) => log.refused(&label, &refusal.to_string()),
    }
}
