//! How hard a role's model should think, and what that means on each provider's wire.
//!
//! Roles speak in four levels so a role file never depends on a provider; what a level means
//! on each wire (Anthropic's token budget, OpenAI's effort name) is decided in one place, the
//! gateway's providers (`pegasus-llm`), which see the model it goes to.

use std::fmt;
use std::str::FromStr;

use serde::{Deserialize, Serialize};

/// A reasoning level. `Off` is the default: a role that does not ask for reasoning should not
/// pay for it, and not every model accepts a reasoning setting.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Thinking {
    /// No reasoning setting is sent.
    #[default]
    Off,
    /// A little reasoning.
    Low,
    /// Moderate reasoning.
    Medium,
    /// As much reasoning as the level scale allows.
    High,
}

impl Thinking {
    /// Every level, lowest first.
    pub const ALL: [Thinking; 4] = [
        Thinking::Off,
        Thinking::Low,
        Thinking::Medium,
        Thinking::High,
    ];

    /// The name used in role files, PROJECT.md and on the wire.
    pub fn as_str(self) -> &'static str {
        match self {
            Thinking::Off => "off",
            Thinking::Low => "low",
            Thinking::Medium => "medium",
            Thinking::High => "high",
        }
    }
}

impl fmt::Display for Thinking {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

impl FromStr for Thinking {
    type Err = String;

    /// Parses a level name; the error is a full sentence for a CLI flag.
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        Thinking::ALL
            .into_iter()
            .find(|t| t.as_str() == s)
            .ok_or_else(|| format!("unknown thinking level `{s}`: use off, low, medium or high"))
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used)]
    use super::*;

    #[test]
    fn names_round_trip_through_str_and_serde() {
        for t in Thinking::ALL {
            assert_eq!(t.as_str().parse::<Thinking>().unwrap(), t);
            assert_eq!(serde_json::to_string(&t).unwrap(), format!("\"{t}\""));
        }
        assert!("extreme"
            .parse::<Thinking>()
            .unwrap_err()
            .contains("extreme"));
    }
}
