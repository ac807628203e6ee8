//! PROJECT.md's extension keys: what a project says beyond its identity and lifecycle, read
//! into their types once, when the file is parsed, so no user of a key parses its YAML again.
//!
//! They come in two kinds, as they always have:
//! * `mcp_servers` is checked with the file: a bad entry makes the whole PROJECT.md invalid,
//!   with its line (see `parse`);
//! * the code keys ([`CodeKeys`]: `repos`, `hydrate`, `verify`, `merge`, `env_file`,
//!   `verify_timeout_s`, `max_attempts`, `review`, `plan`) are checked by the code that uses
//!   them, when a code task starts: a typo there fails that task, not the project. Each holds
//!   its value or the [`KeyProblem`] to report, which names the key and what to write.
//!
//! (`approvals`, `limits` and `launcher` have their own owners; `roles` is read next door,
//! in `roles`.)

use serde::Deserialize;
use serde_norway::{Mapping, Value};

/// What is wrong with one code key of PROJECT.md; shown after the file's path as
/// "key `KEY` PROBLEM".
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("key `{key}` {problem}")]
pub struct KeyProblem {
    /// The top-level key.
    pub key: &'static str,
    /// What is wrong and what to write instead.
    pub problem: String,
}

impl KeyProblem {
    fn new(key: &'static str, problem: impl Into<String>) -> Self {
        KeyProblem {
            key,
            problem: problem.into(),
        }
    }
}

/// One value of a code key: read, or what is wrong with it.
pub type KeyValue<T> = Result<T, KeyProblem>;

/// A `repos:` entry of PROJECT.md: `{id, path, branch?}`; other keys (`role`) are allowed and
/// not Pegasus's.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
pub struct RepoEntry {
    /// The repo's id in `repo-id:path` of the file tools.
    pub id: String,
    /// Its path, relative to the project folder or absolute.
    pub path: String,
    /// The base branch; `None`: `main`.
    #[serde(default)]
    pub branch: Option<String>,
}

/// `merge:` of a code project: whether a verified change is merged at once or waits for
/// `pegasusctl task merge`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum MergePolicy {
    /// `auto` (the default): merged as soon as it is verified.
    Auto,
    /// `manual`: held for a person.
    Manual,
}

/// The longest `verify_timeout_s` (a day) and its default.
const VERIFY_TIMEOUT_S: (u64, u64) = (600, 86_400);
/// The most `max_attempts` and its default.
const MAX_ATTEMPTS: (u64, u64) = (3, 100);

/// The code keys of a PROJECT.md, each read once.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CodeKeys {
    /// `repos:`; `None` when the key is absent (then a git workdir is the one repo), while
    /// `repos: null` is an empty list.
    pub repos: KeyValue<Option<Vec<RepoEntry>>>,
    /// Every `repos[].path` string written, whether or not the list reads as [`Self::repos`]:
    /// what the home guard keeps clear of the home, so a half-broken list is refused too.
    pub repo_paths: Vec<String>,
    /// `hydrate:`, the command that makes a fresh worktree ready.
    pub hydrate: KeyValue<Option<String>>,
    /// `verify:`, one command or a list; absent or `null`: none.
    pub verify: KeyValue<Vec<String>>,
    /// `merge:` (`auto` when absent or `null`).
    pub merge: KeyValue<MergePolicy>,
    /// `env_file:`, the file hydrate and verify read their environment from.
    pub env_file: KeyValue<Option<String>>,
    /// `verify_timeout_s:`, 1 to 86,400 (default 600).
    pub verify_timeout_s: KeyValue<u64>,
    /// `max_attempts:`, 1 to 100 (default 3).
    pub max_attempts: KeyValue<u64>,
    /// `review:`, the role that approves a verified change.
    pub review: KeyValue<Option<String>>,
    /// `plan:`, the role that may split a new task.
    pub plan: KeyValue<Option<String>>,
}

impl CodeKeys {
    /// Reads the code keys of a frontmatter mapping.
    pub(super) fn read(map: &Mapping) -> CodeKeys {
        CodeKeys {
            repos: repos(map.get("repos")),
            repo_paths: repo_paths(map.get("repos")),
            hydrate: text("hydrate", map.get("hydrate")),
            verify: verify(map.get("verify")),
            merge: merge(map.get("merge")),
            env_file: text("env_file", map.get("env_file")),
            verify_timeout_s: number(
                "verify_timeout_s",
                map.get("verify_timeout_s"),
                VERIFY_TIMEOUT_S,
            ),
            max_attempts: number("max_attempts", map.get("max_attempts"), MAX_ATTEMPTS),
            review: text("review", map.get("review")),
            plan: text("plan", map.get("plan")),
        }
    }
}

fn repos(value: Option<&Value>) -> KeyValue<Option<Vec<RepoEntry>>> {
    let Some(value) = value else {
        return Ok(None);
    };
    serde_norway::from_value(value.clone())
        .map(Some)
        .map_err(|e| {
            KeyProblem::new(
                "repos",
                format!("must be a list of {{id, path, role}}: {e}"),
            )
        })
}

fn repo_paths(value: Option<&Value>) -> Vec<String> {
    /// Only the path of an entry, whatever else it has or lacks.
    #[derive(Deserialize)]
    struct PathOnly {
        path: String,
    }
    let Some(Value::Sequence(entries)) = value else {
        return Vec::new();
    };
    entries
        .iter()
        .filter_map(|e| serde_norway::from_value::<PathOnly>(e.clone()).ok())
        .map(|e| e.path)
        .collect()
}

/// A string key; absent or `null`: `None`.
fn text(key: &'static str, value: Option<&Value>) -> KeyValue<Option<String>> {
    match value {
        None => Ok(None),
        Some(v) => serde_norway::from_value::<Option<String>>(v.clone())
            .map_err(|_| KeyProblem::new(key, "must be a string")),
    }
}

/// A whole number from 1 to `max`; absent: `default` (a `null` is a problem).
fn number(key: &'static str, value: Option<&Value>, (default, max): (u64, u64)) -> KeyValue<u64> {
    let Some(v) = value else {
        return Ok(default);
    };
    match serde_norway::from_value::<u64>(v.clone()) {
        Ok(n) if (1..=max).contains(&n) => Ok(n),
        _ => Err(KeyProblem::new(
            key,
            format!("must be a whole number from 1 to {max}"),
        )),
    }
}

/// `verify:` as written: one command or a list of them.
#[derive(Deserialize)]
#[serde(untagged)]
enum Commands {
    One(String),
    Many(Vec<String>),
}

fn verify(value: Option<&Value>) -> KeyValue<Vec<String>> {
    match serde_norway::from_value::<Option<Commands>>(value.cloned().unwrap_or(Value::Null)) {
        Ok(None) => Ok(Vec::new()),
        Ok(Some(Commands::One(c))) => Ok(vec![c]),
        Ok(Some(Commands::Many(list))) => Ok(list),
        Err(_) => Err(KeyProblem::new(
            "verify",
            "must be a command or a list of commands",
        )),
    }
}

fn merge(value: Option<&Value>) -> KeyValue<MergePolicy> {
    match text("merge", value)?.as_deref() {
        None | Some("auto") => Ok(MergePolicy::Auto),
        Some("manual") => Ok(MergePolicy::Manual),
        Some(other) => Err(KeyProblem::new(
            "merge",
            format!("is `{other}`: use `auto` or `manual`"),
        )),
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used)]
    use super::*;

    fn keys(yaml: &str) -> CodeKeys {
        let map: Mapping = serde_norway::from_str(yaml).unwrap();
        CodeKeys::read(&map)
    }

    fn problem<T: std::fmt::Debug>(v: KeyValue<T>) -> String {
        v.unwrap_err().to_string()
    }

    #[test]
    fn absent_keys_take_their_defaults() {
        let k = keys("name: p\n");
        assert_eq!(k.repos, Ok(None));
        assert!(k.repo_paths.is_empty());
        assert_eq!(k.hydrate, Ok(None));
        assert_eq!(k.verify, Ok(Vec::new()));
        assert_eq!(k.merge, Ok(MergePolicy::Auto));
        assert_eq!(k.env_file, Ok(None));
        assert_eq!(k.verify_timeout_s, Ok(600));
        assert_eq!(k.max_attempts, Ok(3));
        assert_eq!((k.review, k.plan), (Ok(None), Ok(None)));
        // `null` is "not set" for the strings and `verify`, as before.
        let k = keys("hydrate: null\nverify: null\nmerge: null\nreview: ~\n");
        assert_eq!(k.hydrate, Ok(None));
        assert_eq!(k.verify, Ok(Vec::new()));
        assert_eq!(k.merge, Ok(MergePolicy::Auto));
        assert_eq!(k.review, Ok(None));
    }

    #[test]
    fn written_keys_are_read_into_their_types() {
        let k = keys(
            "repos:\n  - {id: app, path: app, role: main}\n  - {id: infra, path: /srv/infra, branch: trunk}\nhydrate: npm ci\nverify: [npm test, npm run lint]\nmerge: manual\nenv_file: .env.test\nverify_timeout_s: 86400\nmax_attempts: 1\nreview: reviewer\nplan: planner\n",
        );
        assert_eq!(
            k.repos,
            Ok(Some(vec![
                RepoEntry {
                    id: "app".into(),
                    path: "app".into(),
                    branch: None
                },
                RepoEntry {
                    id: "infra".into(),
                    path: "/srv/infra".into(),
                    branch: Some("trunk".into())
                },
            ]))
        );
        assert_eq!(k.hydrate, Ok(Some("npm ci".into())));
        assert_eq!(
            k.verify,
            Ok(vec!["npm test".to_string(), "npm run lint".to_string()])
        );
        assert_eq!(k.merge, Ok(MergePolicy::Manual));
        assert_eq!(k.env_file, Ok(Some(".env.test".into())));
        assert_eq!((k.verify_timeout_s, k.max_attempts), (Ok(86_400), Ok(1)));
        assert_eq!(k.review, Ok(Some("reviewer".into())));
        assert_eq!(k.plan, Ok(Some("planner".into())));
        assert_eq!(
            keys("verify: cargo test\n").verify,
            Ok(vec!["cargo test".into()])
        );
    }

    #[test]
    fn each_bad_key_is_named_with_what_to_write() {
        let k = keys("repos: app\nhydrate: [a]\nverify: [1, [2]]\nmerge: later\nenv_file: 5\nverify_timeout_s: 0\nmax_attempts: null\nreview: {a: b}\nplan: true\n");
        let repos = problem(k.repos);
        assert!(
            repos.starts_with("key `repos` must be a list of {id, path, role}: "),
            "{repos}"
        );
        assert_eq!(problem(k.hydrate), "key `hydrate` must be a string");
        assert_eq!(
            problem(k.verify),
            "key `verify` must be a command or a list of commands"
        );
        assert_eq!(
            problem(k.merge),
            "key `merge` is `later`: use `auto` or `manual`"
        );
        assert_eq!(problem(k.env_file), "key `env_file` must be a string");
        assert_eq!(
            problem(k.verify_timeout_s),
            "key `verify_timeout_s` must be a whole number from 1 to 86400"
        );
        assert_eq!(
            problem(k.max_attempts),
            "key `max_attempts` must be a whole number from 1 to 100"
        );
        assert_eq!(problem(k.review), "key `review` must be a string");
        assert_eq!(problem(k.plan), "key `plan` must be a string");
        assert_eq!(
            problem(keys("merge: 1\n").merge),
            "key `merge` must be a string"
        );
        assert_eq!(keys("repos: null\n").repos, Ok(Some(Vec::new())));
        // An entry without its id does not read, but its path is still seen by the guard.
        let k = keys("repos:\n  - {path: /home/x}\n  - {id: b, path: 5}\n  - {id: c, path: c}\n");
        assert!(k.repos.is_err());
        assert_eq!(k.repo_paths, ["/home/x", "c"]);
        assert!(keys("max_attempts: 101\n").max_attempts.is_err());
        assert!(keys("max_attempts: 2.0\n").max_attempts.is_err());
        assert!(keys("max_attempts: \"2\"\n").max_attempts.is_err());
    }
}
