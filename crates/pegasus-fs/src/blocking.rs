//! The one way async code runs blocking work (file writes that fsync, task locks, git, a
//! directory scan): on tokio's blocking pool, so a slow disk never stalls an async thread.

/// Blocking work that never returned: it panicked, or the runtime shut down before it ran.
/// Its text is tokio's (`task 12 panicked with message "..."`), which callers put in their own
/// error.
#[derive(Debug, thiserror::Error)]
#[error("{0}")]
pub struct BlockingError(#[from] tokio::task::JoinError);

/// Runs `f` on tokio's blocking pool and gives back what it returned. Work that returns a
/// `Result` comes back as `Result<Result<T, E>, BlockingError>`: the caller decides what a
/// panic means (usually its own error type's variant for work that failed inside).
pub async fn blocking<T: Send + 'static>(
    f: impl FnOnce() -> T + Send + 'static,
) -> Result<T, BlockingError> {
    Ok(tokio::task::spawn_blocking(f).await?)
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used)]
    use super::*;

    #[tokio::test]
    async fn the_work_runs_off_the_async_thread_and_its_value_comes_back() {
        let here = std::thread::current().id();
        let (value, there) = blocking(move || (6 * 7, std::thread::current().id()))
            .await
            .unwrap();
        assert_eq!(value, 42);
        assert_ne!(here, there);
    }

    #[tokio::test]
    async fn a_panic_is_an_error_that_says_so() {
        let r = blocking(|| -> u32 { panic!("disk on fire") }).await;
        let err = r.unwrap_err();
        assert!(err.to_string().contains("panicked"), "{err}");
    }
}
