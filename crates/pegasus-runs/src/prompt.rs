//! Every text a run sends to a model or to the executor, in one place so they can be read (and
//! tuned) together.

use pegasus_proto::llm::{Block, CallMeta, ChatRequest, Message, Role};

use crate::run::{Phase, Run};

/// Output longer than this is cut before it goes to the summary and review calls, so one
/// verbose phase cannot blow the context window of the (cheap) summary model.
const OUTPUT_MAX_CHARS: usize = 60_000;

/// System prompt of the plan call.
pub const PLANNER_SYSTEM: &str = "You plan autonomous work. Split the brief into a short sequence \
of phases, each one a piece of work that can be done and checked on its own, in the order they \
must be done. Answer with JSON only, in exactly this shape: \
{\"phases\":[{\"title\":\"...\",\"description\":\"...\",\"acceptance\":[\"...\"]}]}. \
Each acceptance item is one concrete criterion a reviewer can check from the phase's output.";

/// System prompt of the summary call.
pub const SUMMARY_SYSTEM: &str = "You summarise one phase of an autonomous run for the phases \
that follow it. In at most five sentences of plain text, say what was done, what was decided \
and what exists now (files, names, results). No preamble.";

/// System prompt of the review call. The first-line rule is stated plainly because anything
/// else is read as a rejection ([`crate::verdict`]).
pub const REVIEW_SYSTEM: &str = "You review one phase of an autonomous run against its \
acceptance criteria, strictly. Your FIRST LINE must be exactly `APPROVED` if every criterion \
is met, or `REJECTED: <reason>` naming what is missing or wrong, on one line. Any other first \
line counts as a rejection. You may add details on the following lines.";

/// The user message of the plan call.
pub fn plan_user(brief: &str) -> String {
    format!("Brief:\n{brief}")
}

/// What the executor is asked to do for one attempt of a phase: the brief, the phase, the
/// summaries of the phases already approved (the executor has no other memory of them) and,
/// on a retry, why the previous attempt was rejected.
pub fn phase_prompt(run: &Run, phase: &Phase) -> String {
    let mut out = format!(
        "You are working on phase {} of {} of an autonomous run.\n\nBrief:\n{}\n",
        phase.number,
        run.phases.len(),
        run.brief.trim()
    );
    let done: Vec<&Phase> = run
        .phases
        .iter()
        .filter(|p| p.number < phase.number && p.status == crate::PhaseStatus::Completed)
        .collect();
    if !done.is_empty() {
        out.push_str("\nCompleted phases so far:\n");
        for p in done {
            out.push_str(&format!(
                "- Phase {}: {}\n  {}\n",
                p.number,
                p.title,
                p.summary.as_deref().unwrap_or("(no summary)").trim()
            ));
        }
    }
    out.push_str(&format!(
        "\nThis phase: {}. {}\n{}\n",
        phase.number,
        phase.title,
        phase.description.trim()
    ));
    out.push_str(&acceptance_list(phase));
    if phase.attempt > 1 {
        if let Some(feedback) = &phase.feedback {
            out.push_str(&format!(
                "\nThis is attempt {} of {}. The previous attempt was rejected: {feedback}\n",
                phase.attempt, run.max_attempts
            ));
            if let Some(details) = review_details(phase) {
                out.push_str(&format!("Reviewer's notes:\n{details}\n"));
            }
            out.push_str("Fix what the reviewer found.\n");
        }
    }
    out.push_str("\nDo the work of this phase now, then end with a short report of what you did.");
    out
}

/// The user message of the summary call.
pub fn summary_user(phase: &Phase, output: &str) -> String {
    format!(
        "Phase {}: {}\n\nOutput of the phase:\n{}",
        phase.number,
        phase.title,
        clip(output)
    )
}

/// The user message of the review call.
pub fn review_user(run: &Run, phase: &Phase, output: &str) -> String {
    format!(
        "Brief of the run:\n{}\n\nPhase {}: {}\n{}\n{}\nOutput of the phase:\n{}",
        run.brief.trim(),
        phase.number,
        phase.title,
        phase.description.trim(),
        acceptance_list(phase),
        clip(output)
    )
}

/// The fallback summary when the summary call fails: the output's first 500 characters.
pub fn fallback_summary(output: &str) -> String {
    output.trim().chars().take(500).collect()
}

fn acceptance_list(phase: &Phase) -> String {
    if phase.acceptance.is_empty() {
        return "\nAcceptance criteria: the description above is done.\n".into();
    }
    let mut out = String::from("\nAcceptance criteria:\n");
    for a in &phase.acceptance {
        out.push_str(&format!("- {}\n", a.trim()));
    }
    out
}

/// The lines of the last review after its verdict line, if any.
fn review_details(phase: &Phase) -> Option<String> {
    let review = phase.review.as_deref()?;
    let rest: Vec<&str> = review.lines().skip(1).collect();
    let rest = rest.join("\n");
    let rest = rest.trim();
    (!rest.is_empty()).then(|| clip(rest).to_string())
}

fn clip(text: &str) -> &str {
    match text.char_indices().nth(OUTPUT_MAX_CHARS) {
        Some((i, _)) => &text[..i],
        None => text,
    }
}

/// A one-shot call with no tools; `task` goes into the meta so the ledger line is attributed.
pub(crate) fn chat_request(
    model: &str,
    system: &str,
    user: String,
    max_tokens: u32,
    project: &str,
    task: String,
    role: &str,
) -> ChatRequest {
    ChatRequest {
        model: model.to_string(),
        system: system.to_string(),
        messages: vec![Message {
            role: Role::User,
            content: vec![Block::Text { text: user }],
        }],
        tools: Vec::new(),
        max_tokens,
        temperature: None,
        thinking: None,
        timeout_s: None,
        stream: false,
        meta: CallMeta {
            project: Some(project.to_string()),
            task: Some(task),
            role: Some(role.to_string()),
        },
    }
}
