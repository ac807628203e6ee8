//! MCP tools past the budget (DESIGN.md §13, "Large MCP servers"): what a project's MCP servers
//! list is split once per listing into the tools offered with every model call and the tools
//! deferred behind one `tool_search {query}` tool.
//!
//! - The split ([`split`]): the tools in their stable order (servers by name, each server's
//!   tools in its listing order) are offered while the next one still fits the budget: a share
//!   of the model's context window (`mcp.tool_budget_share`), counted with the agent's own
//!   estimate ([`ToolSpec::estimated_tokens`]), and at most `mcp.max_offered_tools` tools. The
//!   first that does not fit and every one after it are deferred: the offered tools are a
//!   prefix, the same from call to call.
//! - The search ([`rank`]): each word of the query scores a deferred tool 10 when it is a word
//!   of the tool's name, 4 when it is part of one (words of 3 letters or more), 2 when it is a
//!   word of its description; the whole query equal to the tool's name (as offered, or the
//!   server's own) scores 1000. The best [`SEARCH_RESULTS`] that score at least half the best
//!   score are returned (so a name match does not bring along tools that merely share a word
//!   of description), ties in the stable order.
//! - What is found is offered from the next model call on, after every other tool (so the
//!   prompt's prefix does not move), and kept in `<project>/mcp_found.json` (an atomic write per
//!   find) so a restarted worker offers it too. The session is not the place: compaction
//!   rewrites it. At most [`MAX_FOUND`] are kept, the oldest dropped first.
//! - A deferred tool called by its exact name runs, found or not ([`LateTools::get`]).

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, PoisonError};

use pegasus_agent::{LateTools, Tool, ToolCtx, ToolOutput, TypedTool};
use pegasus_proto::llm::ToolSpec;
use serde::{Deserialize, Serialize};

/// The name of the search tool.
pub const SEARCH_TOOL: &str = "tool_search";
/// How many tools one search returns at most.
pub const SEARCH_RESULTS: usize = 5;
/// How many found tools are kept (and offered) at most; the oldest drop out first.
pub const MAX_FOUND: usize = 32;
/// The file of the found tools, beside PROJECT.md.
pub const FOUND_FILE: &str = "mcp_found.json";
/// The largest found-tools file read.
const MAX_FOUND_FILE: u64 = 64 << 10;

/// `mcp_found.json`: the names of the tools found, in the order found.
#[derive(Debug, Default, Serialize, Deserialize)]
struct FoundFile {
    found: Vec<String>,
}

/// The tokens the offered MCP tools may take of a `window`-token context.
pub fn budget_tokens(window: u64, share: f64) -> u64 {
    (window as f64 * share.clamp(0.0, 1.0)) as u64
}

/// How many of `specs` (in order) are offered: the longest prefix within `budget` tokens,
/// `max_count` tools and `max_bytes` bytes of names, descriptions and schemas.
pub fn split<'a>(
    specs: impl IntoIterator<Item = &'a ToolSpec>,
    budget: u64,
    max_count: usize,
    max_bytes: usize,
) -> usize {
    let (mut tokens, mut bytes, mut count) = (0u64, 0usize, 0usize);
    for s in specs {
        tokens += s.estimated_tokens();
        bytes += s.name.len() + s.description.len() + s.input_schema_json.len();
        if count == max_count || tokens > budget || bytes > max_bytes {
            return count;
        }
        count += 1;
    }
    count
}

/// Lowercase words: runs of letters and digits.
fn words(text: &str) -> Vec<String> {
    text.split(|c: char| !c.is_alphanumeric())
        .filter(|w| !w.is_empty())
        .map(str::to_lowercase)
        .collect()
}

/// The score of one tool for `query` (see the module's doc); 0 = no match.
fn score(query: &str, query_words: &[String], spec: &ToolSpec, own_name: &str) -> u32 {
    let q = query.trim().to_lowercase();
    if q == spec.name.to_lowercase() || q == own_name.to_lowercase() {
        return 1000;
    }
    let name = words(&spec.name);
    let description = words(&spec.description);
    query_words
        .iter()
        .map(|w| {
            let in_name = if name.contains(w) {
                10
            } else if w.chars().count() >= 3 && name.iter().any(|n| n.contains(w.as_str())) {
                4
            } else {
                0
            };
            in_name + if description.contains(w) { 2 } else { 0 }
        })
        .sum()
}

/// The indexes of the best `limit` of `tools` (spec and the server's own name) for `query`,
/// best first, ties in their order; tools that score 0 or less than half the best are left out.
pub fn rank(query: &str, tools: &[(&ToolSpec, &str)], limit: usize) -> Vec<usize> {
    let mut query_words = words(query);
    query_words.dedup();
    let mut scored: Vec<(u32, usize)> = tools
        .iter()
        .enumerate()
        .map(|(i, (spec, own))| (score(query, &query_words, spec, own), i))
        .filter(|(s, _)| *s > 0)
        .collect();
    // Stable: equal scores keep the catalog's order.
    scored.sort_by_key(|(s, _)| std::cmp::Reverse(*s));
    let best = scored.first().map(|(s, _)| *s).unwrap_or(0);
    scored
        .into_iter()
        .take_while(|(s, _)| *s * 2 >= best)
        .take(limit)
        .map(|(_, i)| i)
        .collect()
}

/// One deferred tool: its spec, its name on its server, and the tool that calls it.
#[derive(Clone)]
pub struct DeferredTool {
    /// As offered (`mcp__NAME__TOOL`).
    pub spec: Arc<ToolSpec>,
    /// The server's own name for it.
    pub own_name: String,
    /// What a call runs.
    pub tool: Arc<dyn Tool>,
}

#[derive(Default)]
struct State {
    /// In the stable order.
    tools: Vec<DeferredTool>,
    by_name: HashMap<String, usize>,
    /// Names found, in the order found.
    found: Vec<String>,
    /// MCP tools listed in all, offered and deferred.
    total: usize,
    /// The servers with deferred tools, by name.
    servers: Vec<String>,
}

/// The deferred tools of a project and the ones found: shared by the agent's tool set (as its
/// [`LateTools`]) and by `tool_search`.
pub struct Deferred {
    state: Mutex<State>,
    path: PathBuf,
}

impl Deferred {
    /// Reads what was found before (an unreadable file is logged and counts as nothing found).
    pub fn load(project_dir: &Path) -> Arc<Deferred> {
        let path = project_dir.join(FOUND_FILE);
        let found = match pegasus_store::read::read_text_limited(&path, MAX_FOUND_FILE) {
            Ok(text) => match serde_json::from_str::<FoundFile>(&text) {
                Ok(f) => f.found,
                Err(e) => {
                    tracing::warn!(
                        "{}: {e}; the tools found before are forgotten",
                        path.display()
                    );
                    Vec::new()
                }
            },
            Err(pegasus_store::read::ReadError::NotFound) => Vec::new(),
            Err(e) => {
                tracing::warn!(
                    "{}: {e}; the tools found before are forgotten",
                    path.display()
                );
                Vec::new()
            }
        };
        Arc::new(Deferred {
            state: Mutex::new(State {
                found,
                ..State::default()
            }),
            path,
        })
    }

    fn state(&self) -> std::sync::MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Sets the deferred tools of the latest listing (`total`: MCP tools listed in all).
    pub fn set(&self, tools: Vec<DeferredTool>, total: usize) {
        let mut st = self.state();
        st.by_name = tools
            .iter()
            .enumerate()
            .map(|(i, t)| (t.spec.name.clone(), i))
            .collect();
        let mut servers: Vec<String> = tools
            .iter()
            .filter_map(|t| server_of(&t.spec.name).map(str::to_string))
            .collect();
        servers.dedup();
        st.servers = servers;
        st.tools = tools;
        st.total = total;
    }

    /// How many tools are deferred.
    pub fn count(&self) -> usize {
        self.state().tools.len()
    }

    /// The found tools that are deferred now, in the order found.
    pub fn found_tools(&self) -> Vec<Arc<dyn Tool>> {
        let st = self.state();
        st.found
            .iter()
            .filter_map(|n| st.by_name.get(n).map(|i| st.tools[*i].tool.clone()))
            .collect()
    }

    /// The search tool for the current listing (its description counts the deferred tools).
    pub fn search_tool(self: &Arc<Self>) -> Arc<dyn Tool> {
        let st = self.state();
        let example = st
            .tools
            .first()
            .map(|t| format!(", e.g. `{}`", t.spec.name))
            .unwrap_or_default();
        let description = format!(
            "Finds tools of this project's MCP servers that are not in your list of tools: {} of \
             its {} MCP tools are deferred to keep every request small. Give a few words of what \
             you need, or a tool's exact name. Returns the best {SEARCH_RESULTS} matches with \
             their descriptions and input schemas; the tools found are in your list from then \
             on. A deferred tool can also be called directly by its exact name{example}.",
            st.tools.len(),
            st.total
        );
        Arc::new(SearchTool {
            deferred: self.clone(),
            description,
        })
    }

    /// Searches the deferred tools `allowed` lets through; the found ones are recorded.
    pub(crate) fn search(&self, query: &str, allowed: impl Fn(&str) -> bool) -> Vec<DeferredTool> {
        let mut st = self.state();
        let candidates: Vec<&DeferredTool> =
            st.tools.iter().filter(|t| allowed(&t.spec.name)).collect();
        let pairs: Vec<(&ToolSpec, &str)> = candidates
            .iter()
            .map(|t| (t.spec.as_ref(), t.own_name.as_str()))
            .collect();
        let hits: Vec<DeferredTool> = rank(query, &pairs, SEARCH_RESULTS)
            .into_iter()
            .map(|i| candidates[i].clone())
            .collect();
        let before = st.found.clone();
        for t in &hits {
            if !st.found.contains(&t.spec.name) {
                st.found.push(t.spec.name.clone());
            }
        }
        let over = st.found.len().saturating_sub(MAX_FOUND);
        st.found.drain(..over);
        // Written under the lock, so two searches cannot leave the older list on disk.
        if st.found != before {
            self.save(&FoundFile {
                found: st.found.clone(),
            });
        }
        hits
    }

    fn save(&self, file: &FoundFile) {
        let text = match serde_json::to_string_pretty(file) {
            Ok(t) => t,
            Err(e) => {
                tracing::warn!("cannot encode the found MCP tools: {e}");
                return;
            }
        };
        if let Err(e) = pegasus_store::write_atomic(&self.path, text.as_bytes()) {
            tracing::warn!(
                "cannot write {}: {e}; the tools found are offered until the worker stops",
                self.path.display()
            );
        }
    }
}

/// `NAME` of `mcp__NAME__TOOL`.
fn server_of(name: &str) -> Option<&str> {
    name.strip_prefix("mcp__")?.split("__").next()
}

impl LateTools for Deferred {
    fn found(&self) -> Vec<Arc<dyn Tool>> {
        self.found_tools()
    }

    fn get(&self, name: &str) -> Option<Arc<dyn Tool>> {
        let st = self.state();
        st.by_name.get(name).map(|i| st.tools[*i].tool.clone())
    }

    fn system_note(&self) -> Option<String> {
        let st = self.state();
        if st.tools.is_empty() {
            return None;
        }
        Some(format!(
            "## Deferred tools\n{} of the {} tools of this project's MCP servers ({}) are not in \
             your list of tools, to keep every request small. Find them with `{SEARCH_TOOL}` \
             (a few words of what you need, or a tool's exact name): the tools it finds are in \
             your list from then on. A deferred tool's exact name also works in a call.\n",
            st.tools.len(),
            st.total,
            st.servers.join(", ")
        ))
    }
}

/// `tool_search {query}`.
struct SearchTool {
    deferred: Arc<Deferred>,
    description: String,
}

/// The arguments of `tool_search`.
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct SearchArgs {
    query: String,
}

impl TypedTool for SearchTool {
    type Args = SearchArgs;

    fn name(&self) -> &str {
        SEARCH_TOOL
    }

    fn description(&self) -> &str {
        &self.description
    }

    fn schema(&self) -> serde_json::Value {
        serde_json::json!({
            "type": "object",
            "properties": {
                "query": {
                    "type": "string",
                    "description": "Words of what the tool should do, or its exact name"
                }
            },
            "required": ["query"]
        })
    }

    async fn run(&self, args: SearchArgs, ctx: &ToolCtx) -> Result<ToolOutput, String> {
        if args.query.trim().is_empty() {
            return Err("give `query` a few words of what you need, or a tool's name".into());
        }
        // A role's allowlist judges what it may find.
        let offered = ctx.offered.clone();
        let hits = self.deferred.search(&args.query, |n| {
            offered.as_ref().is_none_or(|o| o.allows(n))
        });
        Ok(ToolOutput::ok(describe_hits(
            &args.query,
            &hits,
            self.deferred.count(),
            ctx.settings.tool_result_cap(),
        )))
    }
}

/// The answer of a search: each tool with its description and schema, as many as fit in
/// `cap` bytes whole (the rest named), so no schema is cut in the middle.
fn describe_hits(query: &str, hits: &[DeferredTool], deferred: usize, cap: usize) -> String {
    if hits.is_empty() {
        return format!(
            "No deferred tool matches `{query}` ({deferred} are deferred). Try other words: \
             what the tool acts on, or what it does."
        );
    }
    let mut out = format!(
        "{} tool{} found for `{query}`; {} in your list of tools from now on:\n",
        hits.len(),
        if hits.len() == 1 { "" } else { "s" },
        if hits.len() == 1 { "it is" } else { "they are" }
    );
    let mut left_out = Vec::new();
    for t in hits {
        let entry = format!(
            "\n## {}\n{}\nInput schema: {}\n",
            t.spec.name, t.spec.description, t.spec.input_schema_json
        );
        if out.len() + entry.len() + 200 <= cap {
            out.push_str(&entry);
        } else {
            left_out.push(t.spec.name.as_str());
        }
    }
    if !left_out.is_empty() {
        out.push_str(&format!(
            "\nAlso found (their schemas are in your list of tools): {}\n",
            left_out.join(", ")
        ));
    }
    out
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used)]
    use super::*;

    fn spec(name: &str, description: &str) -> ToolSpec {
        ToolSpec {
            name: name.into(),
            description: description.into(),
            input_schema_json: "{}".into(),
        }
    }

    #[test]
    fn the_split_offers_the_longest_prefix_within_the_budget_and_the_count() {
        // Each: 8 + ceil(2 * 35 / 7) = 18 tokens.
        let specs: Vec<ToolSpec> = (0..10)
            .map(|i| spec(&format!("mcp__s__t{i}"), &"d".repeat(35 - 12)))
            .collect();
        assert!(specs.iter().all(|s| s.estimated_tokens() == 18));
        assert_eq!(split(&specs, 18 * 4, 100, usize::MAX), 4);
        assert_eq!(split(&specs, 18 * 4 + 17, 100, usize::MAX), 4);
        assert_eq!(split(&specs, 18 * 10, 100, usize::MAX), 10);
        assert_eq!(split(&specs, 0, 100, usize::MAX), 0);
        // The count, then the bytes.
        assert_eq!(split(&specs, u64::MAX, 3, usize::MAX), 3);
        assert_eq!(split(&specs, u64::MAX, 100, 35 * 2), 2);
        // A large tool stops the prefix: the small ones after it are deferred too (the offered
        // tools stay a prefix of the stable order).
        let mut mixed = specs.clone();
        mixed[1] = spec("mcp__s__big", &"d".repeat(10_000));
        assert_eq!(split(&mixed, 18 * 5, 100, usize::MAX), 1);
        // The budget: a share of the window.
        assert_eq!(budget_tokens(200_000, 0.1), 20_000);
        assert_eq!(budget_tokens(200_000, 0.0), 0);
    }

    #[test]
    fn ranking_is_exact_name_then_name_words_then_description_words() {
        let tools = [
            spec("mcp__gh__create_issue", "Create an issue in a repository"),
            spec("mcp__gh__list_issues", "List the issues of a repository"),
            spec("mcp__gh__create_pull_request", "Open a pull request"),
            spec("mcp__jira__search", "Find issues by JQL"),
            spec("mcp__gh__get_file", "Read a file's contents"),
        ];
        let own = [
            "create_issue",
            "list_issues",
            "create_pull_request",
            "search",
            "get_file",
        ];
        let pairs: Vec<(&ToolSpec, &str)> = tools.iter().zip(own).collect();
        let names = |q: &str| -> Vec<&str> {
            rank(q, &pairs, 5)
                .into_iter()
                .map(|i| tools[i].name.as_str())
                .collect()
        };
        // Name words (10) beat description words (2); "issue" is a word of create_issue's name
        // and description (24 in all), part of list_issues' name (4); create_pull_request has
        // "create" (10): less than half the best, left out.
        assert_eq!(names("create issue"), ["mcp__gh__create_issue"]);
        assert_eq!(
            names("create"),
            ["mcp__gh__create_issue", "mcp__gh__create_pull_request"]
        );
        // Half the best is enough: "issues" is a word of list_issues' name (12) and of the
        // description of jira's search (2, left out).
        assert_eq!(names("issues"), ["mcp__gh__list_issues"]);
        assert_eq!(
            names("repository"),
            ["mcp__gh__create_issue", "mcp__gh__list_issues"]
        );
        // The exact name, as offered or as the server's own, wins over any word score.
        assert_eq!(names("search")[0], "mcp__jira__search");
        assert_eq!(names("get_file"), ["mcp__gh__get_file"]);
        assert_eq!(names("MCP__GH__LIST_ISSUES")[0], "mcp__gh__list_issues");
        // Ties keep the stable order; a server's name is a word of its tools' names.
        assert_eq!(names("gh").len(), 4);
        assert_eq!(names("gh")[0], "mcp__gh__create_issue");
        // Nothing matches: nothing returned; the limit holds.
        assert!(names("weather").is_empty());
        assert_eq!(rank("gh", &pairs, 2).len(), 2);
        // Short words are not matched inside names.
        assert!(names("ue").is_empty());
    }

    struct Echo(ToolSpec);

    impl Tool for Echo {
        fn spec(&self) -> ToolSpec {
            self.0.clone()
        }
        fn call<'a>(
            &'a self,
            _: serde_json::Value,
            _: &'a ToolCtx,
        ) -> pegasus_agent::ToolFuture<'a> {
            Box::pin(async { ToolOutput::ok("") })
        }
    }

    fn deferred_tool(name: &str, description: &str) -> DeferredTool {
        let spec = spec(&format!("mcp__s__{name}"), description);
        DeferredTool {
            tool: Arc::new(Echo(spec.clone())),
            spec: Arc::new(spec),
            own_name: name.into(),
        }
    }

    #[test]
    fn finds_are_kept_in_order_on_disk_bounded_and_come_back_after_a_restart() {
        let dir = tempfile::tempdir().unwrap();
        let d = Deferred::load(dir.path());
        let tools: Vec<DeferredTool> = (0..40)
            .map(|i| deferred_tool(&format!("t{i}"), &format!("number {i}")))
            .collect();
        d.set(tools.clone(), 50);
        assert_eq!(d.count(), 40);
        let note = d.system_note().unwrap();
        assert!(
            note.contains("40 of the 50 tools") && note.contains("(s)"),
            "{note}"
        );
        assert!(d.get("mcp__s__t39").is_some() && d.get("mcp__s__t40").is_none());
        let hits = d.search("t7", |_| true);
        assert_eq!(hits[0].spec.name, "mcp__s__t7");
        // A role that may not call it finds nothing.
        assert!(d.search("t3", |n| n != "mcp__s__t3").is_empty());
        let names = |d: &Deferred| -> Vec<String> {
            d.found_tools().iter().map(|t| t.spec().name).collect()
        };
        assert_eq!(names(&d), ["mcp__s__t7"]);
        d.search("t3", |_| true);
        assert_eq!(names(&d), ["mcp__s__t7", "mcp__s__t3"]);
        // A restart reads them back, in order.
        let again = Deferred::load(dir.path());
        again.set(tools.clone(), 50);
        assert_eq!(names(&again), ["mcp__s__t7", "mcp__s__t3"]);
        // Bounded: the oldest drop out first.
        for i in 9..40 {
            again.search(&format!("t{i}"), |_| true);
        }
        let kept = names(&again);
        assert_eq!(kept.len(), MAX_FOUND);
        assert_eq!(kept[0], "mcp__s__t3");
        assert_eq!(kept[MAX_FOUND - 1], "mcp__s__t39");
        // A found tool no longer listed is not offered.
        again.set(tools[..5].to_vec(), 5);
        assert_eq!(names(&again), ["mcp__s__t3"]);
        // A broken file is nothing found, not a failure.
        std::fs::write(dir.path().join(FOUND_FILE), "{not json").unwrap();
        let broken = Deferred::load(dir.path());
        broken.set(tools, 50);
        assert!(names(&broken).is_empty());
    }

    #[test]
    fn a_search_answer_fits_the_result_cap_with_whole_schemas() {
        let hits: Vec<DeferredTool> = (0..5)
            .map(|i| deferred_tool(&format!("t{i}"), &"x".repeat(400)))
            .collect();
        let all = describe_hits("x", &hits, 9, 100_000);
        assert!(all.starts_with("5 tools found for `x`"), "{all}");
        assert_eq!(all.matches("Input schema: {}").count(), 5);
        let some = describe_hits("x", &hits, 9, 1200);
        assert!(some.len() <= 1200, "{}", some.len());
        assert_eq!(some.matches("Input schema").count(), 2, "{some}");
        assert!(some.contains("Also found (their schemas are in your list of tools): mcp__s__t2, mcp__s__t3, mcp__s__t4"));
        assert!(describe_hits("zzz", &[], 9, 1000)
            .starts_with("No deferred tool matches `zzz` (9 are deferred)"));
    }
}
