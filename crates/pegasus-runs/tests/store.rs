//! The run files and the verbs outsiders apply to them (`run status|cancel|pause|resume`).

#![allow(clippy::unwrap_used, clippy::expect_used)]

use pegasus_runs::{RunError, RunRequest, RunStatus, RunStore};

fn store() -> (tempfile::TempDir, RunStore) {
    let dir = tempfile::tempdir().unwrap();
    let store = RunStore::open(&dir.path().join("demo")).unwrap();
    (dir, store)
}

fn set_status(store: &RunStore, id: &str, status: RunStatus) {
    let mut run = store.get(id).unwrap();
    run.status = status;
    store.save(&run).unwrap();
}

#[test]
fn create_writes_a_planning_run_that_get_list_and_latest_return() {
    let (_dir, store) = store();
    let a = store.create("demo", "first", 3).unwrap();
    let b = store.create("demo", "second", 2).unwrap();
    assert_eq!(a.status, RunStatus::Planning);
    assert!(a.phases.is_empty());
    assert!(a.id.starts_with("r-"));
    assert_ne!(a.id, b.id);
    assert_eq!(store.get(&a.id).unwrap(), a);
    let ids: Vec<String> = store.list().unwrap().into_iter().map(|r| r.id).collect();
    assert_eq!(ids, vec![a.id.clone(), b.id.clone()]);
    assert_eq!(store.latest().unwrap().unwrap().id, b.id);
    assert!(store.dir().join(format!("{}.events.jsonl", a.id)).exists());
    assert_eq!(store.unfinished().unwrap().len(), 2);
}

#[test]
fn bad_input_is_refused_with_a_line_that_says_what_to_do() {
    let (_dir, store) = store();
    let e = store.create("demo", "  ", 3).unwrap_err();
    assert!(e.to_string().contains("--brief"), "{e}");
    let e = store.create("demo", "x", 0).unwrap_err();
    assert!(e.to_string().contains("--max-attempts"), "{e}");
    for id in ["", "../etc/passwd", "r-1/x", "nope"] {
        assert!(matches!(store.get(id), Err(RunError::NotFound(_))), "{id}");
    }
    assert!(store.latest().unwrap().is_none());
}

#[test]
fn a_corrupt_run_file_is_skipped_by_list_but_named_by_get() {
    let (_dir, store) = store();
    let good = store.create("demo", "x", 1).unwrap();
    std::fs::write(store.dir().join("r-20250101-abcdef.json"), "{not json").unwrap();
    let runs = store.list().unwrap();
    assert_eq!(runs.len(), 1);
    assert_eq!(runs[0].id, good.id);
    let e = store.get("r-20250101-abcdef").unwrap_err();
    assert!(e.to_string().contains("r-20250101-abcdef.json"), "{e}");
}

#[test]
fn cancel_or_pause_of_a_finished_run_is_refused() {
    let (_dir, store) = store();
    for status in [
        RunStatus::Completed,
        RunStatus::Failed,
        RunStatus::Cancelled,
    ] {
        let run = store.create("demo", "x", 1).unwrap();
        set_status(&store, &run.id, status);
        for req in [RunRequest::Cancel, RunRequest::Pause] {
            let e = store.request(&run.id, req).unwrap_err();
            assert_eq!(
                e.to_string(),
                format!("run {} is {status}: nothing to {}", run.id, req.verb())
            );
        }
        let e = store.resume(&run.id).unwrap_err();
        assert_eq!(
            e.to_string(),
            format!(
                "run {} is {status}: only a paused run can be resumed",
                run.id
            )
        );
    }
}

#[test]
fn requests_on_a_live_run_are_recorded_for_the_engine_and_cancel_wins_over_pause() {
    let (_dir, store) = store();
    for status in [RunStatus::Planning, RunStatus::Executing] {
        let run = store.create("demo", "x", 1).unwrap();
        set_status(&store, &run.id, status);
        let r = store.request(&run.id, RunRequest::Pause).unwrap();
        assert_eq!((r.status, r.requested), (status, Some(RunRequest::Pause)));
        let r = store.request(&run.id, RunRequest::Cancel).unwrap();
        assert_eq!(r.requested, Some(RunRequest::Cancel));
        let e = store.request(&run.id, RunRequest::Pause).unwrap_err();
        assert!(e.to_string().contains("already being cancelled"), "{e}");
        // Another store instance (pegasusd vs the worker) sees it.
        let other = RunStore::open(store.dir().parent().unwrap()).unwrap();
        assert_eq!(
            other.get(&run.id).unwrap().requested,
            Some(RunRequest::Cancel)
        );
        // The engine rewriting the run file cannot lose it.
        let mut stale = run.clone();
        stale.status = status;
        stale.requested = None;
        store.save(&stale).unwrap();
        assert_eq!(
            store.get(&run.id).unwrap().requested,
            Some(RunRequest::Cancel)
        );
        // Live runs cannot be resumed.
        let e = store.resume(&run.id).unwrap_err();
        assert!(
            e.to_string().contains("only a paused run can be resumed"),
            "{e}"
        );
    }
}

#[test]
fn a_paused_run_is_cancelled_at_once_and_cannot_be_paused_again() {
    let (_dir, store) = store();
    let run = store.create("demo", "x", 1).unwrap();
    set_status(&store, &run.id, RunStatus::Paused);
    let e = store.request(&run.id, RunRequest::Pause).unwrap_err();
    assert!(e.to_string().contains("already paused"), "{e}");
    let r = store.request(&run.id, RunRequest::Cancel).unwrap();
    assert_eq!(r.status, RunStatus::Cancelled);
    assert_eq!(store.get(&run.id).unwrap().status, RunStatus::Cancelled);
}

#[test]
fn resume_sends_a_paused_run_back_to_executing_or_to_planning_without_a_plan() {
    let (_dir, store) = store();
    let unplanned = store.create("demo", "x", 1).unwrap();
    let mut r = store.get(&unplanned.id).unwrap();
    r.status = RunStatus::Paused;
    r.error = Some("daily limit reached".into());
    store.save(&r).unwrap();
    let resumed = store.resume(&unplanned.id).unwrap();
    assert_eq!(resumed.status, RunStatus::Planning);
    assert_eq!(resumed.error, None);

    let planned = store.create("demo", "y", 1).unwrap();
    let mut r = store.get(&planned.id).unwrap();
    r.phases = vec![pegasus_runs::Phase::from_plan(
        1,
        pegasus_runs::PlannedPhase {
            title: "t".into(),
            description: "d".into(),
            acceptance: vec!["a".into()],
        },
    )];
    r.status = RunStatus::Paused;
    store.save(&r).unwrap();
    assert_eq!(
        store.resume(&planned.id).unwrap().status,
        RunStatus::Executing
    );
    assert_eq!(store.get(&planned.id).unwrap().status, RunStatus::Executing);
    let events = store.events(&planned.id).unwrap();
    assert!(matches!(
        events.last().map(|e| &e.event),
        Some(pegasus_runs::RunEvent::Resumed)
    ));
}

#[test]
fn a_request_left_on_a_finished_run_by_a_crash_is_ignored() {
    let (_dir, store) = store();
    let run = store.create("demo", "x", 1).unwrap();
    store.request(&run.id, RunRequest::Pause).unwrap();
    set_status(&store, &run.id, RunStatus::Completed);
    assert_eq!(store.get(&run.id).unwrap().requested, None);
}
