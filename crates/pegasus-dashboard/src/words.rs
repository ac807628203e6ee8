//! States and figures as the pages say them: the words a person reads, from the enums'
//! `as_str` (never a `Debug` name), and money rounded to what matters.

use pegasus_proto::{Stage, WorkerState};

/// Dollars: cents from 10 cents up, four decimals below (a cheap model's calls cost fractions
/// of a cent), `$0` for nothing.
pub(crate) fn usd(x: f64) -> String {
    if x == 0.0 {
        "$0".into()
    } else if x.abs() >= 0.1 {
        format!("${x:.2}")
    } else {
        format!("${x:.4}")
    }
}

/// A worker's state in words.
pub(crate) fn worker(state: WorkerState) -> &'static str {
    match state {
        WorkerState::Starting => "starting",
        WorkerState::Ready => "ready",
        WorkerState::Stopping => "stopping",
        WorkerState::Backoff => "crashed, restarting soon",
        WorkerState::CrashLooping => "crashed too often: resume it to try again",
        WorkerState::Stopped => "not running",
    }
}

/// What a worker is doing: the running task's stage, in words.
pub(crate) fn stage(stage: Stage) -> &'static str {
    match stage {
        Stage::Reasoning => "thinking",
        Stage::Acting => "using tools",
        Stage::Reflecting => "writing to memory",
    }
}

/// Why a task stopped, where the stored word is a code (`token_capped`, `approval`) rather
/// than a sentence; other reasons are sentences already and are shown as written.
pub(crate) fn reason(reason: &str) -> &str {
    match reason {
        "approval" => "waiting for an approval",
        "token_capped" => "stopped: token limit",
        "turn_capped" => "stopped: turn limit",
        "loop_capped" => "stopped: it was going in circles",
        "budget" => "stopped: budget reached",
        "silent" => "stopped: no answer from the model",
        "model_error" => "the model call failed",
        other => other,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn money_is_rounded_to_what_matters() {
        assert_eq!(usd(0.0), "$0");
        assert_eq!(usd(12.345), "$12.35");
        assert_eq!(usd(0.5), "$0.50");
        assert_eq!(usd(0.00123), "$0.0012");
    }

    #[test]
    fn no_state_is_shown_by_its_rust_name() {
        for s in WorkerState::ALL {
            let w = worker(s);
            assert!(
                !w.is_empty() && w.chars().next().is_some_and(char::is_lowercase),
                "{s:?}"
            );
            assert_ne!(w, format!("{s:?}"));
        }
        for s in Stage::ALL {
            assert!(
                stage(s).chars().all(|c| c.is_lowercase() || c == ' '),
                "{s:?}"
            );
        }
    }
}
