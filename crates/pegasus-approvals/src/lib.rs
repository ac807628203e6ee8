//! Approvals (DESIGN.md §11, "people in the loop"): a person's yes before a risky call.
//!
//! * [`Policy`]: the policy in force for one project, config.yml's `approvals:` block under
//!   its PROJECT.md's, and what it says about one call ([`PolicyDecision`]), by the glob
//!   engine of [`glob`]. [`ProjectPolicy`] parses it once per project and again only when
//!   PROJECT.md changed; a project whose PROJECT.md does not load is refused
//!   ([`PolicyRefusal`]), never given config.yml's looser policy.
//! * The request files under `<project>/approvals/` ([`request`]): the request, its one
//!   answer, the mark that its call ran, `closed/`; and pegasusd's record of when it first saw
//!   each waiting request ([`Seen`]).
//! * A request's life as a state machine ([`RequestState`], [`step`]), read from the files by
//!   one function, [`read_state`].
//!
//! The block's shape as written ([`pegasus_store::approvals::ApprovalsConfig`]) stays with
//! the other keys of config.yml and PROJECT.md in `pegasus-store`, which refuses either file
//! at load when it is wrong; everything it means is here.

pub mod glob;
pub mod policy;
pub mod project_policy;
pub mod request;
pub mod seen;
pub mod state;

pub use glob::{command_allowed, exact_glob, glob_match, split_tool_key};
pub use pegasus_store::approvals::{ApprovalsConfig, MergeMode, Mode};
pub use policy::{call_target, Policy, PolicyDecision, DEFAULT_TIMEOUT_S, MERGE_TOOL};
pub use project_policy::{PolicyRefusal, ProjectPolicy};
pub use request::{
    answer, close, closed_answer, count_pending, find, list_pending, mark_ran, new_id,
    open_requests, pending, pending_with_dirs, read_answer, read_request, read_state, summary,
    valid_id, waiting, waiting_seen, write_request, Answer, AnswerError, ApprovalRequest, Decision,
    Open, APPROVALS_DIR, SUMMARY_CHARS,
};
pub use seen::{Seen, SEEN_FILE};
pub use state::{step, Refusal, RequestEvent, RequestState};
