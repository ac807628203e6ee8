//! The tools an agent may call, by name.

use std::sync::Arc;

use pegasus_proto::llm::ToolSpec;

use crate::tool::Tool;
use crate::tools;

/// An ordered set of tools. The order is the order the model sees them in; names are unique
/// (a later tool with the same name replaces the earlier one), because a call is routed by name.
///
/// Each tool's spec is built once, when it joins the set: a spec is a JSON schema made from a
/// `serde_json::Value`, and looking tools up by name must not rebuild it every time.
#[derive(Clone, Default)]
pub struct ToolSet {
    tools: Vec<Entry>,
}

#[derive(Clone)]
struct Entry {
    spec: ToolSpec,
    tool: Arc<dyn Tool>,
}

impl ToolSet {
    /// A set of the given tools.
    pub fn new(tools: Vec<Arc<dyn Tool>>) -> Self {
        ToolSet::default().with(tools)
    }

    fn insert(&mut self, tool: Arc<dyn Tool>) {
        let entry = Entry {
            spec: tool.spec(),
            tool,
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
            set.insert(t);
        }
        set
    }

    /// The built-in tools of a project agent (DESIGN.md §6).
    pub fn project_tools() -> Self {
        ToolSet::new(tools::builtins())
    }

    /// The specs to send with a model call.
    pub fn specs(&self) -> Vec<ToolSpec> {
        self.tools.iter().map(|t| t.spec.clone()).collect()
    }

    /// The tool called `name`, if the set has it.
    pub fn get(&self, name: &str) -> Option<Arc<dyn Tool>> {
        self.tools
            .iter()
            .find(|t| t.spec.name == name)
            .map(|t| t.tool.clone())
    }

    /// The same set without the tool called `name` (e.g. a role's allowlist, or no
    /// `spawn_subagent` at the deepest subagent level).
    pub fn without(&self, name: &str) -> Self {
        self.only(|n| n != name)
    }

    /// The same set with only the tools `keep` accepts: a role's allowlist. A tool left out
    /// is neither shown to the model nor callable (a call to it is answered with an error).
    pub fn only(&self, keep: impl Fn(&str) -> bool) -> Self {
        ToolSet {
            tools: self
                .tools
                .iter()
                .filter(|t| keep(&t.spec.name))
                .cloned()
                .collect(),
        }
    }

    /// Tool names, in order.
    pub fn names(&self) -> Vec<String> {
        self.tools.iter().map(|t| t.spec.name.clone()).collect()
    }

    /// Number of tools.
    pub fn len(&self) -> usize {
        self.tools.len()
    }

    /// Whether the set has no tool.
    pub fn is_empty(&self) -> bool {
        self.tools.is_empty()
    }
}
