//! The sync of one board (DESIGN.md §17): each tick reads the board's events since the saved
//! sync token (a missing or expired token, 412, is a full re-sync), takes every task that is in
//! Ready Queue and not yet a Pegasus task, answers a blocked task's question with the user's
//! next comment, asks for a verified code task's merge when Merge Approval allows it, and
//! writes each Pegasus task's state back (section, Swarm Status, Agent, Cost, comments).
//!
//! Nothing is done twice across a crash: a task's making is recorded before it is asked for
//! (and found again afterwards, see [`Board::adopt`]), every comment is looked for on the task
//! before it is posted, and the sync token is saved only after its events were handled, so a
//! crash repeats handling (which finds everything already done) rather than losing it.

use crate::api::{Api, ApiError};
use crate::board::{
    self, look, Section, AGENT, COST, MAX_COST, MERGE_APPROVAL, SESSION_ID, SWARM_STATUS,
    WORKTREE_PATH,
};
use crate::rich;
use crate::schema::{self, Schema};
use crate::state::{self, BoardState};
use pegasus_proto::ctl::{AddTask, CtlRequest, CtlResponse, TaskVerb};
use pegasus_proto::Channel;
use pegasus_supervisor::FrontDoor;
use pegasus_tasks::{MergeState, Task, TaskState, TaskStore};
use serde_json::{json, Map, Value};
use std::collections::{BTreeSet, HashSet};
use std::path::PathBuf;

/// Words a summary comment keeps (seed 003 §4.4: "under 50 words").
const SUMMARY_WORDS: usize = 50;

const TASK_FIELDS: &str = "opt_fields=name,html_notes,completed,memberships.project.name,memberships.section.name,custom_fields.name,custom_fields.number_value,custom_fields.enum_value.name,dependencies";

/// Why a tick stopped.
#[derive(Debug, thiserror::Error)]
pub enum SyncError {
    /// Asana refused or failed.
    #[error(transparent)]
    Api(#[from] ApiError),
    /// The board's file, or a Pegasus task, could not be read or written.
    #[error("{0}")]
    Local(String),
}

impl From<pegasus_tasks::TaskError> for SyncError {
    fn from(e: pegasus_tasks::TaskError) -> Self {
        SyncError::Local(e.to_string())
    }
}

/// An Asana task as the sync reads it.
#[derive(Debug, Clone, Default)]
struct Card {
    gid: String,
    name: String,
    html_notes: String,
    section: Option<String>,
    max_cost: Option<f64>,
    merge_approval: Option<String>,
    deps: Vec<String>,
}

/// One project's board.
pub struct Board {
    /// The Pegasus project.
    pub project: String,
    /// The Asana project's gid.
    pub gid: String,
    file: PathBuf,
    state: BoardState,
    schema: Option<Schema>,
}

impl Board {
    /// The board of `project`, its memory loaded from `<home>/asana/<project>.json`.
    pub fn open(door: &FrontDoor, project: &str, gid: &str) -> Result<Board, String> {
        let file = state::path(door.home().root(), project);
        let mut st = state::load(&file)?;
        if st.project != gid {
            if !st.project.is_empty() {
                tracing::warn!(
                    project,
                    "asana: the board changed from {} to {gid}: starting over with the new one",
                    st.project
                );
            }
            st = BoardState {
                project: gid.to_string(),
                ..BoardState::default()
            };
        }
        Ok(Board {
            project: project.to_string(),
            gid: gid.to_string(),
            file,
            state: st,
            schema: None,
        })
    }

    fn save(&self) -> Result<(), SyncError> {
        state::save(&self.file, &self.state).map_err(SyncError::Local)
    }

    /// One pass over the board.
    pub async fn tick(
        &mut self,
        api: &Api,
        door: &FrontDoor,
        warned: &mut HashSet<String>,
    ) -> Result<(), SyncError> {
        if self.schema.is_none() {
            self.schema = Some(schema::ensure(api, &self.gid, &self.project, warned).await?);
        }
        let (touched, token) = self.events(api).await?;
        let mut look_at: BTreeSet<String> = touched;
        look_at.extend(self.state.waiting.iter().cloned());
        for gid in look_at {
            let unlinked = self.state.tasks.get(&gid).is_none_or(|l| l.task.is_none());
            let card = match self.card(api, &gid).await {
                Ok(c) => c,
                // A task deleted or moved out of the project: nothing to take.
                Err(ApiError::Refused(404 | 403, _)) => {
                    self.state.waiting.remove(&gid);
                    continue;
                }
                Err(e) => return Err(e.into()),
            };
            if unlinked {
                self.intake(api, door, &card, warned).await?;
            } else {
                self.reentered(door, &card).await?;
                self.answer(api, door, &card).await?;
            }
        }
        let linked: Vec<String> = self
            .state
            .tasks
            .iter()
            .filter(|(_, l)| l.task.is_some() && !l.finished)
            .map(|(g, _)| g.clone())
            .collect();
        for gid in linked {
            self.write_back(api, door, &gid).await?;
        }
        if let Some(token) = token {
            self.state.sync = Some(token);
            self.save()?;
        }
        Ok(())
    }

    /// The tasks the events since the saved token touched, and the token to save once they
    /// are handled; every task in the project (a full re-sync) when the token is missing or
    /// expired.
    async fn events(&mut self, api: &Api) -> Result<(BTreeSet<String>, Option<String>), SyncError> {
        let mut touched = BTreeSet::new();
        let mut token = self.state.sync.clone();
        loop {
            let path = match &token {
                Some(t) => format!("/events?resource={}&sync={t}", self.gid),
                None => format!("/events?resource={}", self.gid),
            };
            match api.call(reqwest::Method::GET, &path, None).await {
                Ok(v) => {
                    for e in v["data"].as_array().into_iter().flatten() {
                        let r = &e["resource"];
                        let gid = match r["resource_type"].as_str() {
                            Some("task") => r["gid"].as_str(),
                            Some("story") => e["parent"]["gid"].as_str(),
                            _ => None,
                        };
                        if let Some(g) = gid {
                            touched.insert(g.to_string());
                        }
                    }
                    token = v["sync"].as_str().map(str::to_string).or(token);
                    if v["has_more"].as_bool() != Some(true) {
                        return Ok((touched, token));
                    }
                }
                Err(ApiError::SyncExpired(fresh)) => {
                    tracing::info!(project = %self.project, "asana: no usable sync token for board {}: reading the whole board", self.gid);
                    let all = api
                        .list(&format!("/projects/{}/tasks?opt_fields=name", self.gid))
                        .await?;
                    touched.extend(
                        all.iter()
                            .filter_map(|t| t["gid"].as_str().map(str::to_string)),
                    );
                    touched.extend(self.state.tasks.keys().cloned());
                    return Ok((touched, Some(fresh)));
                }
                Err(e) => return Err(e.into()),
            }
        }
    }

    /// Reads one Asana task.
    async fn card(&self, api: &Api, gid: &str) -> Result<Card, ApiError> {
        let v = api.get(&format!("/tasks/{gid}?{TASK_FIELDS}")).await?;
        let section = v["memberships"]
            .as_array()
            .into_iter()
            .flatten()
            .find(|m| m["project"]["gid"].as_str() == Some(self.gid.as_str()))
            .and_then(|m| m["section"]["gid"].as_str())
            .map(str::to_string);
        let field = |name: &str| {
            v["custom_fields"]
                .as_array()
                .into_iter()
                .flatten()
                .find(|f| f["name"].as_str() == Some(name))
                .cloned()
                .unwrap_or(Value::Null)
        };
        Ok(Card {
            gid: gid.to_string(),
            name: v["name"].as_str().unwrap_or_default().to_string(),
            html_notes: v["html_notes"].as_str().unwrap_or_default().to_string(),
            section,
            max_cost: field(MAX_COST)["number_value"].as_f64(),
            merge_approval: field(MERGE_APPROVAL)["enum_value"]["name"]
                .as_str()
                .map(str::to_string),
            deps: v["dependencies"]
                .as_array()
                .into_iter()
                .flatten()
                .filter_map(|d| d["gid"].as_str().map(str::to_string))
                .collect(),
        })
    }

    fn schema(&self) -> Result<&Schema, SyncError> {
        self.schema
            .as_ref()
            .ok_or_else(|| SyncError::Local("the board's schema is not known yet".into()))
    }

    /// A task not yet taken: in Ready Queue, with its dependencies Pegasus tasks or completed,
    /// it becomes a Pegasus task; with a dependency not yet taken, it waits (said once).
    async fn intake(
        &mut self,
        api: &Api,
        door: &FrontDoor,
        card: &Card,
        warned: &mut HashSet<String>,
    ) -> Result<(), SyncError> {
        let ready = self
            .schema()?
            .section(Section::ReadyQueue)
            .map(str::to_string);
        if card.section.is_none() || card.section != ready {
            self.state.waiting.remove(&card.gid);
            return Ok(());
        }
        let mut depends_on = Vec::new();
        for d in &card.deps {
            match self.state.tasks.get(d).and_then(|l| l.task.clone()) {
                Some(id) => depends_on.push(id),
                None => {
                    let dep = api
                        .get(&format!("/tasks/{d}?opt_fields=name,completed"))
                        .await?;
                    if dep["completed"].as_bool() == Some(true) {
                        continue;
                    }
                    if self.state.waiting.insert(card.gid.clone()) {
                        self.save()?;
                    }
                    if warned.insert(format!("wait/{}/{d}", card.gid)) {
                        tracing::info!(project = %self.project, "asana: skipped `{}`: blocked by `{}`, which is not a Pegasus task yet (move it to Ready Queue, or complete it)", card.name, dep["name"].as_str().unwrap_or(d));
                    }
                    return Ok(());
                }
            }
        }
        let goal = match rich::to_markdown(&card.html_notes) {
            g if g.trim().is_empty() => card.name.clone(),
            g => g,
        };
        // Recorded before the request: a crash after it finds the task instead of making another.
        let link = self.state.tasks.entry(card.gid.clone()).or_default();
        if link.since.is_none() {
            // Whole seconds back, so a task made in the same second is found.
            link.since = Some(chrono::Utc::now() - chrono::Duration::seconds(1));
            self.save()?;
        }
        let id = match self.adopt(door, card, &goal)? {
            Some(id) => id,
            None => {
                let dir = door.home().project_dir(&self.project);
                // Only the repos' ids: the task add freezes the spec, which reads their commits.
                let repos = pegasus_store::ProjectFile::load(&dir)
                    .ok()
                    .and_then(|f| {
                        pegasus_tasks::repo_paths(&f, &dir, pegasus_code::git::repo_rev).ok()
                    })
                    .map(|r| r.into_iter().map(|(id, _, _)| id).collect())
                    .unwrap_or_default();
                let add = AddTask {
                    project: self.project.clone(),
                    goal,
                    title: Some(card.name.clone()),
                    repos,
                    depends_on,
                    priority: 2,
                    budget_usd: Some(card.max_cost.unwrap_or(board::DEFAULT_MAX_COST)),
                    ..AddTask::default()
                };
                match door
                    .request(&Channel::Asana, CtlRequest::TaskAdd(add))
                    .await
                {
                    CtlResponse::TaskAdded { id, .. } => id,
                    other => {
                        let why = pegasus_supervisor::front_door::refusal(other);
                        if warned.insert(format!("add/{}/{why}", card.gid)) {
                            tracing::warn!(project = %self.project, "asana: `{}` cannot become a task: {why}", card.name);
                        }
                        return Ok(());
                    }
                }
            }
        };
        tracing::info!(project = %self.project, task = %id, "asana: `{}` taken from Ready Queue", card.name);
        self.state.waiting.remove(&card.gid);
        let link = self.state.tasks.entry(card.gid.clone()).or_default();
        link.task = Some(id);
        self.save()
    }

    /// The Pegasus task a crash left unlinked (see [`made_from`]).
    fn adopt(
        &self,
        door: &FrontDoor,
        card: &Card,
        goal: &str,
    ) -> Result<Option<String>, SyncError> {
        let Some(since) = self.state.tasks.get(&card.gid).and_then(|l| l.since) else {
            return Ok(None);
        };
        let linked: HashSet<&str> = self
            .state
            .tasks
            .values()
            .filter_map(|l| l.task.as_deref())
            .collect();
        let store = TaskStore::open(&door.home().project_dir(&self.project), &self.project)?;
        Ok(made_from(&store.list()?, &card.name, goal, since, &linked))
    }

    /// A linked task the user moved back to Ready Queue after it failed is retried.
    async fn reentered(&mut self, door: &FrontDoor, card: &Card) -> Result<(), SyncError> {
        let ready = self
            .schema()?
            .section(Section::ReadyQueue)
            .map(str::to_string);
        let Some(link) = self.state.tasks.get(&card.gid) else {
            return Ok(());
        };
        let Some(id) = link.task.clone() else {
            return Ok(());
        };
        if card.section != ready
            || link
                .shown
                .as_deref()
                .is_some_and(|s| s.starts_with("Ready Queue/"))
        {
            return Ok(());
        }
        let task = self.task(door, &id)?;
        if task.state != TaskState::Failed {
            return Ok(());
        }
        match door
            .request(
                &Channel::Asana,
                CtlRequest::TaskVerb {
                    id: id.clone(),
                    verb: TaskVerb::Retry,
                },
            )
            .await
        {
            CtlResponse::Done { .. } => {
                tracing::info!(project = %self.project, task = %id, "asana: `{}` moved back to Ready Queue: retried", card.name);
                if let Some(l) = self.state.tasks.get_mut(&card.gid) {
                    l.failure = None;
                    l.summarized = false;
                }
                self.save()
            }
            other => {
                tracing::warn!(project = %self.project, task = %id, "asana: cannot retry: {}", pegasus_supervisor::front_door::refusal(other));
                Ok(())
            }
        }
    }

    /// A blocked task's question is answered by the user's first comment after it.
    async fn answer(&mut self, api: &Api, door: &FrontDoor, card: &Card) -> Result<(), SyncError> {
        let Some(link) = self.state.tasks.get(&card.gid) else {
            return Ok(());
        };
        let (Some(id), Some(asked)) = (link.task.clone(), link.asked_story.clone()) else {
            return Ok(());
        };
        let task = self.task(door, &id)?;
        if task.state != TaskState::Blocked || task.question.is_none() {
            return Ok(());
        }
        let me = self.schema()?.me.clone();
        let stories = api
            .list(&format!(
                "/tasks/{}/stories?opt_fields=created_by,html_text,resource_subtype",
                card.gid
            ))
            .await?;
        let after = stories
            .iter()
            .skip_while(|s| s["gid"].as_str() != Some(asked.as_str()))
            .skip(1)
            .find(|s| {
                s["resource_subtype"].as_str() == Some("comment_added")
                    && s["created_by"]["gid"].as_str() != Some(me.as_str())
            });
        let Some(reply) = after else {
            return Ok(());
        };
        let text = rich::to_markdown(reply["html_text"].as_str().unwrap_or_default());
        match door
            .request(
                &Channel::Asana,
                CtlRequest::TaskAnswer {
                    id: id.clone(),
                    text,
                },
            )
            .await
        {
            CtlResponse::Done { .. } => {
                tracing::info!(project = %self.project, task = %id, "asana: question answered by a comment");
                if let Some(l) = self.state.tasks.get_mut(&card.gid) {
                    l.asked_story = None;
                    l.asked = None;
                }
                self.save()
            }
            other => {
                tracing::warn!(project = %self.project, task = %id, "asana: the answer was not taken: {}", pegasus_supervisor::front_door::refusal(other));
                Ok(())
            }
        }
    }

    fn task(&self, door: &FrontDoor, id: &str) -> Result<Task, SyncError> {
        let store = TaskStore::open(&door.home().project_dir(&self.project), &self.project)?;
        Ok(store.get(id)?)
    }

    /// Writes a linked Pegasus task's state back to its card.
    async fn write_back(
        &mut self,
        api: &Api,
        door: &FrontDoor,
        gid: &str,
    ) -> Result<(), SyncError> {
        let Some(link) = self.state.tasks.get(gid).cloned() else {
            return Ok(());
        };
        let Some(id) = link.task.clone() else {
            return Ok(());
        };
        let task = match self.task(door, &id) {
            Ok(t) => t,
            Err(e) => {
                tracing::warn!(project = %self.project, task = %id, "asana: cannot read the task: {e}");
                return Ok(());
            }
        };
        // A verified code task's merge waits for Merge Approval.
        let pending = task.state == TaskState::Verified && task.merge == Some(MergeState::Pending);
        let mut held = false;
        if pending && !link.merge_asked {
            let card = self.card(api, gid).await?;
            let approval = card.merge_approval.as_deref().unwrap_or("Auto-Approve");
            if approval == "Manual Check" {
                held = true;
            } else {
                match door
                    .request(
                        &Channel::Asana,
                        CtlRequest::TaskVerb {
                            id: id.clone(),
                            verb: TaskVerb::Merge,
                        },
                    )
                    .await
                {
                    CtlResponse::Done { .. } => {
                        tracing::info!(project = %self.project, task = %id, "asana: merge asked (Merge Approval {approval})");
                        if let Some(l) = self.state.tasks.get_mut(gid) {
                            l.merge_asked = true;
                        }
                        self.save()?;
                    }
                    other => {
                        tracing::warn!(project = %self.project, task = %id, "asana: merge not asked: {}", pegasus_supervisor::front_door::refusal(other))
                    }
                }
            }
        }
        let schema = self.schema()?.clone();
        let l = look(task.state, task.question.is_some(), held);
        let key = format!("{}/{}/{}", l.section.name(), l.status, l.agent);
        let cost = task.cost_usd.map(|c| (c * 100.0).round() / 100.0);
        let mut fields = Map::new();
        if link.shown.as_deref() != Some(key.as_str()) {
            let old = link.shown.as_deref().and_then(|s| s.split('/').next());
            if old != Some(l.section.name()) {
                if let Some(s) = schema.section(l.section) {
                    api.post(&format!("/sections/{s}/addTask"), json!({ "task": gid }))
                        .await?;
                }
            }
            for (name, value) in [(SWARM_STATUS, l.status), (AGENT, l.agent)] {
                if let Some(f) = schema.fields.get(name) {
                    if let Some(o) = f.options.get(value) {
                        fields.insert(f.gid.clone(), json!(o));
                    }
                }
            }
            // The task's id (its transcript and events: `pegasusctl task show ID`), and where a
            // code task works while it has a worktree.
            if let Some(f) = schema.fields.get(SESSION_ID) {
                fields.insert(f.gid.clone(), json!(id));
            }
            if let Some(f) = schema.fields.get(WORKTREE_PATH) {
                fields.insert(f.gid.clone(), json!(self.worktree(door, &task)));
            }
        }
        if cost.is_some() && cost != link.cost {
            if let Some(f) = schema.fields.get(COST) {
                fields.insert(f.gid.clone(), json!(cost));
            }
        }
        if !fields.is_empty() {
            api.put(
                &format!("/tasks/{gid}?opt_fields=name"),
                json!({ "custom_fields": fields }),
            )
            .await?;
        }
        if let Some(l2) = self.state.tasks.get_mut(gid) {
            l2.shown = Some(key);
            if cost.is_some() {
                l2.cost = cost;
            }
        }
        self.save()?;

        let dashboard = dashboard_link(door, &self.project);
        match (task.state, &task.question) {
            (TaskState::Blocked, Some(q)) if link.asked.as_deref() != Some(q.as_str()) => {
                let md = template(
                    "Worker",
                    "❓",
                    q,
                    &[
                        format!("Task: `{id}`"),
                        "Answer with a comment on this task.".into(),
                    ],
                    &dashboard,
                );
                let story = self.comment(api, gid, &md).await?;
                if let Some(l2) = self.state.tasks.get_mut(gid) {
                    l2.asked = Some(q.clone());
                    l2.asked_story = Some(story);
                }
                self.save()?;
            }
            (TaskState::Failed, _) => {
                let why = task.stop_reason.clone().unwrap_or_else(|| "failed".into());
                if link.failure.as_deref() != Some(why.as_str()) {
                    let md = template(
                        "Worker",
                        "❌",
                        &format!("Failed: {why}."),
                        &[
                            format!("Task: `{id}`"),
                            cost_line(cost),
                            "Move it back to Ready Queue to try again.".into(),
                        ],
                        &dashboard,
                    );
                    self.comment(api, gid, &md).await?;
                    if let Some(l2) = self.state.tasks.get_mut(gid) {
                        l2.failure = Some(why);
                    }
                    self.save()?;
                }
            }
            (TaskState::Done, _) if !link.summarized => {
                let summary = words(
                    task.result_summary.as_deref().unwrap_or("Done."),
                    SUMMARY_WORDS,
                );
                let mut details = vec![format!("Task: `{id}`"), cost_line(cost)];
                for f in task.files_changed.iter().take(5) {
                    details.push(format!("Changed file: `{f}`"));
                }
                let md = template("Worker", "✅", &summary, &details, &dashboard);
                self.comment(api, gid, &md).await?;
                if let Some(l2) = self.state.tasks.get_mut(gid) {
                    l2.summarized = true;
                    l2.finished = true;
                }
                self.save()?;
            }
            (TaskState::Cancelled, _) => {
                if let Some(l2) = self.state.tasks.get_mut(gid) {
                    l2.finished = true;
                }
                self.save()?;
            }
            _ => {}
        }
        Ok(())
    }

    /// The first repo's worktree of a code task while it has one (running to verified).
    fn worktree(&self, door: &FrontDoor, task: &Task) -> Option<String> {
        let live = matches!(
            task.state,
            TaskState::Running | TaskState::Verifying | TaskState::Verified | TaskState::Blocked
        );
        let repo = task.spec.as_ref()?.repos.first().filter(|_| live)?;
        let dir = door.home().project_dir(&self.project);
        let root = pegasus_tasks::snapshot::resolve(&dir, &repo.path);
        Some(
            pegasus_code::repo::task_worktree_in(&root, &task.id)
                .display()
                .to_string(),
        )
    }

    /// Posts a comment once: one already on the task by the sync with the same text (a crash
    /// after posting it) is taken instead. Returns the story's gid.
    async fn comment(&self, api: &Api, gid: &str, markdown: &str) -> Result<String, SyncError> {
        let html = rich::to_asana_html(markdown);
        let me = self.schema()?.me.clone();
        let stories = api
            .list(&format!(
                "/tasks/{gid}/stories?opt_fields=created_by,html_text,resource_subtype"
            ))
            .await?;
        if let Some(s) = stories.iter().find(|s| {
            s["created_by"]["gid"].as_str() == Some(me.as_str())
                && s["html_text"].as_str() == Some(html.as_str())
        }) {
            return Ok(s["gid"].as_str().unwrap_or_default().to_string());
        }
        let s = api
            .post(
                &format!("/tasks/{gid}/stories?opt_fields=created_at"),
                json!({ "html_text": html }),
            )
            .await?;
        Ok(s["gid"].as_str().unwrap_or_default().to_string())
    }
}

/// The task the sync made from a card before a crash kept it from recording so: the card's
/// title and goal, made since the making began, linked to no other card.
fn made_from(
    tasks: &[Task],
    title: &str,
    goal: &str,
    since: chrono::DateTime<chrono::Utc>,
    linked: &HashSet<&str>,
) -> Option<String> {
    tasks
        .iter()
        .find(|t| {
            t.title == title
                && t.spec.as_ref().is_some_and(|s| s.goal == goal)
                && t.created >= since
                && !linked.contains(t.id.as_str())
        })
        .map(|t| t.id.clone())
}

/// A comment in seed 003 §4.4's template, as Markdown.
fn template(
    agent: &str,
    emoji: &str,
    summary: &str,
    details: &[String],
    link: &Option<String>,
) -> String {
    let mut md = format!("**[{agent}]** {emoji}\n{summary}\n\n**Critical Details:**\n\n");
    for d in details {
        md.push_str(&format!("* {d}\n"));
    }
    if let Some(url) = link {
        md.push_str(&format!("\n🔗 [View Session Log]({url})\n"));
    }
    md
}

fn cost_line(cost: Option<f64>) -> String {
    format!("Cost: ${:.2}", cost.unwrap_or(0.0))
}

/// The first `n` words of `text`, with `…` when cut.
fn words(text: &str, n: usize) -> String {
    let all: Vec<&str> = text.split_whitespace().collect();
    if all.len() <= n {
        return all.join(" ");
    }
    format!("{}…", all[..n].join(" "))
}

/// The dashboard's page of the project: `dashboard.public_url`, else the address it listens on.
fn dashboard_link(door: &FrontDoor, project: &str) -> Option<String> {
    let cfg = &door.config().dashboard;
    if !cfg.enabled {
        return None;
    }
    let origin = match &cfg.public_url {
        Some(u) => u.trim_end_matches('/').to_string(),
        None => {
            let addr =
                pegasus_store::read_text_limited(&door.home().dashboard_addr_file(), 256).ok()?;
            format!("http://{}", addr.trim())
        }
    };
    Some(format!("{origin}/projects/{project}"))
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used)]
    use super::*;

    #[test]
    fn a_task_made_before_a_crash_is_found_and_no_other() {
        let dir = tempfile::tempdir().unwrap();
        let store = TaskStore::open(dir.path(), "p").unwrap();
        let spec = |goal: &str| pegasus_tasks::TaskSpec {
            goal: goal.into(),
            constraints: vec![],
            acceptance: vec![],
            role: None,
            model_policy: None,
            repos: vec![],
            budget_usd: Some(1.0),
        };
        let new = |title: &str| pegasus_tasks::NewTask {
            title: title.into(),
            ..Default::default()
        };
        let since = chrono::Utc::now() - chrono::Duration::seconds(1);
        let a = store
            .create_frozen(new("Mow"), spec("mow it"), TaskState::Ready, "asana", "r")
            .unwrap();
        let b = store
            .create_frozen(new("Mow"), spec("mow it"), TaskState::Ready, "asana", "r")
            .unwrap();
        let all = store.list().unwrap();
        let none = HashSet::new();
        let found = made_from(&all, "Mow", "mow it", since, &none).unwrap();
        assert!(found == a.id || found == b.id);
        // Linked to another card: the other one; both linked: none.
        let one: HashSet<&str> = [a.id.as_str()].into();
        assert_eq!(
            made_from(&all, "Mow", "mow it", since, &one),
            Some(b.id.clone())
        );
        let both: HashSet<&str> = [a.id.as_str(), b.id.as_str()].into();
        assert_eq!(made_from(&all, "Mow", "mow it", since, &both), None);
        // Another goal, another title, or made before the making began: not it.
        assert_eq!(made_from(&all, "Mow", "rake", since, &none), None);
        assert_eq!(made_from(&all, "Rake", "mow it", since, &none), None);
        let later = chrono::Utc::now() + chrono::Duration::seconds(5);
        assert_eq!(made_from(&all, "Mow", "mow it", later, &none), None);
    }

    #[test]
    fn comments_follow_the_seeds_template_and_summaries_stay_short() {
        let md = template(
            "Worker",
            "✅",
            "Did it.",
            &["Cost: $0.15".into()],
            &Some("http://d/projects/p".into()),
        );
        assert_eq!(md, "**[Worker]** ✅\nDid it.\n\n**Critical Details:**\n\n* Cost: $0.15\n\n🔗 [View Session Log](http://d/projects/p)\n");
        let long = "w ".repeat(80);
        assert_eq!(words(&long, 50).split_whitespace().count(), 50);
        assert!(words(&long, 50).ends_with('…'));
        assert_eq!(words("a  b", 50), "a b");
    }
}
