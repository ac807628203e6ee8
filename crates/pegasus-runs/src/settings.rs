//! What the host (the worker) decides for the engine, resolved from config.yml and PROJECT.md
//! before the engine is built; this crate reads no configuration itself.

/// Models and limits of a run.
#[derive(Debug, Clone, PartialEq)]
pub struct RunSettings {
    /// `provider/model` for the plan call; empty = the project's model.
    pub planner_model: String,
    /// A cheap model for phase summaries; empty = the project's model.
    pub summary_model: String,
    /// A strong model for reviews; empty = the project's model.
    pub review_model: String,
    /// Total spend of all projects per UTC day at which a run pauses before its next phase
    /// (`run resume` continues it); `None` = no such check here.
    pub daily_limit_usd: Option<f64>,
    /// `max_tokens` of the plan, summary and review calls.
    pub max_tokens: u32,
}

impl Default for RunSettings {
    fn default() -> Self {
        RunSettings {
            planner_model: String::new(),
            summary_model: String::new(),
            review_model: String::new(),
            daily_limit_usd: None,
            max_tokens: 4096,
        }
    }
}
