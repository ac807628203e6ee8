//! Tables and detail views for humans. JSON output does not pass through here.

use pegasus_proto::ctl::{DaemonStatus, ProjectInfo};
use std::fmt::Write as _;

/// Left-aligned columns, two spaces apart, sized to their widest cell.
fn table(header: &[&str], rows: &[Vec<String>]) -> String {
    let mut widths: Vec<usize> = header.iter().map(|h| h.chars().count()).collect();
    for row in rows {
        for (w, cell) in widths.iter_mut().zip(row) {
            *w = (*w).max(cell.chars().count());
        }
    }
    let mut out = String::new();
    let mut line = |cells: &mut dyn Iterator<Item = &str>| {
        let mut s = String::new();
        for (i, (cell, w)) in cells.zip(&widths).enumerate() {
            if i > 0 {
                s.push_str("  ");
            }
            let _ = write!(s, "{cell:<w$}");
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

fn dash(v: Option<impl ToString>) -> String {
    v.map(|v| v.to_string()).unwrap_or_else(|| "-".into())
}

fn worker_cell(p: &ProjectInfo) -> String {
    match (&p.error, p.worker_pid) {
        (Some(_), _) => "-".into(),
        (None, Some(pid)) => format!("{} ({pid})", p.worker_state),
        (None, None) if p.worker_state == "stopped" => "-".into(),
        (None, None) => p.worker_state.clone(),
    }
}

pub fn project_table(list: &[ProjectInfo]) -> String {
    if list.is_empty() {
        return "no projects; create one with `pegasusctl project create NAME --goal TEXT`\n"
            .into();
    }
    let rows: Vec<Vec<String>> = list
        .iter()
        .map(|p| {
            vec![
                p.name.clone(),
                p.status.clone(),
                worker_cell(p),
                dash(p.model.as_ref()),
                format!("${:.2}", p.cost_usd),
                p.error.clone().unwrap_or_default(),
            ]
        })
        .collect();
    table(&["NAME", "STATUS", "WORKER", "MODEL", "COST", ""], &rows)
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
        "pegasusd pid {}, up {}, home {}\ncost today ${:.2}\n\n",
        s.pid,
        duration(s.uptime_s),
        s.home,
        s.cost_today_usd
    );
    let rows: Vec<Vec<String>> = s
        .projects
        .iter()
        .filter(|p| p.status == "active" || p.error.is_some() || p.worker_pid.is_some())
        .map(|p| {
            vec![
                p.name.clone(),
                p.status.clone(),
                if p.error.is_some() {
                    "-".into()
                } else {
                    p.worker_state.clone()
                },
                dash(p.worker_pid),
                p.restarts.to_string(),
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
                "LAST CRASH / PROBLEM",
            ],
            &rows,
        ));
    }
    let others = s.projects.len() - rows.len();
    if others > 0 {
        let _ = writeln!(out, "\n{others} more project(s) suspended, completed or archived: `pegasusctl project list`");
    }
    out
}

pub fn project_details(p: &ProjectInfo) -> String {
    let mut out = String::new();
    let mut field = |k: &str, v: String| {
        let _ = writeln!(out, "{k:<12} {v}");
    };
    field("name", p.name.clone());
    field("status", p.status.clone());
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
    field("workdir", dash(p.workdir.as_ref()));
    field("created", dash(p.created.as_ref()));
    if let Some(t) = &p.suspended {
        field("suspended", t.clone());
    }
    if let Some(t) = &p.completed {
        field("completed", t.clone());
    }
    field("cost", format!("${:.2}", p.cost_usd));
    if let Some(goal) = &p.goal {
        let _ = writeln!(out, "\ngoal:\n{goal}");
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn table_aligns_columns() {
        let t = table(&["A", "BB"], &[vec!["xxx".into(), "y".into()]]);
        assert_eq!(t, "A    BB\nxxx  y\n");
    }

    #[test]
    fn durations_read_well() {
        assert_eq!(duration(5), "5s");
        assert_eq!(duration(65), "1m 5s");
        assert_eq!(duration(3700), "1h 1m");
        assert_eq!(duration(90000), "1d 1h");
    }
}
