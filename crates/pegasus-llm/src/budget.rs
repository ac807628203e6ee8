//! Spending totals and the budget checks made before every call.
//!
//! Totals live in memory so a check costs no disk read; they are rebuilt from the ledger at
//! start and updated with every ledger line the gateway writes, so they always agree with the
//! file. A check refuses a call only if the spend *already* reached a limit: the cost of a call
//! is unknown until it is done, so the call that crosses a limit is the last one allowed.

use chrono::NaiveDate;

use pegasus_proto::llm::LlmError;

/// Ledger project name of the MainAgent's calls.
pub const MAIN_PROJECT: &str = "main";

/// USD spent, by UTC day, project and task: the store's one ledger sum, kept in memory here.
pub use pegasus_store::LedgerTotals as Totals;

/// The caps that apply to one call; `None` = no cap.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Limits {
    /// USD per UTC day over all projects: config.yml's `budget.daily_usd`.
    pub daily: Option<f64>,
    /// The project's PROJECT.md `budget_usd`.
    pub project: Option<f64>,
    /// USD per task: config.yml's `budget.task_usd`, or the task's own budget; applies only to
    /// a call made for a task.
    pub task: Option<f64>,
    /// `task` is the task's own budget (its spec's `budget_usd`), not config.yml's.
    pub task_is_own: bool,
}

/// Which cap refused a call, and so which key raises it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Cap {
    /// config.yml's `budget.daily_usd`.
    Daily,
    /// The project's PROJECT.md `budget_usd`.
    Project,
    /// config.yml's `budget.task_usd`.
    Task,
    /// The task's own budget (its spec's `budget_usd`, an Asana card's Max Cost).
    TaskOwn,
}

impl Cap {
    /// What the person does to let such a call through.
    pub fn how_to_raise(self) -> &'static str {
        match self {
            Cap::Daily => "raise budget.daily_usd in config.yml, or wait for tomorrow (UTC)",
            Cap::Project => "raise budget_usd in the project's PROJECT.md",
            Cap::Task => "raise budget.task_usd in config.yml",
            Cap::TaskOwn => {
                "the task's own budget is fixed when it is made (an Asana card's Max Cost): \
                 make a new task with a higher one"
            }
        }
    }
}

/// A call a cap refused: which cap, and the error the caller is told.
#[derive(Debug, Clone, PartialEq)]
pub struct Refused {
    /// The cap.
    pub cap: Cap,
    /// [`LlmError::BudgetExceeded`] with the cap's scope, limit and spend.
    pub error: LlmError,
}

impl std::fmt::Display for Refused {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        self.error.fmt(f)
    }
}

impl From<Refused> for LlmError {
    fn from(r: Refused) -> LlmError {
        r.error
    }
}

impl Limits {
    /// The cap a task's calls run into.
    fn task_cap(&self) -> Cap {
        if self.task_is_own {
            Cap::TaskOwn
        } else {
            Cap::Task
        }
    }
}

/// Refuses a call whose project (ledger name), task or the day has already spent its limit.
/// The daily cap is checked first: it is the one the user set for everything.
pub fn check(
    totals: &Totals,
    limits: &Limits,
    project: &str,
    task: Option<&str>,
    today: NaiveDate,
) -> Result<(), Refused> {
    let over = |cap: Cap, scope: String, limit: Option<f64>, spent: f64| match limit {
        Some(limit) if spent >= limit => Err(Refused {
            cap,
            error: LlmError::BudgetExceeded {
                scope,
                limit,
                spent,
            },
        }),
        _ => Ok(()),
    };
    over(Cap::Daily, "daily".into(), limits.daily, totals.day(today))?;
    over(
        Cap::Project,
        format!("project {project}"),
        limits.project,
        totals.project(project),
    )?;
    if let Some(task) = task {
        over(
            limits.task_cap(),
            format!("task {task}"),
            limits.task,
            totals.task(task),
        )?;
    }
    Ok(())
}

/// The hard check made after the queue wait (DESIGN.md §5): the spend so far, plus what the calls
/// in flight reserved, plus this call's worst case `worst` must fit every cap. A cap already
/// reached refuses as [`check`] does.
pub fn admit(
    totals: &Totals,
    reserved: &crate::journal::Reserved,
    limits: &Limits,
    project: &str,
    task: Option<&str>,
    today: NaiveDate,
    worst: f64,
) -> Result<(), Refused> {
    check(totals, limits, project, task, today)?;
    let over = |cap: Cap, scope: String, limit: Option<f64>, spent: f64, held: f64| {
        match limit {
        Some(limit) if spent + held + worst > limit + 1e-9 => Err(Refused {
            cap,
            error: LlmError::BudgetExceeded {
                scope: format!(
                    "{scope} (this call could cost up to ${worst:.4}, ${held:.4} is held by calls in flight)"
                ),
                limit,
                spent,
            },
        }),
        _ => Ok(()),
    }
    };
    over(
        Cap::Daily,
        "daily".into(),
        limits.daily,
        totals.day(today),
        reserved.day(today),
    )?;
    over(
        Cap::Project,
        format!("project {project}"),
        limits.project,
        totals.project(project),
        reserved.project(project),
    )?;
    if let Some(task) = task {
        over(
            limits.task_cap(),
            format!("task {task}"),
            limits.task,
            totals.task(task),
            reserved.task(task),
        )?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used)]
    use super::*;
    use chrono::Utc;
    use pegasus_store::{JsonlAppender, LedgerEntry};

    fn totals() -> (Totals, NaiveDate) {
        let today = Utc::now().date_naive();
        let mut t = Totals::default();
        t.add(today, "a", Some("t1"), 1.5);
        t.add(today, "a", Some("t2"), 0.5);
        t.add(today, "b", None, 1.0);
        t.add(today - chrono::Duration::days(1), "a", Some("t1"), 10.0);
        (t, today)
    }

    #[test]
    fn totals_by_day_project_and_task() {
        let (t, today) = totals();
        assert_eq!(t.day(today), 3.0);
        assert_eq!(t.project("a"), 12.0);
        assert_eq!(t.task("t1"), 11.5);
        assert_eq!(t.task("nope"), 0.0);
    }

    #[test]
    fn under_every_limit_passes() {
        let (t, today) = totals();
        let limits = Limits {
            daily: Some(3.01),
            project: Some(12.5),
            task: Some(12.0),
            task_is_own: false,
        };
        assert_eq!(check(&t, &limits, "a", Some("t1"), today), Ok(()));
        assert_eq!(
            check(&t, &Limits::default(), "a", Some("t1"), today),
            Ok(())
        );
    }

    #[test]
    fn reaching_a_limit_refuses_with_its_scope() {
        let (t, today) = totals();
        let daily = Limits {
            daily: Some(3.0),
            ..Limits::default()
        };
        assert_eq!(
            check(&t, &daily, "a", None, today),
            Err(Refused {
                cap: Cap::Daily,
                error: LlmError::BudgetExceeded {
                    scope: "daily".into(),
                    limit: 3.0,
                    spent: 3.0
                }
            })
        );
        let project = Limits {
            project: Some(12.0),
            ..Limits::default()
        };
        assert!(matches!(
            check(&t, &project, "a", None, today),
            Err(Refused { cap: Cap::Project, error: LlmError::BudgetExceeded { scope, .. } }) if scope == "project a"
        ));
        assert_eq!(check(&t, &project, "b", None, today), Ok(()));
        let task = Limits {
            task: Some(2.0),
            ..Limits::default()
        };
        assert!(matches!(
            check(&t, &task, "a", Some("t1"), today),
            Err(Refused { cap: Cap::Task, error: LlmError::BudgetExceeded { scope, spent, .. } }) if scope == "task t1" && spent == 11.5
        ));
        // The task's own budget is named as such: another key raises it.
        let own = Limits {
            task: Some(2.0),
            task_is_own: true,
            ..Limits::default()
        };
        assert!(matches!(
            check(&t, &own, "a", Some("t1"), today),
            Err(Refused {
                cap: Cap::TaskOwn,
                ..
            })
        ));
        assert!(matches!(
            admit(&t, &Default::default(), &own, "a", Some("t2"), today, 1.6),
            Err(Refused {
                cap: Cap::TaskOwn,
                ..
            })
        ));
        assert_eq!(check(&t, &task, "a", Some("t2"), today), Ok(()));
        assert_eq!(check(&t, &task, "a", None, today), Ok(()));
    }

    #[test]
    fn admission_counts_the_calls_in_flight_and_the_worst_case() {
        let (t, today) = totals();
        let limits = Limits {
            daily: Some(4.0),
            ..Limits::default()
        };
        let mut held = crate::journal::Reserved::default();
        // 3.0 spent today: a call of up to 1.0 fits, one of 1.01 does not.
        assert_eq!(admit(&t, &held, &limits, "a", None, today, 1.0), Ok(()));
        assert!(admit(&t, &held, &limits, "a", None, today, 1.01).is_err());
        // With 0.6 in flight, 0.5 no longer fits.
        held.add(today, "b", None, 0.6);
        let e = admit(&t, &held, &limits, "a", None, today, 0.5).unwrap_err();
        assert!(e.to_string().contains("held by calls in flight"), "{e}");
        assert_eq!(admit(&t, &held, &limits, "a", None, today, 0.4), Ok(()));
    }

    #[test]
    fn a_zero_limit_refuses_the_first_call() {
        let t = Totals::default();
        let limits = Limits {
            daily: Some(0.0),
            ..Limits::default()
        };
        assert!(check(&t, &limits, "a", None, Utc::now().date_naive()).is_err());
    }

    #[test]
    fn load_sums_the_ledger_skipping_unpriced_and_bad_lines() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("ledger.jsonl");
        let mut w = JsonlAppender::open(&path).unwrap();
        let entry = |project: &str, task: Option<&str>, usd: Option<f64>| LedgerEntry {
            ts: Utc::now(),
            project: project.into(),
            task: task.map(str::to_string),
            role: None,
            model: "fake/x".into(),
            input_tokens: 1,
            output_tokens: 1,
            cache_read_tokens: 0,
            cache_write_tokens: 0,
            usd,
            request_id: None,
            call: None,
            estimated: false,
            fallback_from: None,
        };
        w.append(&entry("a", Some("t"), Some(0.25))).unwrap();
        w.append(&entry("a", None, None)).unwrap();
        w.append(&serde_json::json!({"nonsense": 1})).unwrap();
        w.append(&entry("main", None, Some(1.0))).unwrap();
        w.sync().unwrap();
        let t = Totals::load(&path).unwrap();
        assert_eq!(t.project("a"), 0.25);
        assert_eq!(t.task("t"), 0.25);
        assert_eq!(t.project(MAIN_PROJECT), 1.0);
        assert_eq!(t.day(Utc::now().date_naive()), 1.25);
        assert_eq!(
            Totals::load(&dir.path().join("none")).unwrap(),
            Totals::default()
        );
    }
}
