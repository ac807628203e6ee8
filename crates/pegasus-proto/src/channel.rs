//! Where a message comes from (DESIGN.md §11): [`Channel`], passed wherever a sender is — an
//! inbound message to a worker, the MainAgent's inbox, a session's user records (`from`), the
//! actor of a task event a person or a schedule caused.
//!
//! Files, JSON and frames spell a channel as the same words they always have (`cli`,
//! `dashboard`, `telegram:<chat>`, `email:<address>`, `main`, `schedule:<job>`, `project/<name>`, and the
//! session-only `task` and `run`), so files written by older versions read as before and
//! older readers read new files. A word this version does not know is kept as written
//! ([`Channel::Other`]), never refused: a session line must not be lost for its `from`.

use serde::{Deserialize, Deserializer, Serialize, Serializer};
use std::fmt;

/// Where a message comes from.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub enum Channel {
    /// `pegasusctl` (`cli`).
    Cli,
    /// The web dashboard and its REST API (`dashboard`).
    Dashboard,
    /// Telegram, with the chat the message came from (`telegram:<chat id>`, or `telegram`).
    Telegram(Option<i64>),
    /// E-mail, with the sender's address (`email:<address>`, or `email`).
    Email(Option<String>),
    /// The MainAgent (`main`).
    Main,
    /// A scheduled job, with its name (`schedule:<job>`, or `schedule`).
    Schedule(Option<String>),
    /// A project's agent: its replies, notifies and crashes reach the MainAgent on
    /// `project/<name>`.
    Project(String),
    /// A task's own request, recorded in the session when the task runs (`task`); not an
    /// inbound message.
    Task,
    /// A phase of an autonomous run (`run`); not an inbound message.
    Run,
    /// The Asana board sync of pegasusd (`asana`): the tasks it adds, answers and merges
    /// (DESIGN.md §17).
    Asana,
    /// A word this version does not know, kept as written.
    Other(String),
}

impl Channel {
    /// The channel a word names (the inverse of its [`Display`](fmt::Display)); never fails.
    pub fn parse(s: &str) -> Channel {
        match s {
            "cli" => Channel::Cli,
            "dashboard" => Channel::Dashboard,
            "telegram" => Channel::Telegram(None),
            "email" => Channel::Email(None),
            "main" => Channel::Main,
            "schedule" => Channel::Schedule(None),
            "task" => Channel::Task,
            "run" => Channel::Run,
            "asana" => Channel::Asana,
            _ => {
                if let Some(chat) = s.strip_prefix("telegram:") {
                    // Only the form written (`telegram:007` would not read back the same).
                    match chat.parse::<i64>() {
                        Ok(id) if id.to_string() == chat => return Channel::Telegram(Some(id)),
                        _ => {}
                    }
                } else if let Some(address) = s.strip_prefix("email:") {
                    return Channel::Email(Some(address.to_string()));
                } else if let Some(job) = s.strip_prefix("schedule:") {
                    return Channel::Schedule(Some(job.to_string()));
                } else if let Some(name) = s.strip_prefix("project/") {
                    return Channel::Project(name.to_string());
                }
                Channel::Other(s.to_string())
            }
        }
    }

    /// Whether a session record from this channel is a message somebody sent (as opposed to
    /// a task's request or a run's phase, recorded by the agent itself).
    pub fn is_message(&self) -> bool {
        !matches!(self, Channel::Task | Channel::Run)
    }

    /// Whether it is a project's agent talking (to the MainAgent), not a person.
    pub fn is_project(&self) -> bool {
        matches!(self, Channel::Project(_))
    }

    /// The channel without who on it, as a message record's `channel` key says it (DESIGN.md §11):
    /// `cli`, `dashboard`, `telegram`, `email`, `main`, `schedule`, `project`, `task`, `run`, or an
    /// unknown word as written.
    pub fn kind(&self) -> &str {
        match self {
            Channel::Cli => "cli",
            Channel::Dashboard => "dashboard",
            Channel::Telegram(_) => "telegram",
            Channel::Email(_) => "email",
            Channel::Main => "main",
            Channel::Schedule(_) => "schedule",
            Channel::Project(_) => "project",
            Channel::Task => "task",
            Channel::Run => "run",
            Channel::Asana => "asana",
            Channel::Other(word) => word,
        }
    }

    /// Who on the channel, as a message record's `sender` key says it: the chat id for
    /// Telegram, the job for a schedule, the project for a project's agent. `None` where the
    /// channel is the whole of what is known (`cli`: the one local user the control socket
    /// admits; `dashboard`: whoever holds its token; `main`).
    pub fn sender(&self) -> Option<String> {
        match self {
            Channel::Telegram(chat) => chat.map(|c| c.to_string()),
            Channel::Email(address) => address.clone(),
            Channel::Schedule(job) => job.clone(),
            Channel::Project(name) => Some(name.clone()),
            Channel::Cli
            | Channel::Dashboard
            | Channel::Main
            | Channel::Task
            | Channel::Run
            | Channel::Asana
            | Channel::Other(_) => None,
        }
    }
}

impl fmt::Display for Channel {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Channel::Cli => f.write_str("cli"),
            Channel::Dashboard => f.write_str("dashboard"),
            Channel::Telegram(None) => f.write_str("telegram"),
            Channel::Telegram(Some(chat)) => write!(f, "telegram:{chat}"),
            Channel::Email(None) => f.write_str("email"),
            Channel::Email(Some(address)) => write!(f, "email:{address}"),
            Channel::Main => f.write_str("main"),
            Channel::Schedule(None) => f.write_str("schedule"),
            Channel::Schedule(Some(job)) => write!(f, "schedule:{job}"),
            Channel::Project(name) => write!(f, "project/{name}"),
            Channel::Task => f.write_str("task"),
            Channel::Run => f.write_str("run"),
            Channel::Asana => f.write_str("asana"),
            Channel::Other(word) => f.write_str(word),
        }
    }
}

/// [`Channel::parse`].
impl From<&str> for Channel {
    fn from(word: &str) -> Channel {
        Channel::parse(word)
    }
}

/// Written as its word, in JSON and in frames alike.
impl Serialize for Channel {
    fn serialize<S: Serializer>(&self, ser: S) -> Result<S::Ok, S::Error> {
        ser.collect_str(self)
    }
}

impl<'de> Deserialize<'de> for Channel {
    fn deserialize<D: Deserializer<'de>>(de: D) -> Result<Self, D::Error> {
        let word = String::deserialize(de)?;
        Ok(Channel::parse(&word))
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;
    use crate::{decode, encode};

    /// Every variant with the word files have always held for it.
    fn samples() -> Vec<(Channel, &'static str)> {
        let all = vec![
            (Channel::Cli, "cli"),
            (Channel::Dashboard, "dashboard"),
            (Channel::Telegram(Some(-1001234)), "telegram:-1001234"),
            (Channel::Telegram(None), "telegram"),
            (
                Channel::Email(Some("me@example.com".into())),
                "email:me@example.com",
            ),
            (Channel::Email(None), "email"),
            (Channel::Main, "main"),
            (
                Channel::Schedule(Some("nightly".into())),
                "schedule:nightly",
            ),
            (Channel::Schedule(None), "schedule"),
            (Channel::Project("web".into()), "project/web"),
            (Channel::Task, "task"),
            (Channel::Run, "run"),
            (Channel::Asana, "asana"),
            (Channel::Other("user".into()), "user"),
        ];
        // Adding a variant without a sample above fails to compile here.
        for (c, _) in &all {
            match c {
                Channel::Cli
                | Channel::Dashboard
                | Channel::Telegram(_)
                | Channel::Email(_)
                | Channel::Main
                | Channel::Schedule(_)
                | Channel::Project(_)
                | Channel::Task
                | Channel::Run
                | Channel::Asana
                | Channel::Other(_) => {}
            }
        }
        all
    }

    #[test]
    fn every_channel_is_its_old_word_in_json_in_frames_and_back() {
        for (c, word) in samples() {
            assert_eq!(c.to_string(), word);
            assert_eq!(Channel::parse(word), c, "{word}");
            assert_eq!(Channel::from(word), c, "{word}");
            assert_eq!(serde_json::to_value(&c).unwrap(), word);
            assert_eq!(
                serde_json::from_value::<Channel>(serde_json::json!(word)).unwrap(),
                c
            );
            // In a frame it is the same string as before the enum, so frames did not change.
            assert_eq!(encode(&c).unwrap(), encode(&word.to_string()).unwrap());
            assert_eq!(decode::<Channel>(&encode(&c).unwrap()).unwrap(), c);
        }
    }

    #[test]
    fn an_unknown_or_malformed_word_is_kept_as_written() {
        for word in [
            "",
            "CLI",
            "telegram:abc",
            "telegram:+5",
            "telegram:007",
            "sms:1",
        ] {
            let c = Channel::parse(word);
            assert_eq!(c, Channel::Other(word.to_string()), "{word}");
            assert_eq!(c.to_string(), word);
        }
    }

    #[test]
    fn a_channel_splits_into_its_kind_and_its_sender() {
        let split: Vec<(String, Option<String>)> = samples()
            .iter()
            .map(|(c, _)| (c.kind().to_string(), c.sender()))
            .collect();
        let want = [
            ("cli", None),
            ("dashboard", None),
            ("telegram", Some("-1001234")),
            ("telegram", None),
            ("email", Some("me@example.com")),
            ("email", None),
            ("main", None),
            ("schedule", Some("nightly")),
            ("schedule", None),
            ("project", Some("web")),
            ("task", None),
            ("run", None),
            ("asana", None),
            ("user", None),
        ];
        let want: Vec<(String, Option<String>)> = want
            .iter()
            .map(|(k, s)| (k.to_string(), s.map(str::to_string)))
            .collect();
        assert_eq!(split, want);
    }

    #[test]
    fn only_tasks_and_runs_are_not_messages_and_only_projects_are_projects() {
        for (c, _) in samples() {
            assert_eq!(
                c.is_message(),
                !matches!(c, Channel::Task | Channel::Run),
                "{c}"
            );
            assert_eq!(c.is_project(), matches!(c, Channel::Project(_)), "{c}");
        }
    }
}
