//! The costs page's charts: inline SVG written on the server (no script, no library, nothing
//! loaded), scaled to the page's width by their `viewBox`. Each bar carries a `<title>` with
//! its exact figure, and the page lists the same figures in a table beside it.

use crate::words::usd;
use chrono::NaiveDate;
use maud::{html, Markup};

/// Days a per-day chart spans at most.
pub(crate) const DAYS: i64 = 30;

const W: f64 = 640.0;

/// The last [`DAYS`] days up to `today`, each with its spend (0 for a day without calls, so
/// the axis is time); none when nothing was spent in them.
pub(crate) fn day_series<'a>(
    by_day: impl IntoIterator<Item = (&'a String, f64)>,
    today: NaiveDate,
) -> Vec<(NaiveDate, f64)> {
    let spent: Vec<(NaiveDate, f64)> = by_day
        .into_iter()
        .filter_map(|(d, usd)| Some((NaiveDate::parse_from_str(d, "%Y-%m-%d").ok()?, usd)))
        .collect();
    let first = today - chrono::Duration::days(DAYS - 1);
    if !spent.iter().any(|(d, _)| (first..=today).contains(d)) {
        return Vec::new();
    }
    first
        .iter_days()
        .take_while(|d| *d <= today)
        .map(|d| {
            let usd = spent.iter().filter(|(s, _)| *s == d).map(|(_, u)| u).sum();
            (d, usd)
        })
        .collect()
}

/// Vertical bars, one a day.
pub(crate) fn per_day(days: &[(NaiveDate, f64)]) -> Markup {
    let (h, left, bottom, top) = (180.0, 56.0, 22.0, 8.0);
    let max = days.iter().map(|(_, u)| *u).fold(0.0f64, f64::max);
    let scale = if max > 0.0 {
        (h - bottom - top) / max
    } else {
        0.0
    };
    let slot = (W - left) / days.len().max(1) as f64;
    let label_every = days.len().div_ceil(6).max(1);
    html! {
        svg .chart #chart-days viewBox={ "0 0 " (W) " " (h) } role="img"
            aria-label="Spend per day" preserveAspectRatio="xMinYMin meet" {
            line .axis x1=(left) y1=(h - bottom) x2=(W) y2=(h - bottom) {}
            text .label x=(left - 6.0) y=(top + 10.0) text-anchor="end" { (usd(max)) }
            text .label x=(left - 6.0) y=(h - bottom) text-anchor="end" { "$0" }
            @for (i, (day, spent)) in days.iter().enumerate() {
                @let bar = if *spent > 0.0 { (spent * scale).max(1.5) } else { 0.0 };
                @let x = left + i as f64 * slot;
                rect .bar x=(x + slot * 0.15) y=(h - bottom - bar) width=(slot * 0.7) height=(bar) {
                    title { (day.format("%a %e %b")) ": " (usd(*spent)) }
                }
                // The last day (today) is labelled at the right edge, so it is not cut off.
                @if i + 1 == days.len() {
                    text .label x=(W - 2.0) y=(h - 6.0) text-anchor="end" { (day.format("%e %b")) }
                } @else if i % label_every == 0 && i + label_every / 2 < days.len() {
                    text .label x=(x + slot / 2.0) y=(h - 6.0) text-anchor="middle" { (day.format("%e %b")) }
                }
            }
        }
    }
}

/// Horizontal bars, one a project, the most spent first.
pub(crate) fn per_project(projects: &[(String, f64)]) -> Markup {
    let (row, label) = (26.0, 150.0);
    let mut sorted: Vec<&(String, f64)> = projects.iter().collect();
    sorted.sort_by(|a, b| b.1.total_cmp(&a.1).then_with(|| a.0.cmp(&b.0)));
    let max = sorted.first().map_or(0.0, |(_, u)| *u);
    let room = W - label - 90.0;
    let h = row * sorted.len().max(1) as f64 + 4.0;
    html! {
        svg .chart #chart-projects viewBox={ "0 0 " (W) " " (h) } role="img"
            aria-label="Spend per project" preserveAspectRatio="xMinYMin meet" {
            @for (i, (name, spent)) in sorted.iter().enumerate() {
                @let y = i as f64 * row + 4.0;
                @let bar = if max > 0.0 { (spent / max * room).max(if *spent > 0.0 { 1.5 } else { 0.0 }) } else { 0.0 };
                text .label x=(label - 8.0) y=(y + row * 0.62) text-anchor="end" { (short(name, 22)) }
                rect .bar x=(label) y=(y + 3.0) width=(bar) height=(row - 8.0) {
                    title { (name) ": " (usd(*spent)) }
                }
                text .label x=(label + bar + 6.0) y=(y + row * 0.62) { (usd(*spent)) }
            }
        }
    }
}

/// `s` cut at `max` characters, with `…` when something was left out.
pub(crate) fn short(s: &str, max: usize) -> String {
    match s.char_indices().nth(max) {
        None => s.to_string(),
        Some((i, _)) => format!("{}…", &s[..i]),
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used)]
    use super::*;

    fn day(s: &str) -> NaiveDate {
        NaiveDate::parse_from_str(s, "%Y-%m-%d").unwrap()
    }

    #[test]
    fn the_axis_is_the_last_thirty_days_with_quiet_days_at_zero() {
        let by_day = [
            ("2026-01-01".to_string(), 9.0),
            ("2026-03-02".to_string(), 1.0),
            ("2026-03-04".to_string(), 2.0),
        ];
        let series = day_series(by_day.iter().map(|(d, u)| (d, *u)), day("2026-03-05"));
        assert_eq!(series.len(), DAYS as usize);
        assert_eq!(series[0], (day("2026-02-04"), 0.0));
        assert_eq!(
            &series[series.len() - 4..],
            [
                (day("2026-03-02"), 1.0),
                (day("2026-03-03"), 0.0),
                (day("2026-03-04"), 2.0),
                (day("2026-03-05"), 0.0),
            ]
        );
        assert!(day_series(by_day.iter().map(|(d, u)| (d, *u)), day("2027-01-01")).is_empty());
    }

    #[test]
    fn bars_are_scaled_to_the_largest_and_carry_their_figures() {
        let svg = per_day(&[(day("2026-03-02"), 1.0), (day("2026-03-03"), 0.5)]).into_string();
        assert_eq!(svg.matches("<rect").count(), 2, "{svg}");
        assert!(svg.contains("$1.00"), "{svg}");
        assert!(svg.contains("$0.50"), "{svg}");
        let svg = per_project(&[("b".into(), 1.0), ("a<x>".into(), 3.0)]).into_string();
        assert!(svg.contains("a&lt;x&gt;: $3.00"), "{svg}");
        assert!(
            svg.find("a&lt;x&gt;").unwrap() < svg.find(">b<").unwrap(),
            "most spent first: {svg}"
        );
    }
}
