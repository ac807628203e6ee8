//! The tools an agent may call, by name.

use std::sync::Arc;

use pegasus_proto::llm::ToolSpec;

use crate::tool::Tool;
use crate::tools;

/// Tools that join a set while its loop runs (DESIGN.md §13, deferred MCP tools): the worker's
/// MCP tools found by `tool_search` are offered from the next model call on, and a deferred tool
/// called by its exact name runs although it was never offered.
pub trait LateTools: Send + Sync {
    /// The tools found so far, in the order they were found; those already in the set are
    /// skipped, the others are offered after the set's own.
    fn found(&self) -> Vec<Arc<dyn Tool>>;
    /// The tool called exactly `name` that the set does not hold, if there is one.
    fn get(&self, name: &str) -> Option<Arc<dyn Tool>>;
    /// A paragraph for the system prompt (how many tools are deferred and how to find them);
    /// the same for the whole loop, so the prompt's prefix stays stable.
    fn system_note(&self) -> Option<String>;
}

/// A filter of tool names (a role's allowlist), kept so late tools are judged by it too.
type Keep = Arc<dyn Fn(&str) -> bool + Send + Sync>;

/// An ordered set of tools. The order is the order the model sees them in; names are unique
/// (a later tool with the same name replaces the earlier one), because a call is routed by name.
///
/// Each tool's spec is built once, when it joins the set: a spec is a JSON schema made from a
/// `serde_json::Value`, and looking tools up by name must not rebuild it every time.
///
/// A set may have [`LateTools`]: they join after its own tools, judged by every filter the set
/// was made with ([`ToolSet::only`]).
#[derive(Clone, Default)]
pub struct ToolSet {
    tools: Vec<Entry>,
    late: Option<Arc<dyn LateTools>>,
    keep: Vec<Keep>,
}

#[derive(Clone)]
struct Entry {
    spec: ToolSpec,
    tool: Arc<dyn Tool>,
    /// Given by [`ToolSet::with_mcp`] (replaced as a whole by the next).
    mcp: bool,
}

impl ToolSet {
    /// A set of the given tools.
    pub fn new(tools: Vec<Arc<dyn Tool>>) -> Self {
        ToolSet::default().with(tools)
    }

    fn insert(&mut self, tool: Arc<dyn Tool>, mcp: bool) {
        let entry = Entry {
            spec: tool.spec(),
            tool,
            mcp,
        };
        match self
            .tools
            .iter()
            .position(|t| t.spec.name == entry.spec.name)
        {
            Some(i) => self.tools[i] = entry,
            None => self.tools.push(entry),
        }
    }

    /// This set with `extra` added (a tool of the same name is replaced).
    pub fn with(&self, extra: Vec<Arc<dyn Tool>>) -> Self {
        let mut set = self.clone();
        for t in extra {
            set.insert(t, false);
        }
        set
    }

    /// This set with the MCP tools given before replaced by `mcp` (DESIGN.md §13), and `late`
    /// the source of the tools that join while a loop runs.
    pub fn with_mcp(&self, mcp: Vec<Arc<dyn Tool>>, late: Option<Arc<dyn LateTools>>) -> Self {
        let mut set = self.clone();
        set.tools.retain(|t| !t.mcp);
        for t in mcp {
            set.insert(t, true);
        }
        set.late = late;
        set
    }

    /// The built-in tools of a project agent (DESIGN.md §6).
    pub fn project_tools() -> Self {
        ToolSet::new(tools::builtins())
    }

    /// Whether every filter of the set lets `name` through.
    pub fn allows(&self, name: &str) -> bool {
        self.keep.iter().all(|k| k(name))
    }

    /// The late tools found so far that the set neither holds nor filters out, in order.
    fn late_found(&self) -> Vec<(ToolSpec, Arc<dyn Tool>)> {
        let Some(late) = &self.late else {
            return Vec::new();
        };
        late.found()
            .into_iter()
            .map(|t| (t.spec(), t))
            .filter(|(spec, _)| {
                self.allows(&spec.name) && !self.tools.iter().any(|e| e.spec.name == spec.name)
            })
            .collect()
    }

    /// The specs to send with a model call: the set's own, then the late tools found so far.
    pub fn specs(&self) -> Vec<ToolSpec> {
        self.tools
            .iter()
            .map(|t| t.spec.clone())
            .chain(self.late_found().into_iter().map(|(spec, _)| spec))
            .collect()
    }

    /// The tool called `name`, if the set has it (a late tool included, if the set's filters
    /// let it through).
    pub fn get(&self, name: &str) -> Option<Arc<dyn Tool>> {
        if let Some(t) = self.tools.iter().find(|t| t.spec.name == name) {
            return Some(t.tool.clone());
        }
        match &self.late {
            Some(late) if self.allows(name) => late.get(name),
            _ => None,
        }
    }

    /// The paragraph the late tools add to the system prompt, if any.
    pub fn system_note(&self) -> Option<String> {
        self.late.as_ref().and_then(|l| l.system_note())
    }

    /// The same set without the tool called `name` (e.g. a role's allowlist, or no
    /// `spawn_subagent` at the deepest subagent level).
    pub fn without(&self, name: &str) -> Self {
        let name = name.to_string();
        self.only(move |n| n != name)
    }

    /// The same set with only the tools `keep` accepts: a role's allowlist. A tool left out
    /// is neither shown to the model nor callable (a call to it is answered with an error);
    /// late tools are judged by `keep` too.
    pub fn only(&self, keep: impl Fn(&str) -> bool + Send + Sync + 'static) -> Self {
        let keep: Keep = Arc::new(keep);
        let mut set = ToolSet {
            tools: self
                .tools
                .iter()
                .filter(|t| keep(&t.spec.name))
                .cloned()
                .collect(),
            late: self.late.clone(),
            keep: self.keep.clone(),
        };
        set.keep.push(keep);
        set
    }

    /// Tool names, in order (late tools found so far included).
    pub fn names(&self) -> Vec<String> {
        self.specs().into_iter().map(|s| s.name).collect()
    }

    /// Number of tools (late tools found so far included).
    pub fn len(&self) -> usize {
        self.tools.len() + self.late_found().len()
    }

    /// Whether the set has no tool.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used)]
    use super::*;
    use crate::tool::{ToolCtx, ToolFuture, ToolOutput};
    use std::sync::Mutex;

    struct Named(&'static str);

    impl Tool for Named {
        fn spec(&self) -> ToolSpec {
            ToolSpec {
                name: self.0.into(),
                description: String::new(),
                input_schema_json: "{}".into(),
            }
        }
        fn call<'a>(&'a self, _: serde_json::Value, _: &'a ToolCtx) -> ToolFuture<'a> {
            Box::pin(async { ToolOutput::ok("") })
        }
    }

    #[derive(Default)]
    struct Late {
        found: Mutex<Vec<&'static str>>,
    }

    impl LateTools for Late {
        fn found(&self) -> Vec<Arc<dyn Tool>> {
            let found = self.found.lock().unwrap();
            found
                .iter()
                .map(|n| Arc::new(Named(n)) as Arc<dyn Tool>)
                .collect()
        }
        fn get(&self, name: &str) -> Option<Arc<dyn Tool>> {
            ["mcp__s__deep", "mcp__s__found", "mcp__s__other"]
                .into_iter()
                .find(|n| *n == name)
                .map(|n| Arc::new(Named(n)) as Arc<dyn Tool>)
        }
        fn system_note(&self) -> Option<String> {
            Some("2 tools deferred".into())
        }
    }

    #[test]
    fn late_tools_join_after_the_sets_own_and_obey_its_filters() {
        let late = Arc::new(Late::default());
        let set = ToolSet::new(vec![Arc::new(Named("exec"))]).with_mcp(
            vec![Arc::new(Named("mcp__s__a")), Arc::new(Named("tool_search"))],
            Some(late.clone()),
        );
        assert_eq!(set.names(), ["exec", "mcp__s__a", "tool_search"]);
        // A deferred tool is callable by its exact name before it is found.
        assert!(set.get("mcp__s__deep").is_some());
        assert!(set.get("mcp__s__nope").is_none());
        // Found: appended, in the order found, once.
        late.found
            .lock()
            .unwrap()
            .extend(["mcp__s__found", "mcp__s__a"]);
        assert_eq!(
            set.names(),
            ["exec", "mcp__s__a", "tool_search", "mcp__s__found"]
        );
        assert_eq!(set.len(), 4);
        assert_eq!(set.system_note().as_deref(), Some("2 tools deferred"));
        // A role's filter judges late tools too, for offering and for calling.
        let role = set.only(|n| n != "mcp__s__found" && n != "mcp__s__deep");
        assert_eq!(role.names(), ["exec", "mcp__s__a", "tool_search"]);
        assert!(role.get("mcp__s__deep").is_none() && role.get("mcp__s__other").is_some());
        assert!(!role.allows("mcp__s__found"));
        // The next MCP tools replace these as a whole; built-ins stay.
        let next = role.with_mcp(vec![Arc::new(Named("mcp__s__b"))], None);
        assert_eq!(next.names(), ["exec", "mcp__s__b"]);
        assert!(next.get("mcp__s__other").is_none() && next.system_note().is_none());
    }
}
