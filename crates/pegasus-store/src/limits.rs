//! Per-project limits (DESIGN.md §12): `limits: {memory: 2G, pids: 512, cpu: 1.0}` in config.yml
//! (the default for every project) and in PROJECT.md (wins per key). pegasusd enforces them
//! with cgroups (`pegasus_sandbox::cgroups`); this module only reads and checks them.
//!
//! Sizes are strict: a whole number and one unit, `K`, `M` or `G` (powers of 1024), e.g.
//! `512M` or `2G`. Anything else (`2GB`, `1.5G`, `2048`, `-1M`) is refused at load with the
//! file line and key, never read as something else.

use std::fmt;

use serde::{Deserialize, Deserializer, Serialize, Serializer};

/// The least memory a project may be given: its worker lives within it too.
pub const MIN_MEMORY: u64 = 32 << 20;
/// The fewest processes and threads a project's commands may be given (a shell and a pipe).
pub const MIN_PIDS: u64 = 8;
/// The cpu range, in cores.
pub const CPU_RANGE: std::ops::RangeInclusive<f64> = 0.01..=1024.0;

/// A number of bytes, written with a unit (`64M`, `2G`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub struct Size(pub u64);

impl Size {
    /// Parses `<digits><K|M|G>` (either case); the error is one line saying what to write.
    pub fn parse(text: &str) -> Result<Size, String> {
        let bad = || {
            format!(
                "`{}` is not a size: write a whole number and K, M or G, e.g. 512M or 2G",
                text.escape_debug()
            )
        };
        let Some(last) = text.chars().last() else {
            return Err(bad());
        };
        let shift = match last {
            'K' | 'k' => 10,
            'M' | 'm' => 20,
            'G' | 'g' => 30,
            _ => return Err(bad()),
        };
        let digits = &text[..text.len() - 1];
        if digits.is_empty() || !digits.bytes().all(|b| b.is_ascii_digit()) {
            return Err(bad());
        }
        let n: u64 = digits.parse().map_err(|_| bad())?;
        n.checked_mul(1u64 << shift)
            .filter(|b| *b < (1u64 << 62))
            .map(Size)
            .ok_or_else(|| format!("`{}` is too large", text.escape_debug()))
    }

    /// The size in bytes.
    pub fn bytes(self) -> u64 {
        self.0
    }
}

impl fmt::Display for Size {
    /// In the largest unit that says it exactly: `2G`, `1536M`, `100K`; bytes otherwise.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let b = self.0;
        for (shift, unit) in [(30, 'G'), (20, 'M'), (10, 'K')] {
            if b != 0 && b.is_multiple_of(1u64 << shift) {
                return write!(f, "{}{unit}", b >> shift);
            }
        }
        write!(f, "{b}")
    }
}

impl Serialize for Size {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(&self.to_string())
    }
}

impl<'de> Deserialize<'de> for Size {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Size, D::Error> {
        struct V;
        impl serde::de::Visitor<'_> for V {
            type Value = Size;
            fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
                f.write_str("a size such as 512M or 2G")
            }
            fn visit_str<E: serde::de::Error>(self, v: &str) -> Result<Size, E> {
                Size::parse(v).map_err(E::custom)
            }
            fn visit_u64<E: serde::de::Error>(self, v: u64) -> Result<Size, E> {
                Err(E::custom(format!(
                    "`{v}` has no unit: write K, M or G after it, e.g. {v}M"
                )))
            }
            fn visit_i64<E: serde::de::Error>(self, v: i64) -> Result<Size, E> {
                Err(E::custom(format!(
                    "`{v}` is not a size: write a whole number and K, M or G, e.g. 512M"
                )))
            }
            fn visit_f64<E: serde::de::Error>(self, v: f64) -> Result<Size, E> {
                Err(E::custom(format!(
                    "`{v}` is not a size: write a whole number and K, M or G, e.g. 512M"
                )))
            }
        }
        d.deserialize_any(V)
    }
}

/// `limits:` of config.yml: every key has a default.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct LimitsConfig {
    /// Memory of the worker and everything it starts; past it a command is killed.
    pub memory: Size,
    /// Processes and threads the project's commands may have at once.
    pub pids: u64,
    /// Cores' worth of cpu time the project's commands may use.
    pub cpu: f64,
}

impl Default for LimitsConfig {
    fn default() -> Self {
        LimitsConfig {
            memory: Size(2 << 30),
            pids: 512,
            cpu: 1.0,
        }
    }
}

/// `limits:` of PROJECT.md: each key given wins over config.yml's.
#[derive(Debug, Clone, Copy, Default, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct ProjectLimits {
    /// `limits.memory` of this project; `None` keeps config.yml's.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub memory: Option<Size>,
    /// `limits.pids` of this project; `None` keeps config.yml's.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub pids: Option<u64>,
    /// `limits.cpu` of this project, in cores; `None` keeps config.yml's.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub cpu: Option<f64>,
}

impl LimitsConfig {
    /// Why a value is refused: `(key, message)`, the key below `limits.`.
    pub fn check(&self) -> Result<(), (&'static str, String)> {
        check_memory(self.memory).map_err(|m| ("memory", m))?;
        check_pids(self.pids).map_err(|m| ("pids", m))?;
        check_cpu(self.cpu).map_err(|m| ("cpu", m))?;
        Ok(())
    }

    /// These limits with a project's own keys in their place.
    pub fn with(&self, p: &ProjectLimits) -> LimitsConfig {
        LimitsConfig {
            memory: p.memory.unwrap_or(self.memory),
            pids: p.pids.unwrap_or(self.pids),
            cpu: p.cpu.unwrap_or(self.cpu),
        }
    }

    /// `memory 2G, pids 512, cpu 1.0`.
    pub fn describe(&self) -> String {
        format!(
            "memory {}, pids {}, cpu {}",
            self.memory,
            self.pids,
            format_cpu(self.cpu)
        )
    }
}

/// Cores as written: `1.0`, `0.5`, `2.25`.
pub fn format_cpu(cpu: f64) -> String {
    if cpu.fract() == 0.0 {
        format!("{cpu:.1}")
    } else {
        format!("{cpu}")
    }
}

fn check_memory(m: Size) -> Result<(), String> {
    if m.0 < MIN_MEMORY {
        return Err(format!(
            "{m} is below {}, the least a project's worker needs",
            Size(MIN_MEMORY)
        ));
    }
    Ok(())
}

fn check_pids(p: u64) -> Result<(), String> {
    if p < MIN_PIDS {
        return Err(format!(
            "{p} is below {MIN_PIDS}: a command needs a few processes"
        ));
    }
    if p > 4_194_304 {
        return Err(format!("{p} is above the kernel's most (4194304)"));
    }
    Ok(())
}

fn check_cpu(c: f64) -> Result<(), String> {
    if !(c.is_finite() && CPU_RANGE.contains(&c)) {
        return Err(format!(
            "{c} is not a number of cores from 0.01 to 1024, e.g. 1.0 or 0.5"
        ));
    }
    Ok(())
}

impl ProjectLimits {
    /// PROJECT.md's `limits:` value (absent or null: none); the error is one line.
    pub fn from_yaml(v: Option<&serde_norway::Value>) -> Result<Self, String> {
        let limits: ProjectLimits = match v {
            None | Some(serde_norway::Value::Null) => return Ok(Self::default()),
            Some(v) => serde_norway::from_value(v.clone())
                .map_err(|e| format!("{e}; expected e.g. {{memory: 2G, pids: 512, cpu: 1.0}}"))?,
        };
        fn with_key(key: &'static str) -> impl Fn(String) -> String {
            move |m| format!("{key}: {m}")
        }
        if let Some(m) = limits.memory {
            check_memory(m).map_err(with_key("memory"))?;
        }
        if let Some(p) = limits.pids {
            check_pids(p).map_err(with_key("pids"))?;
        }
        if let Some(c) = limits.cpu {
            check_cpu(c).map_err(with_key("cpu"))?;
        }
        Ok(limits)
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used)]
    use super::*;

    #[test]
    fn sizes_are_strict() {
        assert_eq!(Size::parse("64M").unwrap(), Size(64 << 20));
        assert_eq!(Size::parse("2G").unwrap(), Size(2 << 30));
        assert_eq!(Size::parse("512k").unwrap(), Size(512 << 10));
        for bad in [
            "", "G", "2GB", "1.5G", "2048", "-1M", " 2G", "2 G", "2T", "0x10M", "+2G",
        ] {
            let e = Size::parse(bad).unwrap_err();
            assert!(e.contains("is not a size"), "{bad}: {e}");
        }
        assert!(Size::parse("99999999999999G")
            .unwrap_err()
            .contains("too large"));
    }

    #[test]
    fn sizes_print_in_their_largest_exact_unit() {
        for (text, shown) in [
            ("2G", "2G"),
            ("2048M", "2G"),
            ("1536M", "1536M"),
            ("100K", "100K"),
        ] {
            assert_eq!(Size::parse(text).unwrap().to_string(), shown);
        }
    }

    #[test]
    fn a_project_wins_per_key() {
        let base = LimitsConfig::default();
        let v: serde_norway::Value = serde_norway::from_str("{memory: 64M, cpu: 0.5}").unwrap();
        let p = ProjectLimits::from_yaml(Some(&v)).unwrap();
        let eff = base.with(&p);
        assert_eq!(eff.memory, Size(64 << 20));
        assert_eq!(eff.pids, 512);
        assert_eq!(eff.cpu, 0.5);
        assert_eq!(eff.describe(), "memory 64M, pids 512, cpu 0.5");
        assert_eq!(base.describe(), "memory 2G, pids 512, cpu 1.0");
    }

    #[test]
    fn bad_project_values_are_one_line() {
        for (yaml, words) in [
            ("{memory: 2GB}", "is not a size"),
            ("{memory: 2048}", "has no unit"),
            ("{memory: 1M}", "below 32M"),
            ("{pids: 2}", "below 8"),
            ("{cpu: 0}", "number of cores"),
            ("{cpu: -1.0}", "number of cores"),
            ("{disk: 1G}", "unknown field"),
        ] {
            let v: serde_norway::Value = serde_norway::from_str(yaml).unwrap();
            let e = ProjectLimits::from_yaml(Some(&v)).unwrap_err();
            assert!(e.contains(words), "{yaml}: {e}");
            assert!(!e.contains('\n'), "{yaml}: {e}");
        }
    }
}
