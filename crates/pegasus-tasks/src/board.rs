//! The board view (DESIGN.md §7): ten states folded into the four columns a person scans.

use serde::Serialize;

use crate::task::Task;

/// A column of the task board. Which states land where is decided by
/// [`TaskState::column`](crate::TaskState::column) alone.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum BoardColumn {
    /// Not started: draft, planned, ready, blocked.
    Todo,
    /// Running.
    InProgress,
    /// Verifying or verified.
    Review,
    /// Finished one way or another: done, failed, cancelled.
    Done,
}

impl BoardColumn {
    /// Every column, left to right.
    pub const ALL: [BoardColumn; 4] = [
        BoardColumn::Todo,
        BoardColumn::InProgress,
        BoardColumn::Review,
        BoardColumn::Done,
    ];

    /// The heading shown above the column.
    pub fn title(self) -> &'static str {
        match self {
            BoardColumn::Todo => "todo",
            BoardColumn::InProgress => "in progress",
            BoardColumn::Review => "review",
            BoardColumn::Done => "done",
        }
    }
}

/// Groups tasks by column, in column order. All four columns are always present (possibly
/// empty) so a renderer draws a stable layout; inside a column the input order is kept, so
/// `board(&store.list()?)` shows the newest task first.
pub fn board(tasks: &[Task]) -> Vec<(BoardColumn, Vec<&Task>)> {
    BoardColumn::ALL
        .into_iter()
        .map(|c| {
            (
                c,
                tasks
                    .iter()
                    .filter(|t| crate::state::column(t.state) == c)
                    .collect(),
            )
        })
        .collect()
}
