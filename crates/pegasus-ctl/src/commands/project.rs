//! `pegasusctl project ...`: create, list, show, the lifecycle verbs and send.

use crate::{
    cli::ProjectCommand,
    client::{ok, Client},
    output, CtlError,
};
use pegasus_proto::ctl::{CtlRequest, CtlResponse, LifecycleVerb as V, ProjectFilter, ProjectInfo};
use pegasus_store::Home;

pub async fn run(home: &Home, json: bool, cmd: ProjectCommand) -> Result<(), CtlError> {
    match cmd {
        ProjectCommand::List { status } => list(home, json, status).await,
        ProjectCommand::Show { name } => show(home, json, &name).await,
        ProjectCommand::Create(c) => {
            let info = project_request(home, CtlRequest::ProjectCreate(c.into())).await?;
            report(json, &info, "created")
        }
        ProjectCommand::Suspend { name } => {
            lifecycle(home, json, name, V::Suspend, "suspended").await
        }
        ProjectCommand::Resume { name } => lifecycle(home, json, name, V::Resume, "resumed").await,
        ProjectCommand::Complete { name } => {
            lifecycle(home, json, name, V::Complete, "completed").await
        }
        ProjectCommand::Archive { name } => {
            lifecycle(home, json, name, V::Archive, "archived").await
        }
        ProjectCommand::Send(send) => super::send::run(home, json, send).await,
        ProjectCommand::Run {
            name,
            brief,
            max_attempts,
        } => {
            let req = CtlRequest::RunStart {
                project: name,
                brief,
                max_attempts,
            };
            super::mutate(home, json, req).await
        }
        ProjectCommand::Log { name, follow } => super::log::run(home, json, &name, follow).await,
    }
}

async fn project_request(home: &Home, req: CtlRequest) -> Result<ProjectInfo, CtlError> {
    let mut client = Client::connect(home).await?;
    match ok(client.request(req).await?)? {
        CtlResponse::Project(info) => Ok(*info),
        other => Err(CtlError::Failed(format!("unexpected answer: {other:?}"))),
    }
}

async fn lifecycle(
    home: &Home,
    json: bool,
    name: String,
    verb: V,
    done: &str,
) -> Result<(), CtlError> {
    let info = project_request(home, CtlRequest::ProjectLifecycle { name, verb }).await?;
    report(json, &info, done)
}

fn report(json: bool, info: &ProjectInfo, done: &str) -> Result<(), CtlError> {
    if json {
        return super::print_json(info);
    }
    let worker = info
        .worker_pid
        .map(|p| format!(", worker pid {p}"))
        .unwrap_or_default();
    println!(
        "project {} {done} (status {}{worker})",
        info.name,
        info.status_word()
    );
    Ok(())
}

/// The projects from the daemon, or from the files when it is down (no worker facts then).
pub(crate) async fn infos(
    home: &Home,
    status: Option<String>,
) -> Result<Vec<ProjectInfo>, CtlError> {
    let status = status
        .as_deref()
        .map(ProjectFilter::parse)
        .transpose()
        .map_err(CtlError::Failed)?;
    match Client::connect(home).await {
        Ok(mut client) => match ok(client.request(CtlRequest::ProjectList { status }).await?)? {
            CtlResponse::Projects(list) => Ok(list),
            other => Err(CtlError::Failed(format!("unexpected answer: {other:?}"))),
        },
        Err(CtlError::NotRunning { .. } | CtlError::NotServing { .. }) => {
            let costs = pegasus_store::project_costs(home).unwrap_or_default();
            let mut list: Vec<ProjectInfo> = pegasus_store::scan_projects(home)?
                .iter()
                .map(|e| {
                    let mut info = pegasus_store::project_info::from_entry(
                        e,
                        costs.get(&e.name).copied().unwrap_or(0.0),
                    );
                    info.approvals = pegasus_approvals::count_pending(&e.dir);
                    info
                })
                .collect();
            if let Some(filter) = status {
                list.retain(|p| filter.keeps(p));
            }
            // The model in use, as the daemon would say: the default for a project naming
            // none (from config.yml when it loads).
            let config = pegasus_store::Config::load(&home.config_file()).unwrap_or_default();
            for info in list.iter_mut().filter(|i| i.error.is_none()) {
                if info.model.as_deref().is_none_or(|m| m.trim().is_empty()) {
                    info.model = Some(config.default_model.clone());
                }
            }
            Ok(list)
        }
        Err(e) => Err(e),
    }
}

async fn list(home: &Home, json: bool, status: Option<String>) -> Result<(), CtlError> {
    let list = infos(home, status).await?;
    if json {
        return super::print_json(&list);
    }
    print!("{}", output::project_table(&list));
    Ok(())
}

/// Task counts by state, from the project's task files: `3 done, 1 failed`.
fn task_counts(home: &Home, name: &str) -> std::collections::BTreeMap<String, usize> {
    let mut counts = std::collections::BTreeMap::new();
    let store = pegasus_tasks::TaskStore::open(&home.project_dir(name), name);
    for t in store.and_then(|s| s.list()).unwrap_or_default() {
        *counts.entry(t.state.as_str().to_string()).or_insert(0) += 1;
    }
    counts
}

/// A project's limits as its files say, for `project show` while pegasusd is down: whether
/// the kernel applies them is pegasusd's to find out.
fn offline_limits(home: &Home, name: &str) -> Option<pegasus_proto::ctl::LimitsInfo> {
    let config = pegasus_store::Config::load(&home.config_file()).ok()?;
    let project = pegasus_store::ProjectFile::load(&home.project_dir(name)).ok()?;
    let l = config.limits.with(&project.limits());
    Some(pegasus_proto::ctl::LimitsInfo {
        memory: l.memory.to_string(),
        memory_bytes: l.memory.bytes(),
        pids: l.pids,
        cpu: l.cpu,
        applied: false,
        note: "pegasusd is not running".into(),
    })
}

async fn show(home: &Home, json: bool, name: &str) -> Result<(), CtlError> {
    pegasus_store::validate_name(name)?;
    let mut info = infos(home, None)
        .await?
        .into_iter()
        .find(|p| p.name == name)
        .ok_or_else(|| {
            CtlError::Failed(format!(
                "project {name} not found: see `pegasusctl project list`"
            ))
        })?;
    let dir = home.project_dir(name);
    info.unmerged_branches = pegasus_store::ProjectFile::load(&dir)
        .ok()
        .and_then(|f| pegasus_tasks::repo_paths(&f, &dir, pegasus_code::git::repo_rev).ok())
        .filter(|repos| !repos.is_empty())
        .map(|repos| pegasus_code::unmerged_lines(&repos, &pegasus_tasks::over_tasks(&dir)))
        .unwrap_or_default();
    if info.limits.is_none() && info.status.is_some() {
        info.limits = offline_limits(home, name);
    }
    let counts = task_counts(home, name);
    let mcp = pegasus_store::mcp::read_mcp_status(&home.project_dir(name));
    if json {
        let mut value = serde_json::to_value(&info).map_err(CtlError::failed)?;
        if let Some(obj) = value.as_object_mut() {
            obj.insert("tasks".into(), serde_json::json!(counts));
            obj.insert("mcp_servers".into(), serde_json::json!(mcp));
        }
        return super::print_json(&value);
    }
    print!("{}", output::project_details(&info));
    for s in &mcp {
        let mut tools = if s.tools.is_empty() {
            String::new()
        } else {
            format!(" — {}", s.tools.join(", "))
        };
        if s.deferred > 0 {
            tools.push_str(&format!(" (+{} deferred behind tool_search)", s.deferred));
        }
        let error = s
            .error
            .as_deref()
            .map(|e| format!(" ({e})"))
            .unwrap_or_default();
        println!("{:<12} {}: {}{error}{tools}", "mcp", s.name, s.state);
    }
    let summary: Vec<String> = counts
        .iter()
        .map(|(state, n)| format!("{n} {state}"))
        .collect();
    println!(
        "\ntasks: {}",
        if summary.is_empty() {
            "none yet".to_string()
        } else {
            summary.join(", ")
        }
    );
    Ok(())
}
