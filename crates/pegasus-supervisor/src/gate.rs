//! What keeps every listener of pegasusd open under a flood (DESIGN.md §12, Listeners): the control
//! socket, the worker socket, `workers.listen` and the dashboard each admit connections through
//! a [`Gate`] — a cap per peer (a local user, or an address), per process where the kernel
//! names it, and in total — and log their refusals through a [`RefusalLog`], at a bounded
//! rate. [`Idle`] wraps a connection to tell how long it has been silent, so a connection that
//! moves no byte for too long is dropped.
//!
//! A connection past a cap is accepted and closed at once: it never waits in the kernel's
//! backlog ahead of another peer's, and it never holds a descriptor. Who a peer is: on a Unix
//! socket its uid (and its PID namespace when that is not pegasusd's: a command a model runs
//! is never counted with the user's `pegasusctl`) and its pid; on TCP, a process of this host
//! (found through the kernel's socket table, `sock_diag`) is its uid too, so another local
//! user flooding `127.0.0.1` never takes the user's own share; any other peer is its address.

use std::{
    collections::HashMap,
    net::{IpAddr, SocketAddr},
    sync::{
        atomic::{AtomicU64, Ordering},
        Arc, Mutex, OnceLock,
    },
    time::{Duration, Instant},
};

/// How many connections a listener admits.
#[derive(Clone, Copy, Debug)]
pub struct Caps {
    /// All peers together.
    pub total: usize,
    /// One peer (a uid, or an address).
    pub per_peer: usize,
    /// One process (Unix sockets only, where the kernel names the peer's pid).
    pub per_process: usize,
}

impl Caps {
    /// These caps, with the total lowered to fit the descriptors pegasusd may open (its four
    /// listeners together take at most half of them; the rest are the workers', the files').
    pub fn within_fd_limit(self) -> Caps {
        let budget = (open_files_limit() / 8).max(16) as usize;
        Caps {
            total: self.total.min(budget),
            per_peer: self.per_peer.min(budget),
            per_process: self.per_process.min(budget),
        }
    }
}

/// Who a peer is counted as.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub enum PeerKey {
    /// A local user; `ns` is the peer's PID namespace when it is not pegasusd's own.
    User {
        /// The peer's effective user id.
        uid: u32,
        /// Its PID namespace inode (0 if unreadable); `None` in pegasusd's own or over TCP.
        ns: Option<u64>,
    },
    /// A peer known only by its address (another host).
    Addr(IpAddr),
    /// A peer the kernel could not name.
    Unknown,
}

impl std::fmt::Display for PeerKey {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            PeerKey::User { uid, ns: None } => write!(f, "uid {uid}"),
            PeerKey::User { uid, ns: Some(ns) } => write!(f, "uid {uid} (pid namespace {ns})"),
            PeerKey::Addr(ip) => write!(f, "{ip}"),
            PeerKey::Unknown => write!(f, "an unnamed peer"),
        }
    }
}

/// A peer as a [`Gate`] counts it.
#[derive(Clone, Debug)]
pub struct Peer {
    /// Who it is counted as, for the per-peer cap.
    pub key: PeerKey,
    /// The peer's pid (Unix sockets), for the per-process cap.
    pub pid: Option<u32>,
}

impl Peer {
    /// The peer of an accepted Unix socket connection, from `SO_PEERCRED`.
    pub fn of_unix(stream: &interprocess::local_socket::tokio::Stream) -> Peer {
        use interprocess::local_socket::tokio::prelude::*;
        let Ok(creds) = stream.peer_creds() else {
            return Peer {
                key: PeerKey::Unknown,
                pid: None,
            };
        };
        let pid = creds
            .pid()
            .and_then(|p| u32::try_from(p).ok())
            .filter(|p| *p != 0);
        let ns = pid.and_then(|p| {
            let theirs = pid_namespace(&format!("/proc/{p}/ns/pid"));
            (theirs != pid_namespace("/proc/self/ns/pid")).then_some(theirs.unwrap_or(0))
        });
        Peer {
            key: match creds.euid() {
                Some(uid) => PeerKey::User { uid, ns },
                None => PeerKey::Unknown,
            },
            pid,
        }
    }

    /// The peer of an accepted TCP connection: a process of this host is its user, anyone
    /// else its address.
    pub fn of_tcp(stream: &tokio::net::TcpStream, addr: SocketAddr) -> Peer {
        let uid = stream
            .local_addr()
            .ok()
            .and_then(|local| local_tcp_uid(addr, local));
        Peer {
            key: match uid {
                Some(uid) => PeerKey::User { uid, ns: None },
                None => PeerKey::Addr(counted_address(addr.ip())),
            },
            pid: None,
        }
    }
}

/// The address a remote peer is counted by: an IPv4 address as it is; an IPv6 one by its /64,
/// the block one host (or one customer of a provider) is given, so it cannot take the whole
/// listener by spreading over addresses it owns anyway. An IPv4-mapped one as its IPv4.
fn counted_address(ip: IpAddr) -> IpAddr {
    match ip {
        IpAddr::V4(_) => ip,
        IpAddr::V6(v6) => match v6.to_ipv4_mapped() {
            Some(v4) => IpAddr::V4(v4),
            None => {
                let s = v6.segments();
                IpAddr::V6(std::net::Ipv6Addr::new(s[0], s[1], s[2], s[3], 0, 0, 0, 0))
            }
        },
    }
}

impl std::fmt::Display for Peer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        self.key.fmt(f)
    }
}

/// The inode number of a PID namespace link (`pid:[4026531836]`).
fn pid_namespace(link: &str) -> Option<u64> {
    let target = std::fs::read_link(link).ok()?;
    let text = target.to_str()?;
    text.strip_prefix("pid:[")?.strip_suffix(']')?.parse().ok()
}

/// One listener's admission: its caps and its current counts.
pub struct Gate {
    what: &'static str,
    caps: Caps,
    counts: Mutex<Counts>,
    log: Arc<RefusalLog>,
}

#[derive(Default)]
struct Counts {
    total: usize,
    peers: HashMap<PeerKey, usize>,
    processes: HashMap<u32, usize>,
}

/// An admitted connection's place under its gate's caps, given back when dropped.
pub struct Ticket {
    gate: Arc<Gate>,
    peer: Peer,
}

impl Drop for Ticket {
    fn drop(&mut self) {
        let mut counts = self.gate.lock();
        counts.total = counts.total.saturating_sub(1);
        if let Some(n) = counts.peers.get_mut(&self.peer.key) {
            *n -= 1;
            if *n == 0 {
                counts.peers.remove(&self.peer.key);
            }
        }
        if let Some(pid) = self.peer.pid {
            if let Some(n) = counts.processes.get_mut(&pid) {
                *n -= 1;
                if *n == 0 {
                    counts.processes.remove(&pid);
                }
            }
        }
    }
}

impl Gate {
    /// A gate for the listener `what` (as log lines name it), with its own refusal log.
    pub fn new(what: &'static str, caps: Caps) -> Arc<Gate> {
        Arc::new(Gate {
            what,
            caps: caps.within_fd_limit(),
            counts: Mutex::default(),
            log: Arc::new(RefusalLog::new(what)),
        })
    }

    /// This listener's refusal log (for the refusals its handlers make).
    pub fn log(&self) -> &Arc<RefusalLog> {
        &self.log
    }

    /// The caps this gate enforces, already lowered to fit the open-files limit.
    pub fn caps(&self) -> Caps {
        self.caps
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Counts> {
        self.counts
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// Admits `peer` if every cap has room (the refusal is logged, at a bounded rate).
    pub fn admit(self: &Arc<Self>, peer: Peer) -> Option<Ticket> {
        let refused = {
            let mut counts = self.lock();
            let of_peer = counts.peers.get(&peer.key).copied().unwrap_or(0);
            let of_process = peer
                .pid
                .and_then(|p| counts.processes.get(&p).copied())
                .unwrap_or(0);
            if counts.total >= self.caps.total {
                Some("the listener is full")
            } else if of_peer >= self.caps.per_peer {
                Some("too many connections from this peer")
            } else if peer.pid.is_some() && of_process >= self.caps.per_process {
                Some("too many connections from this process")
            } else {
                counts.total += 1;
                *counts.peers.entry(peer.key.clone()).or_default() += 1;
                if let Some(pid) = peer.pid {
                    *counts.processes.entry(pid).or_default() += 1;
                }
                None
            }
        };
        match refused {
            Some(why) => {
                self.log.refused(&peer.to_string(), why);
                None
            }
            None => Some(Ticket {
                gate: self.clone(),
                peer,
            }),
        }
    }

    /// How many connections are admitted now (for tests).
    pub fn open(&self) -> usize {
        self.lock().total
    }

    /// The listener's name, as its log lines say it.
    pub fn what(&self) -> &'static str {
        self.what
    }
}

/// How long a refusal log gathers repeats before it says how many there were.
pub const REFUSAL_WINDOW: Duration = Duration::from_secs(60);
/// How many distinct (peer, reason) pairs one window names; the rest are counted together.
const REFUSAL_KEYS: usize = 32;

/// Refusals of one listener, logged at a bounded rate: the first of each peer and reason in a
/// window as a warning of its own, then one line per window: "N more refused from PEER
/// (REASON)". Pairs past [`REFUSAL_KEYS`] in one window are counted as "other peers". So a
/// window logs at most `2 × REFUSAL_KEYS + 1` lines, however many connections were refused.
pub struct RefusalLog {
    what: &'static str,
    state: Mutex<RefusalState>,
}

struct RefusalState {
    since: Instant,
    /// (peer, reason) → refusals since its first line in this window.
    seen: HashMap<(String, String), u64>,
    other: u64,
}

impl RefusalLog {
    /// An empty refusal log for the listener `what` (as its lines name it).
    pub fn new(what: &'static str) -> RefusalLog {
        RefusalLog {
            what,
            state: Mutex::new(RefusalState {
                since: Instant::now(),
                seen: HashMap::new(),
                other: 0,
            }),
        }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, RefusalState> {
        self.state
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// Records that `peer` was refused for `reason`; logs it if it is the first such in this
    /// window.
    pub fn refused(&self, peer: &str, reason: &str) {
        let mut state = self.lock();
        if state.since.elapsed() >= REFUSAL_WINDOW {
            self.summarise(&mut state);
        }
        let key = (peer.to_string(), reason.to_string());
        if let Some(n) = state.seen.get_mut(&key) {
            *n += 1;
        } else if state.seen.len() < REFUSAL_KEYS {
            state.seen.insert(key, 0);
            let what = self.what;
            tracing::warn!("{what}: refused a connection from {peer}: {reason}");
        } else {
            state.other += 1;
        }
    }

    /// Logs the repeats of the window that ended and starts a new one.
    pub fn flush(&self) {
        let mut state = self.lock();
        self.summarise(&mut state);
    }

    fn summarise(&self, state: &mut RefusalState) {
        let what = self.what;
        let secs = state.since.elapsed().as_secs().max(1);
        let mut repeats: Vec<_> = state.seen.drain().filter(|(_, n)| *n > 0).collect();
        repeats.sort();
        for ((peer, reason), n) in repeats {
            tracing::warn!("{what}: {n} more refused from {peer} in the last {secs} s ({reason})");
        }
        if state.other > 0 {
            let n = state.other;
            tracing::warn!("{what}: {n} more refused from other peers in the last {secs} s");
        }
        state.other = 0;
        state.since = Instant::now();
    }

    /// Says the repeats every [`REFUSAL_WINDOW`] until `shutdown` (a window with none says
    /// nothing), and once more at the end.
    pub async fn run(self: Arc<Self>, shutdown: tokio_util::sync::CancellationToken) {
        let mut tick = tokio::time::interval(REFUSAL_WINDOW);
        tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        tick.tick().await;
        loop {
            tokio::select! {
                _ = shutdown.cancelled() => return self.flush(),
                _ = tick.tick() => self.flush(),
            }
        }
    }
}

/// When a connection last moved a byte, shared between its [`Idle`] stream and whoever
/// watches it.
#[derive(Clone)]
pub struct Activity {
    start: Instant,
    last_ms: Arc<AtomicU64>,
}

impl Activity {
    fn new() -> Activity {
        Activity {
            start: Instant::now(),
            last_ms: Arc::new(AtomicU64::new(0)),
        }
    }

    fn touch(&self) {
        let now = self.start.elapsed().as_millis() as u64;
        self.last_ms.store(now, Ordering::Relaxed);
    }

    /// Resolves once the connection has moved no byte, either way, for `limit`.
    pub async fn idle_for(&self, limit: Duration) {
        loop {
            let last = self.start + Duration::from_millis(self.last_ms.load(Ordering::Relaxed));
            let deadline = last + limit;
            if Instant::now() >= deadline {
                return;
            }
            tokio::time::sleep_until(deadline.into()).await;
        }
    }
}

/// A stream that records when it last moved a byte ([`Activity`]).
pub struct Idle<IO> {
    io: IO,
    activity: Activity,
}

impl<IO> Idle<IO> {
    /// Wraps `io`, with the [`Activity`] that tells when it last moved a byte.
    pub fn new(io: IO) -> (Idle<IO>, Activity) {
        let activity = Activity::new();
        (
            Idle {
                io,
                activity: activity.clone(),
            },
            activity,
        )
    }
}

impl<IO: tokio::io::AsyncRead + Unpin> tokio::io::AsyncRead for Idle<IO> {
    fn poll_read(
        mut self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
        buf: &mut tokio::io::ReadBuf<'_>,
    ) -> std::task::Poll<std::io::Result<()>> {
        let before = buf.filled().len();
        let polled = std::pin::Pin::new(&mut self.io).poll_read(cx, buf);
        if buf.filled().len() > before {
            self.activity.touch();
        }
        polled
    }
}

impl<IO: tokio::io::AsyncWrite + Unpin> tokio::io::AsyncWrite for Idle<IO> {
    fn poll_write(
        mut self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
        buf: &[u8],
    ) -> std::task::Poll<std::io::Result<usize>> {
        let polled = std::pin::Pin::new(&mut self.io).poll_write(cx, buf);
        if matches!(polled, std::task::Poll::Ready(Ok(n)) if n > 0) {
            self.activity.touch();
        }
        polled
    }

    fn poll_flush(
        mut self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
    ) -> std::task::Poll<std::io::Result<()>> {
        std::pin::Pin::new(&mut self.io).poll_flush(cx)
    }

    fn poll_shutdown(
        mut self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
    ) -> std::task::Poll<std::io::Result<()>> {
        std::pin::Pin::new(&mut self.io).poll_shutdown(cx)
    }
}

static OPEN_FILES: OnceLock<u64> = OnceLock::new();

/// The soft `RLIMIT_NOFILE` pegasusd started with, when [`raise_open_files_limit`] raised it:
/// what its children get back (a program that `select()`s or closes every fd up to the limit
/// expects the usual one).
static INHERITED_OPEN_FILES: OnceLock<u64> = OnceLock::new();

/// The soft `RLIMIT_NOFILE` a child of pegasusd should run with, if pegasusd raised its own.
pub fn inherited_open_files_limit() -> Option<u64> {
    INHERITED_OPEN_FILES.get().copied()
}

/// Raises this process's soft `RLIMIT_NOFILE` to its hard limit (DESIGN.md §12: the shipped
/// systemd unit leaves 1024, which ~1,000 idle connections exhaust). Returns (before, after);
/// the caps of every [`Gate`] made afterwards fit within `after`.
pub fn raise_open_files_limit() -> std::io::Result<(u64, u64)> {
    use nix::sys::resource::{getrlimit, setrlimit, Resource};
    let (soft, hard) = getrlimit(Resource::RLIMIT_NOFILE).map_err(std::io::Error::from)?;
    let mut now = soft;
    if hard > soft {
        setrlimit(Resource::RLIMIT_NOFILE, hard, hard).map_err(std::io::Error::from)?;
        now = hard;
        let _ = INHERITED_OPEN_FILES.set(soft);
    }
    let _ = OPEN_FILES.set(now);
    Ok((soft, now))
}

/// The soft `RLIMIT_NOFILE` (as raised at start, else as read now).
fn open_files_limit() -> u64 {
    *OPEN_FILES.get_or_init(|| {
        nix::sys::resource::getrlimit(nix::sys::resource::Resource::RLIMIT_NOFILE)
            .map(|(soft, _)| soft)
            .unwrap_or(1024)
    })
}

/// The uid owning the TCP socket at `peer` connected to our `local`, if that socket is on this
/// host (in pegasusd's network namespace): asked of the kernel with one `sock_diag` lookup of
/// that exact connection. `None` for a peer elsewhere, or when the kernel will not say.
pub fn local_tcp_uid(peer: SocketAddr, local: SocketAddr) -> Option<u32> {
    use nix::libc;
    use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
    const SOCK_DIAG_BY_FAMILY: u16 = 20;
    const NLMSG_ERROR: u16 = 2;
    let (family, src, dst) = match (peer, local) {
        (SocketAddr::V4(p), SocketAddr::V4(l)) => {
            let mut s = [0u8; 16];
            let mut d = [0u8; 16];
            s[..4].copy_from_slice(&p.ip().octets());
            d[..4].copy_from_slice(&l.ip().octets());
            (libc::AF_INET as u8, s, d)
        }
        (SocketAddr::V6(p), SocketAddr::V6(l)) => {
            (libc::AF_INET6 as u8, p.ip().octets(), l.ip().octets())
        }
        _ => return None,
    };
    // struct nlmsghdr (16) + struct inet_diag_req_v2 (56).
    let mut req = Vec::with_capacity(72);
    req.extend_from_slice(&72u32.to_ne_bytes());
    req.extend_from_slice(&SOCK_DIAG_BY_FAMILY.to_ne_bytes());
    req.extend_from_slice(&(libc::NLM_F_REQUEST as u16).to_ne_bytes());
    req.extend_from_slice(&1u32.to_ne_bytes()); // seq
    req.extend_from_slice(&0u32.to_ne_bytes()); // pid
    req.push(family);
    req.push(libc::IPPROTO_TCP as u8);
    req.push(0); // idiag_ext
    req.push(0); // pad
    req.extend_from_slice(&u32::MAX.to_ne_bytes()); // every state
    req.extend_from_slice(&peer.port().to_be_bytes()); // sport: the peer's own side
    req.extend_from_slice(&local.port().to_be_bytes());
    req.extend_from_slice(&src);
    req.extend_from_slice(&dst);
    req.extend_from_slice(&0u32.to_ne_bytes()); // interface
    req.extend_from_slice(&u32::MAX.to_ne_bytes()); // INET_DIAG_NOCOOKIE
    req.extend_from_slice(&u32::MAX.to_ne_bytes());
    // SAFETY: plain syscalls on a descriptor this function owns; every buffer passed is live
    // and its length is the one given.
    unsafe {
        let fd = libc::socket(
            libc::AF_NETLINK,
            libc::SOCK_DGRAM | libc::SOCK_CLOEXEC,
            libc::NETLINK_SOCK_DIAG,
        );
        if fd < 0 {
            return None;
        }
        let fd = OwnedFd::from_raw_fd(fd);
        // The kernel answers at once; never wait long on it.
        let tv = libc::timeval {
            tv_sec: 0,
            tv_usec: 200_000,
        };
        libc::setsockopt(
            fd.as_raw_fd(),
            libc::SOL_SOCKET,
            libc::SO_RCVTIMEO,
            (&tv as *const libc::timeval).cast(),
            std::mem::size_of::<libc::timeval>() as libc::socklen_t,
        );
        let mut kernel: libc::sockaddr_nl = std::mem::zeroed();
        kernel.nl_family = libc::AF_NETLINK as libc::sa_family_t;
        let sent = libc::sendto(
            fd.as_raw_fd(),
            req.as_ptr().cast(),
            req.len(),
            0,
            (&kernel as *const libc::sockaddr_nl).cast(),
            std::mem::size_of::<libc::sockaddr_nl>() as libc::socklen_t,
        );
        if sent != req.len() as isize {
            return None;
        }
        let mut buf = [0u8; 512];
        let got = libc::recv(fd.as_raw_fd(), buf.as_mut_ptr().cast(), buf.len(), 0);
        let got = usize::try_from(got).ok()?;
        parse_diag_uid(&buf[..got], SOCK_DIAG_BY_FAMILY, NLMSG_ERROR)
    }
}

/// The uid in a `sock_diag` answer: an `inet_diag_msg` after the 16-byte header, its
/// `idiag_uid` at offset 64 (an error message, such as "no such socket", is `None`).
fn parse_diag_uid(msg: &[u8], diag: u16, error: u16) -> Option<u32> {
    let kind = u16::from_ne_bytes(msg.get(4..6)?.try_into().ok()?);
    if kind == error || kind != diag {
        return None;
    }
    Some(u32::from_ne_bytes(msg.get(80..84)?.try_into().ok()?))
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used)]
    use super::*;

    #[test]
    fn a_remote_ipv6_peer_is_counted_by_its_64_and_a_mapped_one_as_ipv4() {
        let a: IpAddr = "2001:db8:1:2:aaaa::1".parse().unwrap();
        let b: IpAddr = "2001:db8:1:2:bbbb::9".parse().unwrap();
        let c: IpAddr = "2001:db8:1:3::1".parse().unwrap();
        assert_eq!(counted_address(a), counted_address(b));
        assert_ne!(counted_address(a), counted_address(c));
        let v4: IpAddr = "10.0.0.7".parse().unwrap();
        let mapped: IpAddr = "::ffff:10.0.0.7".parse().unwrap();
        assert_eq!(counted_address(mapped), v4);
        assert_eq!(counted_address(v4), v4);
    }

    fn user(uid: u32, pid: Option<u32>) -> Peer {
        Peer {
            key: PeerKey::User { uid, ns: None },
            pid,
        }
    }

    #[test]
    fn a_gate_caps_each_peer_each_process_and_the_total_and_frees_on_drop() {
        let gate = Gate::new(
            "test",
            Caps {
                total: 5,
                per_peer: 3,
                per_process: 2,
            },
        );
        let a1 = gate.admit(user(1, Some(10))).unwrap();
        let _a2 = gate.admit(user(1, Some(10))).unwrap();
        assert!(
            gate.admit(user(1, Some(10))).is_none(),
            "third from one process"
        );
        let _a3 = gate.admit(user(1, Some(11))).unwrap();
        assert!(gate.admit(user(1, Some(12))).is_none(), "fourth of uid 1");
        let _b1 = gate.admit(user(2, Some(20))).unwrap();
        let _b2 = gate.admit(user(2, None)).unwrap();
        assert!(gate.admit(user(3, None)).is_none(), "the total is reached");
        assert_eq!(gate.open(), 5);
        drop(a1);
        assert_eq!(gate.open(), 4);
        let _c = gate.admit(user(3, None)).unwrap();
        assert!(gate.admit(user(1, Some(10))).is_none(), "total again");
    }

    #[test]
    fn refusals_of_one_peer_make_one_line_then_one_summary() {
        let log = RefusalLog::new("test");
        for _ in 0..3000 {
            log.refused("uid 65534", "too many connections from this peer");
        }
        {
            let state = log.lock();
            assert_eq!(state.seen.len(), 1);
            assert_eq!(state.seen.values().copied().next(), Some(2999));
        }
        for i in 0..100 {
            log.refused(&format!("10.0.0.{i}"), "plain TCP");
        }
        {
            let state = log.lock();
            assert_eq!(state.seen.len(), REFUSAL_KEYS);
            assert_eq!(state.other, 100 - (REFUSAL_KEYS as u64 - 1));
        }
        log.flush();
        let state = log.lock();
        assert!(state.seen.is_empty());
        assert_eq!(state.other, 0);
    }

    #[test]
    fn a_diag_answer_gives_its_uid_and_an_error_gives_none() {
        let mut msg = vec![0u8; 88];
        msg[4..6].copy_from_slice(&20u16.to_ne_bytes());
        msg[80..84].copy_from_slice(&65534u32.to_ne_bytes());
        assert_eq!(parse_diag_uid(&msg, 20, 2), Some(65534));
        msg[4..6].copy_from_slice(&2u16.to_ne_bytes());
        assert_eq!(parse_diag_uid(&msg, 20, 2), None);
        assert_eq!(parse_diag_uid(&msg[..10], 20, 2), None);
    }

    #[tokio::test]
    async fn a_local_tcp_peer_is_known_by_its_uid_and_an_idle_stream_is_seen_idle() {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let client = tokio::net::TcpStream::connect(addr).await.unwrap();
        let (server, peer) = listener.accept().await.unwrap();
        let uid = local_tcp_uid(peer, server.local_addr().unwrap());
        use std::os::unix::fs::MetadataExt;
        let me = std::fs::metadata("/proc/self").unwrap().uid();
        assert_eq!(uid, Some(me));
        let far: SocketAddr = "192.0.2.1:4000".parse().unwrap();
        assert_eq!(local_tcp_uid(far, addr), None);
        let (idle, activity) = Idle::new(server);
        let started = Instant::now();
        activity.idle_for(Duration::from_millis(100)).await;
        assert!(started.elapsed() >= Duration::from_millis(100));
        drop((idle, client));
    }
}
