//! A role: who an agent is when it works for a project (DESIGN.md §8, seed 001 §1.1).
//!
//! A role file is YAML frontmatter (identity, model settings, tool and skill allowlists,
//! declared variables) and a markdown body that is the role's prompt template. Parsing checks
//! everything that would otherwise surface later as a confusing agent failure: a bad id, an
//! unknown thinking level, a `{{placeholder}}` nobody declared.

use std::collections::{BTreeMap, BTreeSet};

use serde::{Deserialize, Serialize};

use crate::error::RoleError;
use crate::frontmatter::{self, key_error};
use crate::template::{fill, is_variable_name, placeholders};
use crate::Thinking;

/// The model settings of a role. Every field may be left out of a role file; `None` means
/// "whatever the project (or the gateway) uses", so a role never pins a provider by accident.
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RoleModel {
    /// `provider/model`; `None` = the project's model.
    #[serde(default)]
    pub model: Option<String>,
    /// Reasoning level; the gateway maps it onto each provider's wire.
    #[serde(default)]
    pub thinking: Thinking,
    /// Wall-clock limit of one role agent run, in seconds.
    #[serde(default)]
    pub timeout_s: Option<u64>,
    /// Sampling temperature, 0 to 2.
    #[serde(default)]
    pub temperature: Option<f32>,
    /// Output token limit of one model call.
    #[serde(default)]
    pub max_tokens: Option<u32>,
}

/// A value the prompt template needs, filled per assignment (`{{name}}` in the body).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Variable {
    /// The placeholder name: a letter or `_`, then letters, digits or `_`.
    pub name: String,
    /// What the value is for, shown to whoever assigns the role.
    #[serde(default)]
    pub description: String,
    /// Used when an assignment gives no value; `None` makes the variable required.
    #[serde(default)]
    pub default: Option<String>,
}

/// Where a role came from, so `role list` can say which built-ins a user file overrides.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub enum RoleSource {
    /// Shipped in `data/roles/` and embedded in the binary.
    BuiltIn,
    /// A user file; the string is its path.
    User(String),
}

/// A parsed, validated role.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Role {
    /// Unique id, `^[a-z0-9][a-z0-9-]{0,62}$`; a user file is named `<id>.md`.
    pub id: String,
    /// Display name.
    pub name: String,
    /// A single emoji shown next to the name in lists and the dashboard.
    pub emoji: String,
    /// One sentence on what the role does; the MainAgent reads it to pick a role.
    pub description: String,
    /// Keywords for matching a task to a role (comma-separated when a list was given).
    pub specialty: String,
    /// Model settings.
    pub model: RoleModel,
    /// Tools the role's agent may see and call; `None` = all tools.
    pub tools: Option<Vec<String>>,
    /// Skills the role's agent may use; empty = all skills.
    pub skills: Vec<String>,
    /// Variables of the prompt template.
    pub variables: Vec<Variable>,
    /// The prompt template (the file's body, trimmed).
    pub template: String,
    /// Built-in or user file.
    pub source: RoleSource,
}

/// `specialty` as written: seed 001 uses a keyword list, our files a phrase; both are fine.
#[derive(Debug, Deserialize)]
#[serde(untagged)]
enum Specialty {
    One(String),
    Many(Vec<String>),
}

impl Default for Specialty {
    fn default() -> Self {
        Specialty::One(String::new())
    }
}

/// The frontmatter as written; `deny_unknown_fields` so a misspelt `toosl:` is an error
/// instead of silently granting every tool.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct RoleFile {
    id: String,
    name: String,
    #[serde(default)]
    emoji: String,
    description: String,
    #[serde(default)]
    specialty: Specialty,
    #[serde(default)]
    model: RoleModel,
    #[serde(default)]
    tools: Option<Vec<String>>,
    #[serde(default)]
    skills: Vec<String>,
    #[serde(default)]
    variables: Vec<Variable>,
}

/// The frontmatter written back by [`Role::to_file_text`], in the documented key order.
#[derive(Serialize)]
struct RoleFileOut<'a> {
    id: &'a str,
    name: &'a str,
    emoji: &'a str,
    description: &'a str,
    specialty: &'a str,
    model: &'a RoleModel,
    #[serde(skip_serializing_if = "Option::is_none")]
    tools: &'a Option<Vec<String>>,
    skills: &'a [String],
    variables: &'a [Variable],
}

/// Checks a role id: 1-63 lowercase letters, digits and dashes, not starting with a dash.
/// Ids become file names, so this also keeps `../x` out of paths.
pub fn validate_id(id: &str) -> Result<(), RoleError> {
    Ok(pegasus_store::project::validate_role_id(id)?)
}

impl Role {
    /// Parses a role file. `origin` names it in errors (a path, or `built-in coder`);
    /// `expected_id` is the file stem for user files, whose id must match it so that
    /// `roles/<id>.md` is always where role `<id>` lives.
    ///
    /// Errors name the file and what is wrong: bad frontmatter (line and key), an invalid id,
    /// an id that differs from the file stem, an unknown thinking level, and a `{{x}}` in the
    /// body that is not a declared variable.
    pub fn parse(text: &str, origin: &str, expected_id: Option<&str>) -> Result<Role, RoleError> {
        let split = frontmatter::split(text, origin)?;
        let yaml = split.yaml;
        let file: RoleFile =
            serde_norway::from_str(yaml).map_err(|e| frontmatter::parse_error(&e, yaml, origin))?;
        let err = |key: &str, message: String| key_error(yaml, origin, key, message);

        if validate_id(&file.id).is_err() {
            return Err(err(
                "id",
                format!(
                    "`{}` is not a valid role id: use 1-63 lowercase letters, digits and dashes, starting with a letter or digit",
                    file.id
                ),
            ));
        }
        if let Some(stem) = expected_id {
            if stem != file.id {
                return Err(err(
                    "id",
                    format!(
                        "id `{}` differs from the file name `{stem}.md`: rename the file to `{}.md` or set `id: {stem}`",
                        file.id, file.id
                    ),
                ));
            }
        }
        if file.name.trim().is_empty() {
            return Err(err("name", "is empty: give the role a display name".into()));
        }
        check_model(&file.model).map_err(|(key, msg)| err(key, msg))?;
        check_variables(&file.variables).map_err(|msg| err("variables", msg))?;

        let template = split.body.trim().to_string();
        if template.is_empty() {
            return Err(RoleError::Parse {
                origin: origin.to_string(),
                line: yaml.lines().count() + 2,
                key: None,
                message: "the prompt is empty: write the role's prompt below the closing `---`"
                    .into(),
            });
        }
        let declared: BTreeSet<&str> = file.variables.iter().map(|v| v.name.as_str()).collect();
        if let Some(p) = placeholders(&template)
            .into_iter()
            .find(|p| !declared.contains(p.name))
        {
            return Err(RoleError::UndeclaredPlaceholder {
                origin: origin.to_string(),
                role: file.id,
                name: p.name.to_string(),
            });
        }

        let specialty = match file.specialty {
            Specialty::One(s) => s,
            Specialty::Many(v) => v.join(", "),
        };
        Ok(Role {
            id: file.id,
            name: file.name,
            emoji: file.emoji,
            description: file.description,
            specialty,
            model: file.model,
            tools: file.tools,
            skills: file.skills,
            variables: file.variables,
            template,
            source: RoleSource::BuiltIn,
        })
    }

    /// Fills the template. Every declared variable must be supplied in `vars` or have a
    /// default ([`RoleError::MissingVariable`]); a supplied name the role does not declare is
    /// refused too ([`RoleError::UnknownVariable`]), because it is almost always a typo.
    pub fn render(&self, vars: &BTreeMap<String, String>) -> Result<String, RoleError> {
        if let Some(name) = vars
            .keys()
            .find(|k| !self.variables.iter().any(|v| &v.name == *k))
        {
            return Err(RoleError::UnknownVariable {
                role: self.id.clone(),
                name: name.clone(),
            });
        }
        let mut values = BTreeMap::new();
        for v in &self.variables {
            let value = vars.get(&v.name).or(v.default.as_ref()).ok_or_else(|| {
                RoleError::MissingVariable {
                    role: self.id.clone(),
                    name: v.name.clone(),
                }
            })?;
            values.insert(v.name.clone(), value.clone());
        }
        Ok(fill(&self.template, &values))
    }

    /// Whether the role lets its agent see and call `tool` (no allowlist = every tool). An
    /// entry ending in `*` allows every tool with that prefix (`mcp__github__*`).
    pub fn allows_tool(&self, tool: &str) -> bool {
        match &self.tools {
            None => true,
            Some(list) => list.iter().any(|t| match t.strip_suffix('*') {
                Some(prefix) => tool.starts_with(prefix),
                None => t == tool,
            }),
        }
    }

    /// Whether the role lets its agent use `skill` (an empty allowlist = every skill).
    pub fn allows_skill(&self, skill: &str) -> bool {
        self.skills.is_empty() || self.skills.iter().any(|s| s == skill)
    }

    /// The role as a role file that [`Role::parse`] reads back to an equal role (except
    /// `source`); for `role` commands that copy a built-in into `<home>/roles/` to edit it.
    pub fn to_file_text(&self) -> String {
        let out = RoleFileOut {
            id: &self.id,
            name: &self.name,
            emoji: &self.emoji,
            description: &self.description,
            specialty: &self.specialty,
            model: &self.model,
            tools: &self.tools,
            skills: &self.skills,
            variables: &self.variables,
        };
        // Serializing plain strings, numbers and lists cannot fail; fall back to the id alone
        // rather than panic so a caller still gets a file it can fix.
        let yaml = serde_norway::to_string(&out).unwrap_or_else(|_| format!("id: {}\n", self.id));
        format!("---\n{yaml}---\n{}\n", self.template)
    }
}

/// Range checks serde cannot express; returns the dotted key at fault and the message.
fn check_model(m: &RoleModel) -> Result<(), (&'static str, String)> {
    if let Some(model) = &m.model {
        let ok = model
            .split_once('/')
            .is_some_and(|(p, name)| !p.is_empty() && !name.is_empty());
        if !ok {
            return Err((
                "model.model",
                format!("`{model}` is not provider/model: write e.g. anthropic/claude-sonnet-4-5, or null for the project's model"),
            ));
        }
    }
    if let Some(t) = m.temperature {
        if !(0.0..=2.0).contains(&t) {
            return Err((
                "model.temperature",
                format!("{t} is out of range: use 0 to 2"),
            ));
        }
    }
    if m.timeout_s == Some(0) {
        return Err(("model.timeout_s", "must be at least 1 second".into()));
    }
    if m.max_tokens == Some(0) {
        return Err(("model.max_tokens", "must be at least 1".into()));
    }
    Ok(())
}

fn check_variables(vars: &[Variable]) -> Result<(), String> {
    let mut seen = BTreeSet::new();
    for v in vars {
        if !is_variable_name(&v.name) {
            return Err(format!(
                "`{}` is not a variable name: use letters, digits and `_`, starting with a letter or `_`",
                v.name
            ));
        }
        if !seen.insert(v.name.as_str()) {
            return Err(format!("`{}` is declared twice: keep one", v.name));
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used)]
    use super::*;

    const CODER: &str = "---\nid: coder\nname: Coder\nemoji: \"💻\"\ndescription: Writes code.\nspecialty: [rust, tests]\nmodel:\n  model: null\n  thinking: medium\n  timeout_s: 600\ntools: [read_file, exec]\nvariables:\n  - {name: language, description: \"main language\", default: \"Rust\"}\n  - {name: style, description: \"house style\"}\n---\nYou write {{language}} in {{ style }} style.\n";

    fn vars(pairs: &[(&str, &str)]) -> BTreeMap<String, String> {
        pairs
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect()
    }

    #[test]
    fn parses_all_fields() {
        let r = Role::parse(CODER, "coder.md", Some("coder")).unwrap();
        assert_eq!(r.id, "coder");
        assert_eq!(r.emoji, "💻");
        assert_eq!(r.specialty, "rust, tests");
        assert_eq!(r.model.thinking, Thinking::Medium);
        assert_eq!(r.model.timeout_s, Some(600));
        assert_eq!(r.model.model, None);
        assert_eq!(r.tools, Some(vec!["read_file".into(), "exec".into()]));
        assert_eq!(r.variables.len(), 2);
        assert_eq!(r.template, "You write {{language}} in {{ style }} style.");
    }

    #[test]
    fn render_uses_defaults_and_supplied_values() {
        let r = Role::parse(CODER, "coder.md", None).unwrap();
        let out = r.render(&vars(&[("style", "terse")])).unwrap();
        assert_eq!(out, "You write Rust in terse style.");
        let out = r
            .render(&vars(&[("style", "x"), ("language", "Go")]))
            .unwrap();
        assert_eq!(out, "You write Go in x style.");
    }

    #[test]
    fn missing_variable_is_named() {
        let r = Role::parse(CODER, "coder.md", None).unwrap();
        let e = r.render(&BTreeMap::new()).unwrap_err();
        assert!(matches!(&e, RoleError::MissingVariable { name, .. } if name == "style"));
        assert_eq!(
            e.to_string(),
            "role coder needs variable `style`: pass it in the assignment"
        );
    }

    #[test]
    fn undeclared_supplied_variable_is_refused() {
        let r = Role::parse(CODER, "coder.md", None).unwrap();
        let e = r
            .render(&vars(&[("style", "x"), ("langauge", "Go")]))
            .unwrap_err();
        assert!(matches!(&e, RoleError::UnknownVariable { name, .. } if name == "langauge"));
        assert!(e.to_string().contains("`langauge`"), "{e}");
    }

    #[test]
    fn undeclared_placeholder_is_an_error_at_parse() {
        let text = CODER.replace("{{ style }}", "{{lang}}");
        let e = Role::parse(&text, "roles/coder.md", None).unwrap_err();
        assert!(matches!(&e, RoleError::UndeclaredPlaceholder { name, .. } if name == "lang"));
        assert_eq!(
            e.to_string(),
            "roles/coder.md: role coder: the template uses {{lang}} but declares no variable `lang`: add it under variables"
        );
    }

    #[test]
    fn unknown_thinking_level_names_line_and_key() {
        let text = CODER.replace("thinking: medium", "thinking: extreme");
        let e = Role::parse(&text, "roles/coder.md", None).unwrap_err();
        let RoleError::Parse {
            line, key, message, ..
        } = &e
        else {
            panic!("{e:?}");
        };
        assert_eq!(*line, 9, "{e}");
        assert_eq!(key.as_deref(), Some("model.thinking"));
        assert!(message.contains("extreme"), "{message}");
        assert!(
            e.to_string()
                .starts_with("roles/coder.md:9: key `model.thinking`: "),
            "{e}"
        );
    }

    #[test]
    fn bad_ids_are_refused() {
        for bad in ["Coder", "-x", "a_b", "", "../etc"] {
            let text = CODER.replace("id: coder", &format!("id: \"{bad}\""));
            let e = Role::parse(&text, "r.md", None).unwrap_err();
            let s = e.to_string();
            assert!(s.starts_with("r.md:2: key `id`: "), "{s}");
            assert!(s.contains("not a valid role id"), "{s}");
        }
        assert!(validate_id(&"a".repeat(63)).is_ok());
        assert!(validate_id(&"a".repeat(64)).is_err());
        assert!(validate_id("0-x").is_ok());
    }

    #[test]
    fn id_must_match_the_file_stem() {
        let e = Role::parse(CODER, "roles/dev.md", Some("dev")).unwrap_err();
        let s = e.to_string();
        assert!(s.starts_with("roles/dev.md:2: key `id`: "), "{s}");
        assert!(s.contains("dev.md"), "{s}");
    }

    #[test]
    fn misspelt_keys_and_bad_values_are_located() {
        let text = CODER.replace("tools:", "toosl:");
        let s = Role::parse(&text, "r.md", None).unwrap_err().to_string();
        assert!(s.starts_with("r.md:11: unknown field `toosl`"), "{s}");
        let text = CODER.replace("model: null", "model: claude");
        let s = Role::parse(&text, "r.md", None).unwrap_err().to_string();
        assert!(s.starts_with("r.md:8: key `model.model`: "), "{s}");
        let text = CODER.replace("name: language", "name: lang-uage");
        let text = text.replace("{{language}}", "x");
        let s = Role::parse(&text, "r.md", None).unwrap_err().to_string();
        assert!(
            s.contains("key `variables`") && s.contains("lang-uage"),
            "{s}"
        );
        let text = CODER.replace("---\nYou", "---\n\n  \n");
        let text = text.replace(" write {{language}} in {{ style }} style.", "");
        let s = Role::parse(&text, "r.md", None).unwrap_err().to_string();
        assert!(s.contains("prompt is empty"), "{s}");
    }

    #[test]
    fn tool_and_skill_allowlists() {
        let mut r = Role::parse(CODER, "coder.md", None).unwrap();
        assert!(r.allows_tool("exec"));
        assert!(!r.allows_tool("write_file"));
        assert!(r.allows_skill("anything"));
        r.tools = None;
        assert!(r.allows_tool("write_file"));
        r.skills = vec!["git".into()];
        assert!(r.allows_skill("git") && !r.allows_skill("web"));
    }

    #[test]
    fn file_text_round_trips() {
        let r = Role::parse(CODER, "coder.md", None).unwrap();
        let back = Role::parse(&r.to_file_text(), "copy.md", Some("coder")).unwrap();
        assert_eq!(back, r);
        let json = serde_json::to_string(&r).unwrap();
        assert_eq!(serde_json::from_str::<Role>(&json).unwrap(), r);
    }
}
