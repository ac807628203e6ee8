//! The run loop end to end, with a scripted model and executor billing a temp ledger.

#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use std::sync::Arc;

use common::*;
use pegasus_proto::llm::LlmError;
use pegasus_runs::{PhaseStatus, Run, RunEvent, RunRequest, RunSettings, RunStatus, RunStore};

fn no_phase_executing(run: &Run) {
    for p in &run.phases {
        assert_ne!(
            p.status,
            PhaseStatus::Executing,
            "phase {} left executing",
            p.number
        );
    }
}

fn statuses(run: &Run) -> Vec<PhaseStatus> {
    run.phases.iter().map(|p| p.status).collect()
}

fn suffixes(tasks: &[String]) -> Vec<String> {
    tasks
        .iter()
        .map(|t| t[t.rfind("-p").unwrap() + 1..].to_string())
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn phase_two_rejected_once_is_retried_with_feedback_and_costs_match_the_ledger() {
    let fx = Fixture::new();
    // Another project's spend and an unrelated task must not count.
    ledger_line(&fx.ledger, "t-other", Some(9.0));
    let mut model = ScriptedModel::new(&fx.ledger);
    model.review = Box::new(|task| {
        Ok(if task.ends_with("-p2-a1") {
            "REJECTED: the report lacks a table\nAdd a table of the monthly numbers.".into()
        } else {
            "APPROVED".into()
        })
    });
    let model = Arc::new(model);
    let mut exec = ScriptedExecutor::new(&fx.ledger);
    let ledger = fx.ledger.clone();
    exec.script = Box::new(move |_, task| {
        if task.ends_with("-p3-a1") {
            // A call with no known price: counted, not guessed.
            ledger_line(&ledger, task, None);
        }
        Ok(format!("did the work of {task}"))
    });
    let exec = Arc::new(exec);
    let engine = fx.engine(&model, &exec, RunSettings::default());
    let run = fx.store().create("demo", "analyse the sales", 3).unwrap();

    let run = engine.drive(&run.id).await.unwrap();

    assert_eq!(run.status, RunStatus::Completed, "{:?}", run.error);
    assert_eq!(run.error, None);
    assert_eq!(statuses(&run), vec![PhaseStatus::Completed; 3]);
    let numbers: Vec<u32> = run.phases.iter().map(|p| p.number).collect();
    assert_eq!(numbers, vec![1, 2, 3]);
    let attempts: Vec<u32> = run.phases.iter().map(|p| p.attempt).collect();
    assert_eq!(attempts, vec![1, 2, 1]);
    assert_eq!(
        run.phases[1].feedback.as_deref(),
        Some("the report lacks a table")
    );
    assert_eq!(
        suffixes(&exec.tasks()),
        vec!["p1-a1", "p2-a1", "p2-a2", "p3-a1"]
    );

    // The retry carries the reviewer's reason and notes; the first attempt did not.
    let first = exec.prompt_of("-p2-a1");
    let retry = exec.prompt_of("-p2-a2");
    assert!(!first.contains("the report lacks a table"));
    assert!(retry.contains("The previous attempt was rejected: the report lacks a table"));
    assert!(retry.contains("Add a table of the monthly numbers."));
    assert!(retry.contains("attempt 2 of 3"));
    // Every phase prompt has the brief, its acceptance criteria, and prior summaries.
    assert!(first.contains("analyse the sales"));
    assert!(first.contains("- report has a table"));
    assert!(first.contains(&format!("summary of {}-p1-a1", run.id)));
    let third = exec.prompt_of("-p3-a1");
    assert!(third.contains(&format!("summary of {}-p1-a1", run.id)));
    assert!(third.contains(&format!("summary of {}-p2-a2", run.id)));

    // Every model call carried the task id its costs belong to.
    let calls = model.calls();
    assert_eq!(
        calls[0].meta.task.as_deref(),
        Some(format!("{}-plan", run.id).as_str())
    );
    assert!(calls[1..].iter().all(|c| c
        .meta
        .task
        .as_deref()
        .is_some_and(|t| t.starts_with(&format!("{}-p", run.id)))));
    assert!(calls
        .iter()
        .all(|c| c.meta.project.as_deref() == Some("demo")));

    // Costs: exactly the matching ledger lines, retries included.
    for p in &run.phases {
        let expected = ledger_sum(&fx.ledger, &format!("{}-p{}-", run.id, p.number));
        assert_eq!(p.cost_usd, expected, "phase {}", p.number);
    }
    assert_eq!(run.phases[1].cost_usd, 2.0 * ATTEMPT_USD);
    assert_eq!(run.phases[0].cost_usd, ATTEMPT_USD);
    assert_eq!(run.phases[2].unpriced_calls, 1);
    assert_eq!(run.unpriced_calls, 1);
    assert_eq!(run.cost_usd, ledger_sum(&fx.ledger, &run.id));
    assert_eq!(run.cost_usd, PLAN_USD + 4.0 * ATTEMPT_USD);

    // The file says the same, and the log has the whole story.
    assert_eq!(fx.store().get(&run.id).unwrap(), run);
    let events = fx.store().events(&run.id).unwrap();
    assert!(events.iter().any(|e| matches!(
        &e.event,
        RunEvent::PhaseRetry { phase: 2, attempt: 1, feedback } if feedback == "the report lacks a table"
    )));
    assert!(matches!(
        events.last().map(|e| &e.event),
        Some(RunEvent::Completed { .. })
    ));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_garbled_verdict_is_a_rejection_that_costs_an_attempt() {
    let fx = Fixture::new();
    let mut model = ScriptedModel::new(&fx.ledger);
    model.review = Box::new(|task| {
        Ok(if task.ends_with("-p1-a1") {
            "Looks good, APPROVED".into()
        } else {
            "APPROVED".into()
        })
    });
    let model = Arc::new(model);
    let exec = Arc::new(ScriptedExecutor::new(&fx.ledger));
    let engine = fx.engine(&model, &exec, RunSettings::default());
    let run = fx.store().create("demo", "brief", 3).unwrap();

    let run = engine.drive(&run.id).await.unwrap();

    assert_eq!(run.status, RunStatus::Completed);
    assert_eq!(run.phases[0].attempt, 2);
    assert_eq!(
        run.phases[0].feedback.as_deref(),
        Some("garbled verdict: Looks good, APPROVED")
    );
    assert!(exec
        .prompt_of("-p1-a2")
        .contains("rejected: garbled verdict: Looks good, APPROVED"));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn out_of_attempts_fails_the_phase_and_the_run_and_later_phases_stay_pending() {
    let fx = Fixture::new();
    let mut model = ScriptedModel::new(&fx.ledger);
    model.review = Box::new(|task| {
        Ok(if task.contains("-p2-") {
            "REJECTED: numbers do not add up".into()
        } else {
            "APPROVED".into()
        })
    });
    let model = Arc::new(model);
    let exec = Arc::new(ScriptedExecutor::new(&fx.ledger));
    let engine = fx.engine(&model, &exec, RunSettings::default());
    let run = fx.store().create("demo", "brief", 2).unwrap();

    let run = engine.drive(&run.id).await.unwrap();

    assert_eq!(run.status, RunStatus::Failed);
    assert_eq!(
        run.error.as_deref(),
        Some("phase 2 rejected 2 times: numbers do not add up")
    );
    assert_eq!(
        statuses(&run),
        vec![
            PhaseStatus::Completed,
            PhaseStatus::Failed,
            PhaseStatus::Pending
        ]
    );
    assert_eq!(run.phases[1].attempt, 2);
    assert!(run.phases[1].finished.is_some());
    assert_eq!(run.phases[2].attempt, 0);
    assert_eq!(suffixes(&exec.tasks()), vec!["p1-a1", "p2-a1", "p2-a2"]);
    assert_eq!(run.phases[1].cost_usd, 2.0 * ATTEMPT_USD);
    assert_eq!(run.cost_usd, ledger_sum(&fx.ledger, &run.id));
    assert_eq!(fx.store().get(&run.id).unwrap(), run);
    // A finished run is not driven again.
    assert_eq!(engine.drive(&run.id).await.unwrap(), run);
    assert_eq!(exec.tasks().len(), 3);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cancel_requested_from_another_store_during_phase_one_stops_before_phase_two() {
    let fx = Fixture::new();
    let model = Arc::new(ScriptedModel::new(&fx.ledger));
    let mut exec = ScriptedExecutor::new(&fx.ledger);
    let project = fx.project_dir();
    exec.script = Box::new(move |_, task| {
        if task.ends_with("-p1-a1") {
            let outsider = RunStore::open(&project).unwrap();
            let run = outsider
                .request(&run_id_of(task), RunRequest::Cancel)
                .unwrap();
            assert_eq!(run.requested, Some(RunRequest::Cancel));
        }
        Ok("done".into())
    });
    let exec = Arc::new(exec);
    let engine = fx.engine(&model, &exec, RunSettings::default());
    let run = fx.store().create("demo", "brief", 3).unwrap();

    let run = engine.drive(&run.id).await.unwrap();

    assert_eq!(run.status, RunStatus::Cancelled);
    // The phase under way finished its attempt; the request was honoured at the next turn.
    assert_eq!(
        statuses(&run),
        vec![
            PhaseStatus::Completed,
            PhaseStatus::Pending,
            PhaseStatus::Pending
        ]
    );
    assert_eq!(suffixes(&exec.tasks()), vec!["p1-a1"]);
    assert_eq!(run.phases[1].attempt, 0);
    let on_disk = fx.store().get(&run.id).unwrap();
    assert_eq!(on_disk.status, RunStatus::Cancelled);
    assert_eq!(on_disk.requested, None);
    assert!(!fx
        .store()
        .dir()
        .join(format!("{}.request", run.id))
        .exists());
    let err = fx.store().request(&run.id, RunRequest::Cancel).unwrap_err();
    assert_eq!(
        err.to_string(),
        format!("run {} is cancelled: nothing to cancel", run.id)
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn pause_requested_during_phase_one_pauses_and_resume_finishes_without_redoing_it() {
    let fx = Fixture::new();
    let model = Arc::new(ScriptedModel::new(&fx.ledger));
    let mut exec = ScriptedExecutor::new(&fx.ledger);
    let project = fx.project_dir();
    exec.script = Box::new(move |_, task| {
        if task.ends_with("-p1-a1") {
            RunStore::open(&project)
                .unwrap()
                .request(&run_id_of(task), RunRequest::Pause)
                .unwrap();
        }
        Ok("done".into())
    });
    let exec = Arc::new(exec);
    let engine = fx.engine(&model, &exec, RunSettings::default());
    let run = fx.store().create("demo", "brief", 3).unwrap();

    let run = engine.drive(&run.id).await.unwrap();
    assert_eq!(run.status, RunStatus::Paused);
    assert_eq!(run.error.as_deref(), Some("paused on request"));
    assert_eq!(suffixes(&exec.tasks()), vec!["p1-a1"]);
    assert_eq!(fx.store().get(&run.id).unwrap().requested, None);
    // A paused run is not driven until resumed, and is not "unfinished".
    assert_eq!(
        engine.drive(&run.id).await.unwrap().status,
        RunStatus::Paused
    );
    assert!(fx.store().unfinished().unwrap().is_empty());

    let resumed = fx.store().resume(&run.id).unwrap();
    assert_eq!(resumed.status, RunStatus::Executing);
    assert_eq!(resumed.error, None);
    let run = engine.drive(&run.id).await.unwrap();

    assert_eq!(run.status, RunStatus::Completed);
    assert_eq!(suffixes(&exec.tasks()), vec!["p1-a1", "p2-a1", "p3-a1"]);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_executor_error_fails_the_phase_and_the_run_and_nothing_stays_executing() {
    let fx = Fixture::new();
    let model = Arc::new(ScriptedModel::new(&fx.ledger));
    let mut exec = ScriptedExecutor::new(&fx.ledger);
    exec.script = Box::new(|_, task| {
        if task.ends_with("-p2-a1") {
            Err(pegasus_runs::ExecError::Failed(
                "the exec tool crashed".into(),
            ))
        } else {
            Ok("done".into())
        }
    });
    let exec = Arc::new(exec);
    let engine = fx.engine(&model, &exec, RunSettings::default());
    let run = fx.store().create("demo", "brief", 3).unwrap();

    let run = engine.drive(&run.id).await.unwrap();

    assert_eq!(run.status, RunStatus::Failed);
    assert_eq!(
        run.error.as_deref(),
        Some("phase 2 failed: the exec tool crashed")
    );
    assert_eq!(run.phases[1].status, PhaseStatus::Failed);
    assert_eq!(
        run.phases[1].error.as_deref(),
        Some("the exec tool crashed")
    );
    assert_eq!(run.phases[2].status, PhaseStatus::Pending);
    // The failed attempt's spend is still counted.
    assert_eq!(run.phases[1].cost_usd, 2.0 * EXEC_CALL_USD);
    let on_disk = fx.store().get(&run.id).unwrap();
    no_phase_executing(&on_disk);
    assert_eq!(on_disk, run);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_failing_review_call_fails_the_phase_but_a_failing_summary_does_not() {
    let fx = Fixture::new();
    let mut model = ScriptedModel::new(&fx.ledger);
    model.summary = Box::new(|_| {
        Err(LlmError::Exhausted {
            provider: "fake".into(),
            attempts: 3,
            last: "HTTP 529".into(),
        })
    });
    model.review = Box::new(|task| {
        if task.contains("-p2-") {
            Err(LlmError::Exhausted {
                provider: "fake".into(),
                attempts: 3,
                last: "HTTP 503".into(),
            })
        } else {
            Ok("APPROVED".into())
        }
    });
    let model = Arc::new(model);
    let mut exec = ScriptedExecutor::new(&fx.ledger);
    let long = "x".repeat(800);
    exec.script = Box::new(move |_, _| Ok(long.clone()));
    let exec = Arc::new(exec);
    let engine = fx.engine(&model, &exec, RunSettings::default());
    let run = fx.store().create("demo", "brief", 3).unwrap();

    let run = engine.drive(&run.id).await.unwrap();

    assert_eq!(run.phases[0].status, PhaseStatus::Completed);
    assert_eq!(
        run.phases[0].summary.as_deref(),
        Some("x".repeat(500).as_str())
    );
    assert_eq!(run.status, RunStatus::Failed);
    assert_eq!(run.phases[1].status, PhaseStatus::Failed);
    assert_eq!(
        run.error.as_deref(),
        Some("phase 2 failed: the review call failed: provider fake failed after 3 attempts: HTTP 503")
    );
    no_phase_executing(&run);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn after_a_crash_with_phase_two_executing_drive_restarts_phase_two_without_redoing_phase_one()
{
    let fx = Fixture::new();
    let store = fx.store();
    // What a kill -9 in the middle of phase 2's first attempt leaves on disk.
    let mut run = store.create("demo", "analyse the sales", 3).unwrap();
    run.phases = pegasus_runs::parse_plan(THREE_PHASES)
        .unwrap()
        .into_iter()
        .zip(1..)
        .map(|(p, n)| pegasus_runs::Phase::from_plan(n, p))
        .collect();
    run.status = RunStatus::Executing;
    run.phases[0].status = PhaseStatus::Completed;
    run.phases[0].attempt = 1;
    run.phases[0].summary = Some("phase one gathered data.csv".into());
    run.phases[1].status = PhaseStatus::Executing;
    run.phases[1].attempt = 1;
    run.current_phase = Some(2);
    store.save(&run).unwrap();
    // The crashed attempt had already spent something under its task id.
    ledger_line(
        &fx.ledger,
        &format!("{}-p2-a1", run.id),
        Some(EXEC_CALL_USD),
    );
    let unfinished = store.unfinished().unwrap();
    assert_eq!(unfinished.len(), 1);
    assert_eq!(unfinished[0].id, run.id);

    let model = Arc::new(ScriptedModel::new(&fx.ledger));
    let exec = Arc::new(ScriptedExecutor::new(&fx.ledger));
    let engine = fx.engine(&model, &exec, RunSettings::default());
    let run = engine.drive(&run.id).await.unwrap();

    assert_eq!(run.status, RunStatus::Completed, "{:?}", run.error);
    // Same attempt number again: the crashed attempt never got a verdict.
    assert_eq!(suffixes(&exec.tasks()), vec!["p2-a1", "p3-a1"]);
    assert_eq!(run.phases[1].attempt, 1);
    assert!(exec
        .prompt_of("-p2-a1")
        .contains("phase one gathered data.csv"));
    // No plan call: the phases were already there.
    assert!(model
        .calls()
        .iter()
        .all(|c| !c.system.starts_with("You plan")));
    // The crashed attempt's spend is in the phase cost.
    assert_eq!(run.phases[1].cost_usd, EXEC_CALL_USD + ATTEMPT_USD);
    let events = store.events(&run.id).unwrap();
    assert!(events.iter().any(|e| matches!(
        e.event,
        RunEvent::PhaseStarted {
            phase: 2,
            attempt: 1,
            restarted: true,
            ..
        }
    )));
    assert!(store.unfinished().unwrap().is_empty());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_crash_during_planning_plans_again() {
    let fx = Fixture::new();
    let store = fx.store();
    let run = store.create("demo", "brief", 3).unwrap();
    assert_eq!(store.unfinished().unwrap().len(), 1);
    let model = Arc::new(ScriptedModel::new(&fx.ledger));
    let exec = Arc::new(ScriptedExecutor::new(&fx.ledger));
    let run = fx
        .engine(&model, &exec, RunSettings::default())
        .drive(&run.id)
        .await
        .unwrap();
    assert_eq!(run.status, RunStatus::Completed);
    assert_eq!(run.phases.len(), 3);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_unreadable_or_empty_plan_fails_the_run() {
    for (answer, expected) in [
        (
            "I would rather not.",
            "the plan could not be read: expected",
        ),
        (
            "```json\n{\"phases\": []}\n```",
            "the plan could not be read: the plan has no phases",
        ),
    ] {
        let fx = Fixture::new();
        let mut model = ScriptedModel::new(&fx.ledger);
        model.plan = Box::new(move || Ok(answer.to_string()));
        let model = Arc::new(model);
        let exec = Arc::new(ScriptedExecutor::new(&fx.ledger));
        let engine = fx.engine(&model, &exec, RunSettings::default());
        let run = fx.store().create("demo", "brief", 3).unwrap();

        let run = engine.drive(&run.id).await.unwrap();

        assert_eq!(run.status, RunStatus::Failed);
        let error = run.error.clone().unwrap();
        assert!(error.starts_with(expected), "{error}");
        assert!(!error.contains('\n'), "{error}");
        assert!(run.phases.is_empty());
        assert!(exec.tasks().is_empty());
        assert_eq!(run.cost_usd, PLAN_USD);
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_failing_plan_call_fails_the_run() {
    let fx = Fixture::new();
    let mut model = ScriptedModel::new(&fx.ledger);
    model.plan = Box::new(|| Err(LlmError::Other("connection reset".into())));
    let model = Arc::new(model);
    let exec = Arc::new(ScriptedExecutor::new(&fx.ledger));
    let run = fx.store().create("demo", "brief", 3).unwrap();
    let run = fx
        .engine(&model, &exec, RunSettings::default())
        .drive(&run.id)
        .await
        .unwrap();
    assert_eq!(run.status, RunStatus::Failed);
    assert_eq!(
        run.error.as_deref(),
        Some("planning failed: connection reset")
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_daily_limit_pauses_before_any_work() {
    let fx = Fixture::new();
    ledger_line(&fx.ledger, "t-earlier", Some(10.0));
    let model = Arc::new(ScriptedModel::new(&fx.ledger));
    let exec = Arc::new(ScriptedExecutor::new(&fx.ledger));
    let settings = RunSettings {
        daily_limit_usd: Some(5.0),
        ..RunSettings::default()
    };
    let run = fx.store().create("demo", "brief", 3).unwrap();

    let run = fx
        .engine(&model, &exec, settings)
        .drive(&run.id)
        .await
        .unwrap();

    assert_eq!(run.status, RunStatus::Paused);
    let error = run.error.clone().unwrap();
    assert!(
        error.starts_with("daily limit reached: $10.00 of $5.00"),
        "{error}"
    );
    assert!(model.calls().is_empty());
    assert!(exec.tasks().is_empty());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_daily_limit_pauses_between_phases_and_resume_continues() {
    let fx = Fixture::new();
    let model = Arc::new(ScriptedModel::new(&fx.ledger));
    let exec = Arc::new(ScriptedExecutor::new(&fx.ledger));
    // Plan (0.5) + phase 1 (1.375) = 1.875 is under the limit; + phase 2 = 3.25 is over it.
    let settings = RunSettings {
        daily_limit_usd: Some(2.0),
        ..RunSettings::default()
    };
    let run = fx.store().create("demo", "brief", 3).unwrap();

    let run = fx
        .engine(&model, &exec, settings)
        .drive(&run.id)
        .await
        .unwrap();

    assert_eq!(run.status, RunStatus::Paused);
    assert!(run
        .error
        .as_deref()
        .unwrap()
        .starts_with("daily limit reached"));
    assert_eq!(
        statuses(&run),
        vec![
            PhaseStatus::Completed,
            PhaseStatus::Completed,
            PhaseStatus::Pending
        ]
    );

    fx.store().resume(&run.id).unwrap();
    let raised = RunSettings {
        daily_limit_usd: Some(100.0),
        ..RunSettings::default()
    };
    let run = fx
        .engine(&model, &exec, raised)
        .drive(&run.id)
        .await
        .unwrap();
    assert_eq!(run.status, RunStatus::Completed);
    assert_eq!(suffixes(&exec.tasks()), vec!["p1-a1", "p2-a1", "p3-a1"]);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_budget_refusal_pauses_the_run_and_the_attempt_is_redone_on_resume() {
    let fx = Fixture::new();
    let refused = Arc::new(std::sync::atomic::AtomicBool::new(false));
    let mut model = ScriptedModel::new(&fx.ledger);
    let once = refused.clone();
    model.review = Box::new(move |task| {
        if task.ends_with("-p2-a1") && !once.swap(true, std::sync::atomic::Ordering::SeqCst) {
            Err(LlmError::BudgetExceeded {
                scope: "project demo".into(),
                limit: 5.0,
                spent: 5.0,
            })
        } else {
            Ok("APPROVED".into())
        }
    });
    let model = Arc::new(model);
    let exec = Arc::new(ScriptedExecutor::new(&fx.ledger));
    let engine = fx.engine(&model, &exec, RunSettings::default());
    let run = fx.store().create("demo", "brief", 1).unwrap();

    let run = engine.drive(&run.id).await.unwrap();

    assert_eq!(run.status, RunStatus::Paused);
    assert!(run
        .error
        .as_deref()
        .unwrap()
        .starts_with("budget exceeded: project demo limit $5.00"));
    assert_eq!(run.phases[1].status, PhaseStatus::Pending);
    assert_eq!(
        run.phases[1].attempt, 0,
        "an attempt without a verdict does not count"
    );
    // What the interrupted attempt spent is already on the phase.
    assert_eq!(run.phases[1].cost_usd, 2.0 * EXEC_CALL_USD + SUMMARY_USD);
    no_phase_executing(&fx.store().get(&run.id).unwrap());

    fx.store().resume(&run.id).unwrap();
    let run = engine.drive(&run.id).await.unwrap();

    // max_attempts is 1, yet the phase could still run: the refused attempt was not counted.
    assert_eq!(run.status, RunStatus::Completed, "{:?}", run.error);
    assert_eq!(
        suffixes(&exec.tasks()),
        vec!["p1-a1", "p2-a1", "p2-a1", "p3-a1"]
    );
    assert_eq!(
        run.phases[1].cost_usd,
        2.0 * EXEC_CALL_USD + SUMMARY_USD + ATTEMPT_USD
    );
    assert_eq!(run.cost_usd, ledger_sum(&fx.ledger, &run.id));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_executor_budget_refusal_pauses_instead_of_failing() {
    let fx = Fixture::new();
    let model = Arc::new(ScriptedModel::new(&fx.ledger));
    let mut exec = ScriptedExecutor::new(&fx.ledger);
    exec.script = Box::new(|_, _| {
        Err(pegasus_runs::ExecError::Budget(format!(
            "model call failed: {}",
            LlmError::BudgetExceeded {
                scope: "daily".into(),
                limit: 1.0,
                spent: 1.0
            }
        )))
    });
    let exec = Arc::new(exec);
    let run = fx.store().create("demo", "brief", 3).unwrap();
    let run = fx
        .engine(&model, &exec, RunSettings::default())
        .drive(&run.id)
        .await
        .unwrap();
    assert_eq!(run.status, RunStatus::Paused);
    assert_eq!(run.phases[0].status, PhaseStatus::Pending);
    assert_eq!(run.phases[0].attempt, 0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cancel_pending_on_a_crashed_run_is_honoured_and_its_phase_is_not_left_executing() {
    let fx = Fixture::new();
    let store = fx.store();
    let mut run = store.create("demo", "brief", 3).unwrap();
    run.phases = pegasus_runs::parse_plan(THREE_PHASES)
        .unwrap()
        .into_iter()
        .zip(1..)
        .map(|(p, n)| pegasus_runs::Phase::from_plan(n, p))
        .collect();
    run.status = RunStatus::Executing;
    run.phases[0].status = PhaseStatus::Executing;
    run.phases[0].attempt = 1;
    store.save(&run).unwrap();
    store.request(&run.id, RunRequest::Cancel).unwrap();

    let model = Arc::new(ScriptedModel::new(&fx.ledger));
    let exec = Arc::new(ScriptedExecutor::new(&fx.ledger));
    let run = fx
        .engine(&model, &exec, RunSettings::default())
        .drive(&run.id)
        .await
        .unwrap();

    assert_eq!(run.status, RunStatus::Cancelled);
    no_phase_executing(&run);
    assert_eq!(run.phases[0].attempt, 0);
    assert!(exec.tasks().is_empty());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_file_error_mid_phase_still_marks_the_phase_and_the_run_failed() {
    let fx = Fixture::new();
    let model = Arc::new(ScriptedModel::new(&fx.ledger));
    let mut exec = ScriptedExecutor::new(&fx.ledger);
    let runs_dir = fx.project_dir().join("runs");
    exec.script = Box::new(move |_, task| {
        if task.ends_with("-p2-a1") {
            // The run's log can no longer be appended to: the next step's write fails.
            let log = runs_dir.join(format!("{}.events.jsonl", run_id_of(task)));
            std::fs::remove_file(&log).unwrap();
            std::fs::create_dir(&log).unwrap();
        }
        Ok("done".into())
    });
    let exec = Arc::new(exec);
    let engine = fx.engine(&model, &exec, RunSettings::default());
    let run = fx.store().create("demo", "brief", 3).unwrap();

    let run = engine.drive(&run.id).await.unwrap();

    assert_eq!(run.status, RunStatus::Failed);
    assert_eq!(run.phases[1].status, PhaseStatus::Failed);
    let error = run.error.clone().unwrap();
    assert!(error.starts_with("phase 2 failed: "), "{error}");
    assert!(error.contains("events.jsonl"), "{error}");
    let on_disk = fx.store().get(&run.id).unwrap();
    assert_eq!(on_disk.status, RunStatus::Failed);
    no_phase_executing(&on_disk);
}
