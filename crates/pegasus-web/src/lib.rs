//! # pegasus-web
//!
//! The web for Pegasus's agents (`docs/DESIGN.md` §16 "The web"):
//!
//! * [`Fetcher`]: `web_fetch`'s client. One GET of an http or https URL, at most
//!   [`fetch::MAX_REDIRECTS`] redirects followed by hand, each hop's host resolved here and
//!   every address checked ([`address`]) before a connection pinned to it; the body capped in
//!   size and the whole fetch in time; HTML turned into Markdown, other text decoded from its
//!   charset, binary refused ([`page`]). It holds no secret and runs in the worker.
//! * [`Searcher`]: `web_search`'s backends, SearXNG's JSON API and Brave Search's API. It runs
//!   in pegasusd, which holds the Brave key; a worker asks over its link.
//!
//! What it is not for: it decides nothing about who may call the tools (role allowlists and
//! approvals do), and it is not a crawler (no cookies, no JavaScript, no robots.txt).

pub mod address;
pub mod fetch;
pub mod page;
pub mod search;

pub use fetch::{FetchError, Fetcher, Page};
pub use search::{SearchError, Searcher};
