//! Workers on other hosts (DESIGN.md §14): their link to pegasusd runs over mutual TLS,
//! bootstrapped by a one-time enrollment token.
//!
//! What it is for. pegasusd keeps a small CA of its own ([`Authority`], under `<home>/tls/`)
//! and a server certificate signed by it. Each launch of a remote worker gets three values
//! ([`Bootstrap`]): in its environment where pegasusd listens and the SHA-256 of the CA
//! certificate, and on its standard input (never a command line or an environment, which other
//! users may read) a token bound to the project (single use, valid [`TOKEN_VALIDITY`]). The
//! worker connects over TLS, trusts the server only if its chain holds that CA, trades the
//! token and a fresh public key for a client certificate naming its project, and reconnects
//! with that certificate, whose hello must carry the same token ([`Certified::check_hello`]).
//! From then on the stream carries the same frames and handshake as the local Unix socket.
//! pegasusd remembers one valid certificate per project, the latest enrollment's, for one link.
//! Everything else ([`Authority::accept`]) is refused with a one-line [`Refusal`] and closed
//! within [`ACCEPT_TIMEOUT`]: plain TCP, an unknown, replayed, expired or other project's token,
//! a certificate of another CA, an earlier or already used certificate.
//!
//! What it is not for. It opens no listener and launches nothing (pegasusd's supervisor does),
//! it knows nothing of the worker frames beyond its own two enrollment messages
//! ([`EnrollRequest`], [`EnrollResponse`]), and it writes no certificate a worker was given to
//! disk: a client certificate serves one link, and a relaunch enrolls again.

mod authority;
mod bootstrap;
mod certs;
mod enroll;
mod error;
mod refusal;
mod tls_dir;
mod tokens;
mod verifier;

pub use authority::{Accepted, Authority, Certified, ACCEPT_TIMEOUT};
pub use bootstrap::{
    host_of, Bootstrap, Identity, CONNECT_PATIENCE, ENV_CA_SHA256, ENV_CONNECT, ENV_ENROLL,
    ENV_ENROLL_FILE,
};
pub use certs::{CLIENT_CERT_VALIDITY, PROJECT_URI_PREFIX};
pub use enroll::{EnrollRequest, EnrollResponse, ENROLL_VERSION};
pub use error::LinkError;
pub use refusal::{check_hello_project, Refusal, TokenRefusal};
pub use tokens::TOKEN_VALIDITY;
