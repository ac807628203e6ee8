//! PROJECT.md's `asana:` key (DESIGN.md §17): the Asana project that is this project's board.
//! Checked with the file, like `mcp_servers`: a bad value makes PROJECT.md invalid, with its
//! line, so a typo never leaves a board silently unsynced.

use serde::{Deserialize, Serialize};

/// `asana: {project: "GID"}`: the board of a project, synced by pegasusd.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct AsanaBoard {
    /// The Asana project's gid (the digits in its URL, `app.asana.com/0/<gid>/...`).
    pub project: String,
}

/// Reads `asana:`; absent or `null` is `None`. The error says what to write.
pub fn parse_asana(value: Option<&serde_norway::Value>) -> Result<Option<AsanaBoard>, String> {
    let Some(value) = value.filter(|v| !v.is_null()) else {
        return Ok(None);
    };
    let board: AsanaBoard = serde_norway::from_value(value.clone())
        .map_err(|e| format!("must be {{project: \"GID\"}} with the Asana project's gid ({e})"))?;
    if board.project.is_empty() || !board.project.bytes().all(|b| b.is_ascii_digit()) {
        return Err(format!(
            "`project` is `{}`: give the Asana project's gid, the digits in its URL (app.asana.com/0/<gid>/...), quoted",
            board.project.escape_debug()
        ));
    }
    Ok(Some(board))
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used)]
    use super::*;

    fn read(yaml: &str) -> Result<Option<AsanaBoard>, String> {
        let v: serde_norway::Value = serde_norway::from_str(yaml).unwrap();
        parse_asana(Some(&v))
    }

    #[test]
    fn a_board_is_a_quoted_gid_and_nothing_else() {
        assert_eq!(
            read("{project: \"1204\"}"),
            Ok(Some(AsanaBoard {
                project: "1204".into()
            }))
        );
        assert_eq!(read("null"), Ok(None));
        assert_eq!(parse_asana(None), Ok(None));
        assert!(read("{project: \"abc\"}").unwrap_err().contains("gid"));
        assert!(read("{project: \"\"}").is_err());
        assert!(read("{project: \"1\", section: x}")
            .unwrap_err()
            .contains("unknown field"));
        assert!(read("\"1204\"").is_err());
    }
}
