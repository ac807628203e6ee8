//! The board's schema made true (seed 003 §3.1–3.3, DESIGN.md §17): the canonical sections
//! created when missing and put in order, sections the sync does not know kept (one warning
//! each), the custom fields created when missing (an existing field of the workspace with the
//! same name is reused, so a crash between creating a field and setting it on the project
//! never makes a second one) and set on the project, and the options Pegasus writes added to
//! an existing enum field that lacks them (its own options kept).

use crate::api::{Api, ApiError};
use crate::board::{moves, FieldKind, Section, FIELDS};
use serde_json::{json, Value};
use std::collections::{BTreeMap, HashSet};

/// A custom field on the board.
#[derive(Debug, Clone, Default)]
pub struct Field {
    /// Its gid.
    pub gid: String,
    /// Option name → gid (enum fields).
    pub options: BTreeMap<String, String>,
}

/// What the sync needs to know of a board.
#[derive(Debug, Clone, Default)]
pub struct Schema {
    /// The token's own user: its comments are not answers.
    pub me: String,
    /// Canonical section name → gid.
    pub sections: BTreeMap<&'static str, String>,
    /// Field name → field.
    pub fields: BTreeMap<&'static str, Field>,
}

impl Schema {
    /// The gid of a canonical section.
    pub fn section(&self, s: Section) -> Option<&str> {
        self.sections.get(s.name()).map(String::as_str)
    }

    /// The canonical section of a section gid.
    pub fn section_of(&self, gid: &str) -> Option<Section> {
        self.sections
            .iter()
            .find(|(_, g)| *g == gid)
            .and_then(|(n, _)| Section::of(n))
    }
}

const FIELD_OPTS: &str = "opt_fields=name,resource_subtype,enum_options.name";

/// Makes the board's sections and fields what seed 003 says; `warned` holds the unknown
/// sections already warned about (once each per daemon run).
pub async fn ensure(
    api: &Api,
    board: &str,
    project: &str,
    warned: &mut HashSet<String>,
) -> Result<Schema, ApiError> {
    let me = api.get("/users/me").await?["gid"]
        .as_str()
        .unwrap_or_default()
        .to_string();
    let workspace = api
        .get(&format!("/projects/{board}?opt_fields=workspace"))
        .await?["workspace"]["gid"]
        .as_str()
        .unwrap_or_default()
        .to_string();
    let mut schema = Schema {
        me,
        ..Schema::default()
    };

    // Sections: create the missing ones, then order.
    let listed = api
        .list(&format!("/projects/{board}/sections?opt_fields=name"))
        .await?;
    let mut order: Vec<String> = Vec::new();
    for s in &listed {
        let (Some(gid), Some(name)) = (s["gid"].as_str(), s["name"].as_str()) else {
            continue;
        };
        order.push(gid.to_string());
        match Section::of(name) {
            Some(c) if !schema.sections.contains_key(c.name()) => {
                schema.sections.insert(c.name(), gid.to_string());
            }
            Some(_) => {}
            None => {
                if warned.insert(format!("{board}/{gid}")) {
                    tracing::warn!(
                        project,
                        "asana: section `{name}` of board {board} is not one of Pegasus's (Drafts, Clarification Needed, Planning, Ready Queue, In Progress, Review, Merging, Done); it is kept, after them"
                    );
                }
            }
        }
    }
    for c in Section::CANONICAL {
        if schema.sections.contains_key(c.name()) {
            continue;
        }
        let made = api
            .post(
                &format!("/projects/{board}/sections"),
                json!({ "name": c.name() }),
            )
            .await?;
        let gid = made["gid"].as_str().unwrap_or_default().to_string();
        tracing::info!(
            project,
            "asana: section `{}` created on board {board}",
            c.name()
        );
        order.push(gid.clone());
        schema.sections.insert(c.name(), gid);
    }
    let want: Vec<String> = Section::CANONICAL
        .iter()
        .filter_map(|c| schema.sections.get(c.name()).cloned())
        .collect();
    for (section, after) in moves(&order, &want) {
        let data = match after {
            Some(a) => json!({"section": section, "after_section": a}),
            None => {
                json!({"section": section, "before_section": order.first().cloned().unwrap_or_default()})
            }
        };
        api.post(&format!("/projects/{board}/sections/insert"), data)
            .await?;
        // Keep the local order true for the next move's anchor.
        if let Some(i) = order.iter().position(|x| *x == section) {
            order.remove(i);
        }
        let at = match data_after(&want, &section) {
            Some(a) => order.iter().position(|x| *x == a).map_or(0, |i| i + 1),
            None => 0,
        };
        order.insert(at, section);
    }

    // Fields: those on the project, then the workspace's, then new ones.
    let on_board = api
        .list(&format!(
            "/projects/{board}/custom_field_settings?opt_fields=custom_field.name,custom_field.resource_subtype,custom_field.enum_options.name"
        ))
        .await?;
    let mut found: BTreeMap<String, Value> = on_board
        .into_iter()
        .filter_map(|s| {
            let f = s["custom_field"].clone();
            f["name"].as_str().map(|n| (n.to_string(), f.clone()))
        })
        .collect();
    let mut workspace_fields: Option<BTreeMap<String, Value>> = None;
    for spec in FIELDS {
        let field = match found.remove(spec.name) {
            Some(f) => f,
            None => {
                if workspace_fields.is_none() {
                    let all = api
                        .list(&format!(
                            "/workspaces/{workspace}/custom_fields?{FIELD_OPTS}"
                        ))
                        .await?;
                    workspace_fields = Some(
                        all.into_iter()
                            .filter_map(|f| f["name"].as_str().map(|n| (n.to_string(), f.clone())))
                            .collect(),
                    );
                }
                let existing = workspace_fields
                    .as_ref()
                    .and_then(|m| m.get(spec.name))
                    .cloned();
                let f = match existing {
                    Some(f) => f,
                    None => {
                        let mut data = json!({"workspace": workspace, "name": spec.name});
                        match spec.kind {
                            FieldKind::Enum(options) => {
                                data["resource_subtype"] = json!("enum");
                                data["enum_options"] = json!(options
                                    .iter()
                                    .map(|o| json!({ "name": o }))
                                    .collect::<Vec<_>>());
                            }
                            FieldKind::Text => data["resource_subtype"] = json!("text"),
                            FieldKind::Number(p) => {
                                data["resource_subtype"] = json!("number");
                                data["precision"] = json!(p);
                            }
                        }
                        let made = api
                            .post(&format!("/custom_fields?{FIELD_OPTS}"), data)
                            .await?;
                        tracing::info!(project, "asana: custom field `{}` created", spec.name);
                        made
                    }
                };
                let gid = f["gid"].as_str().unwrap_or_default();
                api.post(
                    &format!("/projects/{board}/addCustomFieldSetting"),
                    json!({"custom_field": gid, "is_important": true}),
                )
                .await?;
                f
            }
        };
        let mut options: BTreeMap<String, String> = field["enum_options"]
            .as_array()
            .map(|l| {
                l.iter()
                    .filter_map(|o| {
                        Some((
                            o["name"].as_str()?.to_string(),
                            o["gid"].as_str()?.to_string(),
                        ))
                    })
                    .collect()
            })
            .unwrap_or_default();
        let gid = field["gid"].as_str().unwrap_or_default().to_string();
        if let FieldKind::Enum(want) = spec.kind {
            let at = FieldAt {
                project,
                board,
                name: spec.name,
                gid: &gid,
            };
            add_options(api, &at, want, &mut options, warned).await?;
        }
        schema.fields.insert(spec.name, Field { gid, options });
    }
    Ok(schema)
}

/// Which enum field of which board [`add_options`] completes.
struct FieldAt<'a> {
    project: &'a str,
    board: &'a str,
    name: &'a str,
    gid: &'a str,
}

/// Adds to an existing enum field the options of `want` it lacks, each after the wanted option
/// before it (its other options kept, where they are), into `options`. A field Pegasus may not
/// change (403: locked by another user; any other refusal but a bad token) is warned about once
/// per daemon run; the sync then cannot show those values.
async fn add_options(
    api: &Api,
    at: &FieldAt<'_>,
    want: &[&str],
    options: &mut BTreeMap<String, String>,
    warned: &mut HashSet<String>,
) -> Result<(), ApiError> {
    let (project, name) = (at.project, at.name);
    let mut previous: Option<String> = None;
    for o in want {
        if let Some(g) = options.get(*o) {
            previous = Some(g.clone());
            continue;
        }
        let mut data = json!({ "name": o });
        if let Some(p) = &previous {
            data["insert_after"] = json!(p);
        }
        match api
            .post(&format!("/custom_fields/{}/enum_options", at.gid), data)
            .await
        {
            Ok(made) => {
                let made = made["gid"].as_str().unwrap_or_default().to_string();
                tracing::info!(
                    project,
                    "asana: option `{o}` added to custom field `{name}`"
                );
                options.insert(o.to_string(), made.clone());
                previous = Some(made);
            }
            // Refused (403: locked by another user; 400/404: the field changed meanwhile):
            // the board still syncs, without those values.
            Err(ApiError::Refused(status, why)) if status != 401 => {
                let missing: Vec<&str> = want
                    .iter()
                    .copied()
                    .filter(|m| !options.contains_key(*m))
                    .collect();
                let ask = if status == 403 {
                    "ask whoever locked the field to add them in Asana"
                } else {
                    "add them in Asana"
                };
                if warned.insert(format!("{}/{name}", at.board)) {
                    tracing::warn!(
                        project,
                        "asana: custom field `{name}` lacks the options {} and Pegasus may not add them (HTTP {status}: {why}); {ask}, or the sync cannot show those values",
                        missing.join(", ")
                    );
                }
                return Ok(());
            }
            Err(e) => return Err(e),
        }
    }
    Ok(())
}

/// The section `s` goes after in `want`, if any.
fn data_after(want: &[String], s: &str) -> Option<String> {
    let i = want.iter().position(|x| x == s)?;
    i.checked_sub(1).map(|j| want[j].clone())
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used)]
    use super::*;
    use crate::board::SWARM_STATUS;
    use pegasus_fakellm::FakeAsana;
    use tokio_util::sync::CancellationToken;

    /// The user's own enum field `name` with `options`, on the board.
    fn users_field(asana: &FakeAsana, name: &str, options: &[&str]) {
        let (_, me) = asana.as_user("GET", "/users/me?opt_fields=workspaces", None);
        let ws = me["data"]["workspaces"][0]["gid"].clone();
        let options: Vec<Value> = options.iter().map(|o| json!({ "name": o })).collect();
        let (s, f) = asana.as_user(
            "POST",
            "/custom_fields",
            Some(json!({"data": {"workspace": ws, "name": name, "resource_subtype": "enum", "enum_options": options}})),
        );
        assert_eq!(s, 200, "{f}");
        let (s, v) = asana.as_user(
            "POST",
            &format!("/projects/{}/addCustomFieldSetting", asana.project()),
            Some(json!({"data": {"custom_field": f["data"]["gid"]}})),
        );
        assert_eq!(s, 200, "{v}");
    }

    #[tokio::test]
    async fn an_enum_field_lacking_options_gets_them_and_a_locked_one_is_left() {
        let asana = FakeAsana::start("bot-token").unwrap();
        users_field(&asana, SWARM_STATUS, &["Blocked", "Idle", "Later"]);
        users_field(&asana, "Merge Approval", &["Manual Check"]);
        asana.lock_field("Merge Approval");
        let api = Api::new(
            &asana.base_url(),
            "bot-token".into(),
            "ASANA_PAT",
            CancellationToken::new(),
        )
        .unwrap();
        let mut warned = HashSet::new();
        let schema = ensure(&api, &asana.project(), "p", &mut warned)
            .await
            .unwrap();
        // Each missing option right after the wanted one before it (Running after Idle,
        // Complete after Blocked, wherever the user put those); the user's own kept, in place.
        assert_eq!(
            asana.field_options(SWARM_STATUS),
            ["Blocked", "Complete", "Idle", "Running", "Later"]
        );
        let status = &schema.fields[SWARM_STATUS];
        assert_eq!(
            status
                .options
                .keys()
                .map(String::as_str)
                .collect::<Vec<_>>(),
            ["Blocked", "Complete", "Idle", "Later", "Running"]
        );
        // Locked by the user: unchanged, warned about once, what it has still known.
        assert_eq!(asana.field_options("Merge Approval"), ["Manual Check"]);
        assert!(warned.contains(&format!("{}/Merge Approval", asana.project())));
        assert_eq!(schema.fields["Merge Approval"].options.len(), 1);
        // A second pass finds nothing to add: no option twice.
        let again = ensure(&api, &asana.project(), "p", &mut warned)
            .await
            .unwrap();
        assert_eq!(asana.field_options(SWARM_STATUS).len(), 5);
        assert_eq!(again.fields[SWARM_STATUS].options, status.options);
        let posts = asana
            .requests()
            .into_iter()
            .filter(|r| r.method == "POST" && r.target.contains("/enum_options"))
            .map(|r| r.status)
            .collect::<Vec<_>>();
        assert_eq!(posts, [201, 201, 403, 403]);
    }
}
