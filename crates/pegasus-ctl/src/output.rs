//! Tables and detail views for humans. JSON output does not pass through here.

use pegasus_proto::ctl::{DaemonStatus, ProjectInfo};
use pegasus_proto::{ProjectStatus, WorkerState};
use std::fmt::Write as _;

/// Left-aligned columns, two spaces apart, sized to their widest cell in terminal columns (an
/// emoji or a CJK character takes two).
fn table(header: &[&str], rows: &[Vec<String>]) -> String {
    use unicode_width::UnicodeWidthStr;
    let mut widths: Vec<usize> = header.iter().map(|h| h.width()).collect();
    for row in rows {
        for (w, cell) in widths.iter_mut().zip(row) {
            *w = (*w).max(cell.width());
        }
    }
    let mut out = String::new();
    let mut line = |cells: &mut dyn Iterator<Item = &str>| {
        let mut s = String::new();
        for (i, (cell, w)) in cells.zip(&widths).enumerate() {
            if i > 0 {
                s.push_str("  ");
            }
            s.push_str(cell);
            s.push_str(&" ".repeat(w.saturating_sub(cell.width())));
        }
        out.push_str(s.trim_end());
        out.push('\n');
    };
    line(&mut header.iter().copied());
    for row in rows {
        line(&mut row.iter().map(String::as_str));
    }
    out
}

/// [`table`] with one row per item, or `empty` when there is none.
fn listing<T>(
    items: &[T],
    empty: &str,
    header: &[&str],
    row: impl Fn(&T) -> Vec<String>,
) -> String {
    if items.is_empty() {
        return empty.to_string();
    }
    table(header, &items.iter().map(row).collect::<Vec<_>>())
}

/// Dollars with cents, or with four decimals below a dollar (a call costs fractions of a cent).
pub fn money(usd: f64) -> String {
    if usd.abs() < 1.0 {
        format!("${usd:.4}")
    } else {
        format!("${usd:.2}")
    }
}

fn dash(v: Option<impl ToString>) -> String {
    v.map(|v| v.to_string()).unwrap_or_else(|| "-".into())
}

fn worker_cell(p: &ProjectInfo) -> String {
    match (&p.error, p.worker_pid) {
        (Some(_), _) => "-".into(),
        (None, Some(pid)) => match &p.worker_host {
            Some(host) => format!("{} ({pid} on {host})", p.worker_state),
            None => format!("{} ({pid})", p.worker_state),
        },
        (None, None) if p.worker_state == WorkerState::Stopped => "-".into(),
        (None, None) => p.worker_state.to_string(),
    }
}

pub fn project_table(list: &[ProjectInfo]) -> String {
    listing(
        list,
        "no projects; create one with `pegasusctl project create NAME --goal TEXT`\n",
        &["NAME", "STATUS", "WORKER", "MODEL", "COST", "APPROVALS", ""],
        |p| {
            vec![
                p.name.clone(),
                p.status_word().to_string(),
                worker_cell(p),
                dash(p.model.as_ref()),
                money(p.cost_usd),
                if p.approvals == 0 {
                    "-".into()
                } else {
                    p.approvals.to_string()
                },
                p.error.clone().unwrap_or_default(),
            ]
        },
    )
}

fn duration(secs: u64) -> String {
    let (d, h, m, s) = (secs / 86400, secs / 3600 % 24, secs / 60 % 60, secs % 60);
    match (d, h, m) {
        (0, 0, 0) => format!("{s}s"),
        (0, 0, _) => format!("{m}m {s}s"),
        (0, _, _) => format!("{h}h {m}m"),
        _ => format!("{d}d {h}h"),
    }
}

pub fn status(s: &DaemonStatus) -> String {
    let mut out = format!(
        "pegasusd pid {}, up {}, home {}\ncost today {}\n\n",
        s.pid,
        duration(s.uptime_s),
        s.home,
        money(s.cost_today_usd)
    );
    let waiting: u32 = s.projects.iter().map(|p| p.approvals).sum();
    if waiting > 0 {
        out.insert_str(
            out.len() - 1,
            &format!(
                "{waiting} tool call{} waiting for approval: see `pegasusctl approvals`\n",
                if waiting == 1 { "" } else { "s" }
            ),
        );
    }
    let rows: Vec<Vec<String>> = s
        .projects
        .iter()
        .filter(|p| {
            p.status == Some(ProjectStatus::Active) || p.error.is_some() || p.worker_pid.is_some()
        })
        .map(|p| {
            vec![
                p.name.clone(),
                p.status_word().to_string(),
                if p.error.is_some() {
                    "-".into()
                } else {
                    p.worker_state.to_string()
                },
                match (p.worker_pid, &p.worker_host) {
                    (Some(pid), Some(host)) => format!("{pid}@{host}"),
                    (pid, _) => dash(pid),
                },
                p.restarts.to_string(),
                match (&p.task, &p.stage) {
                    (Some(t), Some(s)) => format!("{t} ({s})"),
                    (Some(t), None) => t.clone(),
                    _ => "-".into(),
                },
                p.error
                    .clone()
                    .or_else(|| p.last_crash.clone())
                    .unwrap_or_else(|| "-".into()),
            ]
        })
        .collect();
    if rows.is_empty() {
        out.push_str("no active projects\n");
    } else {
        out.push_str(&table(
            &[
                "PROJECT",
                "STATUS",
                "WORKER",
                "PID",
                "RESTARTS",
                "TASK (STAGE)",
                "LAST CRASH / PROBLEM",
            ],
            &rows,
        ));
    }
    let others = s.projects.len() - rows.len();
    if others > 0 {
        let _ = writeln!(out, "\n{others} more project(s) suspended, completed or archived: `pegasusctl project list`");
    }
    if !s.fallbacks.is_empty() {
        out.push_str("\nfallback models answered (last hour):\n");
        for f in &s.fallbacks {
            let _ = writeln!(out, "  {}: {}", f.project, f.line());
        }
    }
    out
}

pub fn project_details(p: &ProjectInfo) -> String {
    let mut out = String::new();
    let mut field = |k: &str, v: String| {
        let _ = writeln!(out, "{k:<12} {v}");
    };
    field("name", p.name.clone());
    field("status", p.status_word().to_string());
    if let Some(e) = &p.error {
        field("problem", e.clone());
    }
    field("worker", worker_cell(p));
    field("restarts", p.restarts.to_string());
    if let Some(c) = &p.last_crash {
        field(
            "last crash",
            format!("{c} at {}", dash(p.last_crash_at.as_ref())),
        );
    }
    field("model", dash(p.model.as_ref()));
    if let Some(list) = &p.fallback_models {
        let list = if list.is_empty() {
            "none".to_string()
        } else {
            list.join(", ")
        };
        field("fallback", list);
    }
    for f in &p.fallbacks {
        field("fell back", f.line());
    }
    field("workdir", dash(p.workdir.as_ref()));
    field("created", dash(p.created.as_ref()));
    if let Some(t) = &p.suspended {
        field("suspended", t.clone());
    }
    if let Some(t) = &p.completed {
        field("completed", t.clone());
    }
    field("cost", money(p.cost_usd));
    if let Some(l) = &p.limits {
        field("limits", limits_cell(l));
    }
    for b in &p.unmerged_branches {
        field("unmerged", b.clone());
    }
    if let Some(goal) = &p.goal {
        let _ = writeln!(out, "\ngoal:\n{goal}");
    }
    out
}

/// `memory 2G, pids 512, cpu 1.0 (cgroup v1)`, or `... (not applied: why)`.
pub fn limits_cell(l: &pegasus_proto::ctl::LimitsInfo) -> String {
    let cpu = if l.cpu.fract() == 0.0 {
        format!("{:.1}", l.cpu)
    } else {
        l.cpu.to_string()
    };
    let how = if l.applied {
        l.note.clone()
    } else {
        format!("not applied: {}", l.note)
    };
    format!("memory {}, pids {}, cpu {cpu} ({how})", l.memory, l.pids)
}

fn clip(s: &str, n: usize) -> String {
    let one: String = s.split_whitespace().collect::<Vec<_>>().join(" ");
    if one.chars().count() > n {
        format!(
            "{}…",
            one.chars().take(n.saturating_sub(1)).collect::<String>()
        )
    } else {
        one
    }
}

/// The task list; `waiting` gives, for a ready task whose dependencies are not done, what it
/// waits on (shown as its reason).
pub fn task_table(
    tasks: &[pegasus_tasks::Task],
    waiting: &std::collections::HashMap<String, String>,
) -> String {
    listing(
        tasks,
        "no tasks yet; a message to the project becomes one (`pegasusctl project send`)\n",
        &["ID", "STATE", "TYPE", "PRI", "ROLE", "REASON", "TITLE"],
        |t| {
            vec![
                t.id.clone(),
                t.state.as_str().to_string(),
                t.kind.clone(),
                format!("P{}", t.priority),
                dash(t.role.as_ref()),
                match waiting.get(&t.id) {
                    Some(w) => format!("waits on {w}"),
                    None => t.shown_reason().unwrap_or_default().to_string(),
                },
                clip(&t.title, 50),
            ]
        },
    )
}

pub fn task_board(columns: &[(pegasus_tasks::BoardColumn, Vec<&pegasus_tasks::Task>)]) -> String {
    let mut out = String::new();
    for (col, tasks) in columns {
        let _ = writeln!(out, "{} ({})", col.title(), tasks.len());
        for t in tasks {
            let _ = writeln!(
                out,
                "  {}  {:<9}  {}",
                t.id,
                t.state.as_str(),
                clip(&t.title, 60)
            );
        }
    }
    out
}

pub fn task_details(t: &pegasus_tasks::Task, history: &[pegasus_tasks::TaskEvent]) -> String {
    let mut out = String::new();
    let mut field = |k: &str, v: String| {
        let _ = writeln!(out, "{k:<14} {v}");
    };
    field("id", t.id.clone());
    field("project", t.project.clone());
    field("title", t.title.clone());
    field("state", t.state.as_str().to_string());
    field("type", t.kind.clone());
    field("priority", format!("P{}", t.priority));
    field("role", dash(t.role.as_ref()));
    field("spec version", t.spec_version.to_string());
    if !t.depends_on.is_empty() {
        field("depends on", t.depends_on.join(", "));
    }
    if let Some(r) = t.shown_reason() {
        field("stop reason", r.to_string());
    }
    if let Some(q) = &t.question {
        field("question", q.clone());
    }
    if let Some(r) = &t.replay_of {
        field("replay of", r.clone());
    }
    if let Some(c) = t.cost_usd {
        field("cost", format!("${c:.4}"));
    }
    if let Some(s) = &t.result_summary {
        field("result", clip(s, 200));
    }
    for a in &t.artifacts {
        field("artifact", a.clone());
    }
    if let Some(spec) = &t.spec {
        let _ = writeln!(
            out,
            "\nfrozen spec (version {}):\n  goal: {}",
            t.spec_version,
            clip(&spec.goal, 300)
        );
        for a in &spec.acceptance {
            let _ = writeln!(out, "  accept: {a}");
        }
        for r in &spec.repos {
            let _ = writeln!(
                out,
                "  repo {} at {}",
                r.id,
                r.head.as_deref().unwrap_or("(no commit)")
            );
        }
    }
    let _ = writeln!(out, "\nhistory:");
    for e in history {
        if let pegasus_tasks::TaskEvent::Transition {
            ts,
            from,
            to,
            actor,
            reason,
        } = e
        {
            let _ = writeln!(
                out,
                "  {} {} → {} by {actor}{}",
                ts.format("%Y-%m-%d %H:%M:%S"),
                from.as_str(),
                to.as_str(),
                if reason.is_empty() {
                    String::new()
                } else {
                    format!(": {reason}")
                }
            );
        }
    }
    out
}

pub fn role_table(roles: &[pegasus_roles::Role]) -> String {
    let rows: Vec<Vec<String>> = roles
        .iter()
        .map(|r| {
            vec![
                format!("{} {}", r.emoji, r.id),
                r.name.clone(),
                r.specialty.clone(),
                dash(r.model.model.as_ref()),
                r.model.thinking.as_str().to_string(),
                r.tools
                    .as_ref()
                    .map(|t| t.len().to_string())
                    .unwrap_or_else(|| "all".into()),
                match &r.source {
                    pegasus_roles::RoleSource::BuiltIn => "built-in".into(),
                    pegasus_roles::RoleSource::User(p) => p.clone(),
                },
            ]
        })
        .collect();
    table(
        &[
            "ROLE",
            "NAME",
            "SPECIALTY",
            "MODEL",
            "THINKING",
            "TOOLS",
            "SOURCE",
        ],
        &rows,
    )
}

pub fn role_details(r: &pegasus_roles::Role) -> String {
    let mut out = format!("{} {} ({})\n{}\n\n", r.emoji, r.name, r.id, r.description);
    let mut field = |k: &str, v: String| {
        let _ = writeln!(out, "{k:<12} {v}");
    };
    let m = &r.model;
    field("specialty", r.specialty.clone());
    field("model", dash(m.model.as_ref()));
    field("thinking", m.thinking.as_str().to_string());
    field("temperature", dash(m.temperature));
    field("max tokens", dash(m.max_tokens));
    field("timeout", dash(m.timeout_s.map(|t| format!("{t} s"))));
    let tools = r.tools.as_ref().map(|t| t.join(", "));
    field("tools", tools.unwrap_or_else(|| "all".into()));
    for v in &r.variables {
        let default = dash(v.default.as_ref());
        field(
            "variable",
            format!("{} — {} (default: {default})", v.name, v.description),
        );
    }
    let _ = writeln!(out, "\n{}", r.template.trim_end());
    out
}

pub fn run_details(run: &pegasus_runs::Run) -> String {
    let mut out = format!(
        "run {} of project {}: {:?}\nbrief: {}\ncost ${:.4}, max attempts per phase {}\n",
        run.id,
        run.project,
        run.status,
        clip(&run.brief, 200),
        run.cost_usd,
        run.max_attempts
    );
    if let Some(r) = run.requested {
        let _ = writeln!(out, "requested: {r:?} (at the next step)");
    }
    if let Some(e) = &run.error {
        let _ = writeln!(out, "error: {e}");
    }
    if !run.phases.is_empty() {
        out.push('\n');
        let rows: Vec<Vec<String>> = run
            .phases
            .iter()
            .map(|p| {
                vec![
                    p.number.to_string(),
                    format!("{:?}", p.status).to_lowercase(),
                    p.attempt.to_string(),
                    format!("${:.4}", p.cost_usd),
                    clip(&p.title, 40),
                    p.feedback
                        .as_deref()
                        .map(|f| clip(f, 60))
                        .unwrap_or_default(),
                ]
            })
            .collect();
        out.push_str(&table(
            &[
                "PHASE",
                "STATUS",
                "ATTEMPTS",
                "COST",
                "TITLE",
                "LAST FEEDBACK",
            ],
            &rows,
        ));
    }
    out
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    #[test]
    fn an_emoji_takes_two_columns_and_shifts_no_row() {
        let t = table(
            &["ID", "NAME"],
            &[
                vec!["🚀 ship".into(), "x".into()],
                vec!["plain".into(), "y".into()],
            ],
        );
        let cols: Vec<usize> = t
            .lines()
            .map(|l| {
                use unicode_width::UnicodeWidthStr;
                let at = l.rfind(' ').unwrap() + 1;
                l[..at].width()
            })
            .collect();
        assert_eq!(cols, vec![9, 9, 9], "{t}");
    }

    #[test]
    fn table_aligns_columns() {
        let t = table(&["A", "BB"], &[vec!["xxx".into(), "y".into()]]);
        assert_eq!(t, "A    BB\nxxx  y\n");
    }

    #[test]
    fn limits_say_whether_they_apply() {
        let mut l = pegasus_proto::ctl::LimitsInfo {
            memory: "2G".into(),
            memory_bytes: 2 << 30,
            pids: 512,
            cpu: 1.0,
            applied: true,
            note: "cgroup v1".into(),
        };
        assert_eq!(limits_cell(&l), "memory 2G, pids 512, cpu 1.0 (cgroup v1)");
        l.applied = false;
        l.cpu = 0.5;
        l.note = "pegasusd is not running".into();
        assert_eq!(
            limits_cell(&l),
            "memory 2G, pids 512, cpu 0.5 (not applied: pegasusd is not running)"
        );
    }

    #[test]
    fn status_shows_the_running_task_and_its_stage() {
        let p = ProjectInfo {
            name: "web".into(),
            status: Some(ProjectStatus::Active),
            model: None,
            workdir: None,
            worker_pid: Some(42),
            worker_host: None,
            worker_state: WorkerState::Ready,
            restarts: 0,
            last_crash: None,
            last_crash_at: None,
            cost_usd: 0.0,
            created: None,
            suspended: None,
            completed: None,
            goal: None,
            error: None,
            task: Some("t-1".into()),
            stage: Some(pegasus_proto::Stage::Acting),
            unmerged_branches: Vec::new(),
            approvals: 2,
            limits: None,
            fallback_models: None,
            fallbacks: Vec::new(),
        };
        let s = DaemonStatus {
            pid: 1,
            uptime_s: 5,
            home: "/h".into(),
            cost_today_usd: 0.0012,
            projects: vec![p],
            waiting: vec![],
            problems: vec![],
            fallbacks: vec![pegasus_proto::ctl::FallbackInfo {
                project: "web".into(),
                model: "fa/b".into(),
                from: "fa/a".into(),
                why: "overloaded (529)".into(),
                calls: 3,
                since: "2026-11-29T12:04:00Z".into(),
                last: "2026-11-29T12:09:00Z".into(),
            }],
        };
        let out = status(&s);
        assert!(
            out.contains("fallback models answered (last hour):\n  web: fallback fa/b served 3 calls since 12:04 UTC: fa/a overloaded (529)\n"),
            "{out}"
        );
        let mut shown = s.projects[0].clone();
        shown.fallback_models = Some(vec!["fa/b".into(), "fo/c".into()]);
        shown.fallbacks = s.fallbacks.clone();
        let details = project_details(&shown);
        assert!(details.contains("fallback     fa/b, fo/c\n"), "{details}");
        assert!(
            details.contains("fell back    fallback fa/b served 3 calls since 12:04 UTC"),
            "{details}"
        );
        assert!(
            out.contains("TASK (STAGE)") && out.contains("t-1 (acting)"),
            "{out}"
        );
        assert!(out.contains("cost today $0.0012"), "{out}");
        assert!(
            out.contains("2 tool calls waiting for approval: see `pegasusctl approvals`"),
            "{out}"
        );
        assert!(project_table(&s.projects).contains("APPROVALS"));
    }

    #[test]
    fn durations_read_well() {
        assert_eq!(duration(5), "5s");
        assert_eq!(duration(65), "1m 5s");
        assert_eq!(duration(3700), "1h 1m");
        assert_eq!(duration(90000), "1d 1h");
    }
}
