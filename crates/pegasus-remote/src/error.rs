//! The one error type of the link, for both of its sides.
//!
//! Every message is one line that says what went wrong and what to do about it: pegasusd logs
//! these at start (its TLS folder), and a remote worker prints them just before it exits
//! non-zero, where nobody can ask it a follow-up question.

use std::path::PathBuf;

/// What went wrong while keeping the link's certificates or while a worker reached pegasusd.
///
/// A connection pegasusd refuses is not an error of pegasusd: that is a [`crate::Refusal`].
#[derive(Debug, thiserror::Error)]
pub enum LinkError {
    /// A file or folder under the TLS folder could not be read or written.
    #[error("{}: {source}: check that the folder exists and belongs to the user pegasusd runs as", path.display())]
    Io {
        /// The file or folder.
        path: PathBuf,
        /// What the system said.
        #[source]
        source: std::io::Error,
    },

    /// The CA's key and certificate on disk do not belong together (one was replaced by hand).
    #[error("{}: the CA key and certificate do not belong together: move the folder away to make a new CA (remote workers then need a relaunch)", dir.display())]
    CaMismatch {
        /// The TLS folder that holds them.
        dir: PathBuf,
    },

    /// A key or certificate on disk could not be parsed.
    #[error("{}: not a readable {what}: move the TLS folder away to make new ones", path.display())]
    BadFile {
        /// The file.
        path: PathBuf,
        /// What it should hold (`certificate`, `private key`).
        what: &'static str,
    },

    /// A name the server certificate should carry is neither a DNS name nor an IP address.
    #[error("`{name}` cannot be a server certificate name: give a DNS name or an IP address, without a port")]
    ServerName {
        /// The name as given (a launcher's `connect` host).
        name: String,
    },

    /// rcgen or ring refused to make a key or a certificate (a bug or a broken system RNG).
    #[error(
        "could not make a key or certificate: {0}: check that the system's random source works"
    )]
    Certificate(String),

    /// A bootstrap value is missing or malformed in a launched worker's environment or input.
    #[error("{var} {problem}: a remote worker must be launched by pegasusd, which sets PEGASUS_CONNECT and PEGASUS_CA_SHA256 in its environment and sends PEGASUS_ENROLL=<token> on its standard input")]
    Bootstrap {
        /// The variable (`PEGASUS_CONNECT`, `PEGASUS_CA_SHA256`, `PEGASUS_ENROLL`).
        var: &'static str,
        /// What is wrong with it (missing, malformed, and how).
        problem: String,
    },

    /// The worker kept trying to reach pegasusd and never got a TCP connection.
    #[error("could not reach pegasusd at {addr} for {waited_s} s ({last}): check the launcher's `connect` address and pegasusd's `workers.listen`")]
    Unreachable {
        /// The `connect` address (`host:port`) the worker was launched with.
        addr: String,
        /// How long it kept trying, in seconds.
        waited_s: u64,
        /// The last connection error.
        last: String,
    },

    /// The server at the address is not the pegasusd that launched this worker (or not TLS).
    #[error("pegasusd at {addr} is not trusted: {reason}: check PEGASUS_CA_SHA256 and that `connect` names the pegasusd that launched this worker")]
    UntrustedServer {
        /// The `connect` address (`host:port`).
        addr: String,
        /// Why its certificate was not accepted.
        reason: String,
    },

    /// pegasusd refused this worker's enrollment or its certificate, with its reason.
    #[error("pegasusd at {addr} refused this worker: {reason}: relaunch the worker from pegasusd (a token works once, for 60 s)")]
    Refused {
        /// The `connect` address (`host:port`).
        addr: String,
        /// pegasusd's reason as it sent it, or the TLS alert it answered with.
        reason: String,
    },

    /// The TLS handshake or the enrollment exchange failed for another reason.
    #[error("the link to pegasusd at {addr} failed: {reason}: check the network between the hosts and that both run the same Pegasus version")]
    Link {
        /// The `connect` address (`host:port`).
        addr: String,
        /// What failed.
        reason: String,
    },
}

impl LinkError {
    /// An `Io` error for `path`, for `map_err`.
    pub(crate) fn io(path: impl Into<PathBuf>) -> impl FnOnce(std::io::Error) -> LinkError {
        let path = path.into();
        move |source| LinkError::Io { path, source }
    }

    /// A `Certificate` error from rcgen or ring.
    pub(crate) fn cert(e: impl std::fmt::Display) -> LinkError {
        LinkError::Certificate(e.to_string())
    }
}
