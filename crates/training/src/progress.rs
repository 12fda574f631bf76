//! Progress bars on standard error for long work: training epochs, scoring, reading inputs.
//!
//! Shown only where standard error is a terminal; elsewhere the commands print a one-line
//! summary when they finish.

use std::io::IsTerminal;

pub use indicatif::ProgressBar;

/// Whether progress bars are drawn: standard error is a terminal.
pub fn progress_wanted() -> bool {
    std::io::stderr().is_terminal()
}

/// A bar over `len` units of work (`unit`: `events`, `entries`) with the rate in units per
/// second and the time left, or a hidden bar when `show` is false.
pub fn progress_bar(show: bool, len: u64, prefix: impl Into<String>, unit: &str) -> ProgressBar {
    if !show {
        return ProgressBar::hidden();
    }
    let template = format!(
        "{{prefix}} [{{bar:25}}] {{human_pos}}/{{human_len}} {unit}, {{rate}}/s, {{eta}} left{{msg}}"
    );
    let style = indicatif::ProgressStyle::with_template(&template)
        .unwrap_or_else(|_| indicatif::ProgressStyle::default_bar())
        .with_key(
            "rate",
            |s: &indicatif::ProgressState, w: &mut dyn std::fmt::Write| {
                let _ = w.write_str(&rate(s.per_sec()));
            },
        )
        .progress_chars("=> ");
    let bar = ProgressBar::new(len).with_style(style);
    bar.set_prefix(prefix.into());
    bar
}

/// A rate as people read it: whole units from 100 up, one decimal below, thousands grouped.
fn rate(per_sec: f64) -> String {
    if !per_sec.is_finite() || per_sec < 0.0 {
        return "?".into();
    }
    if per_sec < 100.0 {
        return format!("{per_sec:.1}");
    }
    let digits = format!("{per_sec:.0}");
    let mut out = String::with_capacity(digits.len() + digits.len() / 3);
    for (i, c) in digits.chars().enumerate() {
        if i > 0 && (digits.len() - i) % 3 == 0 {
            out.push(',');
        }
        out.push(c);
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rates_read_as_people_write_them() {
        for (x, want) in [
            (6.6318, "6.6"),
            (99.94, "99.9"),
            (100.4, "100"),
            (12_345.6, "12,346"),
            (1_234_567.0, "1,234,567"),
            (f64::NAN, "?"),
        ] {
            assert_eq!(rate(x), want, "{x}");
        }
    }
}
