//! Team roles: reusable agent profiles a project can put to work (DESIGN.md §8, seed 001).
//!
//! This crate is for everything about a role as a *definition*: the role file format
//! (frontmatter + prompt template, [`Role::parse`]), the six built-in roles shipped in
//! `data/roles/` and embedded in the binary ([`builtin_roles`]), user roles in
//! `<home>/roles/<id>.md` that override them by id ([`load_roles`], [`find_role`]), the
//! `roles:` assignments of a PROJECT.md with their overrides ([`Assignment`], read by the
//! store with the file; [`validate_assignment`], [`apply_assignment`]), the prompt a role
//! agent starts from ([`build_prompt`]) and a role's thinking level ([`Thinking`]).
//!
//! It is not for running anything: it never spawns an agent, calls a model, enforces a tool
//! allowlist at call time or writes PROJECT.md. The worker's agent crate does those with the
//! [`Role`] this crate hands it; the store crate owns PROJECT.md and reads its `roles:` into
//! [`Assignment`]s. Everything here is synchronous and pure except the small directory reads
//! of the loader.

pub mod assignment;
pub mod catalog;
pub mod error;
mod frontmatter;
pub mod prompt;
pub mod role;
pub mod template;

pub use assignment::{apply_assignment, validate_assignment, Assignment};
pub use catalog::{builtin_roles, find_role, load_roles, BUILTIN_IDS};
pub use error::RoleError;
/// A role's thinking level; PROJECT.md's `roles:` names it too, so its format is the store's.
pub use pegasus_store::project::Thinking;
pub use prompt::{build_prompt, PromptParts, CONTEXT_BUDGET_CHARS};
pub use role::{validate_id, Role, RoleModel, RoleSource, Variable};
