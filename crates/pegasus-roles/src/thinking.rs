//! How hard a role's model should think, and what that means on each provider's wire.
//!
//! Roles speak in four levels so a role file never depends on a provider; the gateway turns
//! the level into Anthropic's token budget or OpenAI's effort name with the two functions here,
//! so both formats agree on what "medium" costs.

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

/// Anthropic `thinking.budget_tokens` for a level; `None` means send no thinking block.
pub fn anthropic_budget(t: Thinking) -> Option<u32> {
    match t {
        Thinking::Off => None,
        Thinking::Low => Some(1024),
        Thinking::Medium => Some(4096),
        Thinking::High => Some(16384),
    }
}

/// OpenAI `reasoning_effort` for a level; `None` means leave the field out, since
/// non-reasoning models reject it.
pub fn openai_effort(t: Thinking) -> Option<&'static str> {
    match t {
        Thinking::Off => None,
        other => Some(other.as_str()),
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used)]
    use super::*;

    #[test]
    fn levels_map_onto_both_wire_formats() {
        assert_eq!(anthropic_budget(Thinking::Off), None);
        assert_eq!(anthropic_budget(Thinking::Low), Some(1024));
        assert_eq!(anthropic_budget(Thinking::Medium), Some(4096));
        assert_eq!(anthropic_budget(Thinking::High), Some(16384));
        assert_eq!(openai_effort(Thinking::Off), None);
        assert_eq!(openai_effort(Thinking::Low), Some("low"));
        assert_eq!(openai_effort(Thinking::Medium), Some("medium"));
        assert_eq!(openai_effort(Thinking::High), Some("high"));
    }

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
