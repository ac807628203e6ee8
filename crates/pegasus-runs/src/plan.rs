//! Reading the planner's answer into phases.
//!
//! Models wrap JSON in ```json fences or add a sentence around it; both are tolerated. What is
//! not tolerated is a plan that says nothing: no phases, or a phase with no title, fails the
//! run ("the plan could not be read: ...") instead of running an empty or invented plan.

use serde::{Deserialize, Serialize};

/// One phase as the planner proposed it; the engine numbers them 1..n in this order.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct PlannedPhase {
    /// Short name.
    pub title: String,
    /// What to do.
    #[serde(default)]
    pub description: String,
    /// What the reviewer checks.
    #[serde(default)]
    pub acceptance: Vec<String>,
}

#[derive(Deserialize)]
struct PlanDoc {
    phases: Vec<PlannedPhase>,
}

/// The phases of a planner answer `{"phases":[{"title","description","acceptance":[..]}]}`, or
/// why it cannot be used (one line).
pub fn parse_plan(text: &str) -> Result<Vec<PlannedPhase>, String> {
    let json = json_part(text);
    let doc: PlanDoc = serde_json::from_str(json).map_err(|e| {
        format!("expected {{\"phases\":[{{\"title\",\"description\",\"acceptance\":[..]}}]}} ({e})")
    })?;
    if doc.phases.is_empty() {
        return Err("the plan has no phases".into());
    }
    let mut phases = Vec::with_capacity(doc.phases.len());
    for (i, mut p) in doc.phases.into_iter().enumerate() {
        p.title = p.title.trim().to_string();
        if p.title.is_empty() {
            return Err(format!("phase {} has no title", i + 1));
        }
        p.acceptance.retain(|a| !a.trim().is_empty());
        phases.push(p);
    }
    Ok(phases)
}

/// The JSON inside a model's answer: the body of the first fenced block if there is one, else
/// the span from the first `{` to the last `}`, else the text itself (and the parser says why
/// not). Also how a code task's planner answer is read (`pegasus-worker`).
pub fn json_part(text: &str) -> &str {
    let text = text.trim();
    if let Some(start) = text.find("```") {
        let after = &text[start + 3..];
        // Skip the info string (`json`) up to the end of the fence line.
        let body_start = after.find('\n').map(|i| i + 1).unwrap_or(after.len());
        let body = &after[body_start..];
        let body = match body.find("```") {
            Some(end) => &body[..end],
            None => body,
        };
        return body.trim();
    }
    match (text.find('{'), text.rfind('}')) {
        (Some(a), Some(b)) if a < b => &text[a..=b],
        _ => text,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const PLAN: &str = r#"{"phases":[{"title":"One","description":"do one","acceptance":["a","b"]},{"title":"Two","description":"do two","acceptance":["c"]}]}"#;

    #[test]
    fn plain_json_plan_is_read_in_order() {
        let phases = parse_plan(PLAN).unwrap_or_default();
        assert_eq!(phases.len(), 2);
        assert_eq!(phases[0].title, "One");
        assert_eq!(phases[0].acceptance, vec!["a", "b"]);
        assert_eq!(phases[1].title, "Two");
    }

    #[test]
    fn fenced_plan_with_prose_is_read() {
        let text = format!("Here is the plan:\n```json\n{PLAN}\n```\nGood luck.");
        assert_eq!(parse_plan(&text).map(|p| p.len()), Ok(2));
        let text = format!("```\n{PLAN}\n```");
        assert_eq!(parse_plan(&text).map(|p| p.len()), Ok(2));
        let text = format!("Sure! {PLAN} Anything else?");
        assert_eq!(parse_plan(&text).map(|p| p.len()), Ok(2));
    }

    #[test]
    fn empty_or_garbage_plans_are_refused() {
        assert_eq!(
            parse_plan(r#"{"phases":[]}"#),
            Err("the plan has no phases".to_string())
        );
        assert!(parse_plan("I cannot plan this").is_err());
        assert!(parse_plan("").is_err());
        assert!(parse_plan(r#"{"steps":[{"title":"x"}]}"#).is_err());
        assert_eq!(
            parse_plan(r#"{"phases":[{"title":"  ","description":"x"}]}"#),
            Err("phase 1 has no title".to_string())
        );
    }

    #[test]
    fn error_is_one_line() {
        let e = parse_plan("{\n\"phases\": 3\n}").err().unwrap_or_default();
        assert!(!e.contains('\n'), "{e}");
    }
}
