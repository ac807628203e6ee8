//! Code projects seen from the task list: which task branches are kept with unmerged work, and
//! what waits for the user. Both are read-only views for listings (`status`, `project show`,
//! the dashboard, the MainAgent), so they read the task index without the task lock.

/// The project's tasks as its index holds them: no lock taken, nothing created, nothing
/// re-folded. Writers update the index after every change, so it is current except right
/// after a crash, which the next [`crate::TaskStore::list`] repairs. Empty when absent.
pub fn peek_tasks(dir: &std::path::Path) -> Vec<crate::Task> {
    let path = dir
        .join(crate::store::TASKS_DIR)
        .join(crate::store::INDEX_FILE);
    if !path.exists() {
        return Vec::new();
    }
    crate::index::read_index(&path)
        .map(|lines| lines.into_iter().map(|l| l.task).collect())
        .unwrap_or_default()
}

/// The kept branches of a code project's ended tasks (SPEC §10), `repo: branch (task ID)`.
pub fn unmerged_branches(dir: &std::path::Path) -> Vec<String> {
    let Ok(repos) = crate::project_repos(dir) else {
        return Vec::new();
    };
    if repos.is_empty() {
        return Vec::new();
    }
    let over: std::collections::HashSet<String> = peek_tasks(dir)
        .into_iter()
        .filter(|t| t.state.is_terminal() || t.state == crate::TaskState::Failed)
        .map(|t| t.id)
        .collect();
    let fate = |id: &str| {
        if over.contains(id) {
            pegasus_code::TaskFate::Over
        } else {
            pegasus_code::TaskFate::Live
        }
    };
    let mut out = Vec::new();
    for r in repos {
        let path = crate::snapshot::resolve(dir, &r.path);
        let branch = r.branch.unwrap_or_else(|| "main".to_string());
        if let Ok(repo) = pegasus_code::Repo::open(&r.id, &path, &branch) {
            for k in pegasus_code::unmerged_branches(&repo, &fate).unwrap_or_default() {
                out.push(format!("{}: {} (task {})", k.repo, k.branch, k.task));
            }
        }
    }
    out
}

/// What of a project waits for the user, one line each: blocked tasks with their question (or
/// reason) and verified tasks whose merge is pending (`status` and the MainAgent show these).
pub fn waiting_on_user(dir: &std::path::Path, name: &str) -> Vec<String> {
    let mut tasks = peek_tasks(dir);
    tasks.sort_by_key(|t| t.created);
    tasks
        .into_iter()
        .filter_map(|t| match t.state {
            crate::TaskState::Blocked => Some(match (&t.question, &t.stop_reason) {
                (Some(q), _) => format!(
                    "{name}: task {} asks: {q} (answer with `pegasusctl task answer {} TEXT`)",
                    t.id, t.id
                ),
                (None, r) => format!(
                    "{name}: task {} is blocked: {}",
                    t.id,
                    r.as_deref().unwrap_or("no reason recorded")
                ),
            }),
            crate::TaskState::Verified if t.merge == Some(crate::MergeState::Pending) => {
                Some(format!(
                    "{name}: task {} is verified, merge pending (`pegasusctl task merge {}`)",
                    t.id, t.id
                ))
            }
            _ => None,
        })
        .collect()
}
