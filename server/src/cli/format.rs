//! Terminal formatting shared by the client commands, matching Ollama's output: decimal human
//! sizes (`4.7 GB`), relative times (`2 hours ago`), and borderless tables whose columns are
//! left-aligned and separated by four spaces.

use std::time::{Duration, SystemTime};

/// Ollama's `format.HumanBytes` (powers of 1000).
pub fn human_bytes(b: u64) -> String {
    const UNITS: [(u64, &str); 4] = [
        (1_000_000_000_000, "TB"),
        (1_000_000_000, "GB"),
        (1_000_000, "MB"),
        (1_000, "KB"),
    ];
    let Some((div, unit)) = UNITS.iter().find(|(div, _)| b >= *div) else {
        return format!("{b} B");
    };
    let value = b as f64 / *div as f64;
    if value >= 10.0 || value == value.trunc() {
        format!("{} {unit}", value.trunc() as u64)
    } else {
        format!("{value:.1} {unit}")
    }
}

/// Ollama's `humanDuration`.
pub fn human_duration(d: Duration) -> String {
    let seconds = d.as_secs();
    match seconds {
        0 => return "Less than a second".into(),
        1 => return "1 second".into(),
        2..=59 => return format!("{seconds} seconds"),
        _ => {}
    }
    let minutes = seconds / 60;
    match minutes {
        1 => return "About a minute".into(),
        2..=59 => return format!("{minutes} minutes"),
        _ => {}
    }
    let hours = (d.as_secs_f64() / 3600.0).round() as u64;
    match hours {
        1 => "About an hour".into(),
        h if h < 48 => format!("{h} hours"),
        h if h < 24 * 7 * 2 => format!("{} days", h / 24),
        h if h < 24 * 30 * 2 => format!("{} weeks", h / 24 / 7),
        h if h < 24 * 365 * 2 => format!("{} months", h / 24 / 30),
        h => format!("{} years", h / 24 / 365),
    }
}

/// Ollama's `HumanTime`: "3 hours ago", "5 minutes from now".
pub fn human_time(t: SystemTime, now: SystemTime) -> String {
    match now.duration_since(t) {
        Ok(ago) => format!("{} ago", human_duration(ago)),
        Err(e) => {
            let ahead = e.duration();
            if ahead.as_secs() / 3600 / 24 / 365 > 20 {
                "Forever".into()
            } else {
                format!("{} from now", human_duration(ahead))
            }
        }
    }
}

/// A borderless, left-aligned table (tablewriter as Ollama configures it): every column padded
/// to its widest cell, four spaces between columns, trailing spaces trimmed.
pub fn table(rows: &[Vec<String>]) -> String {
    let cols = rows.iter().map(Vec::len).max().unwrap_or(0);
    let mut widths = vec![0usize; cols];
    for row in rows {
        for (i, cell) in row.iter().enumerate() {
            widths[i] = widths[i].max(cell.chars().count());
        }
    }
    let mut out = String::new();
    for row in rows {
        let mut line = String::new();
        for (i, cell) in row.iter().enumerate() {
            if i > 0 {
                line.push_str("    ");
            }
            line.push_str(cell);
            let pad = widths[i] - cell.chars().count();
            line.extend(std::iter::repeat_n(' ', pad));
        }
        out.push_str(line.trim_end());
        out.push('\n');
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bytes_like_ollama() {
        let cases = [
            (0, "0 B"),
            (999, "999 B"),
            (1000, "1 KB"),
            (1500, "1.5 KB"),
            (15_500, "15 KB"),
            (291_000_000, "291 MB"),
            (4_661_224_676, "4.7 GB"),
            (2_000_000_000, "2 GB"),
            (19_000_000_000, "19 GB"),
            (1_200_000_000_000, "1.2 TB"),
        ];
        for (b, want) in cases {
            assert_eq!(human_bytes(b), want, "{b}");
        }
    }

    #[test]
    fn durations_like_ollama() {
        let s = Duration::from_secs;
        let cases = [
            (Duration::from_millis(300), "Less than a second"),
            (s(1), "1 second"),
            (s(59), "59 seconds"),
            (s(60), "About a minute"),
            (s(119), "About a minute"),
            (s(120), "2 minutes"),
            (s(3599), "59 minutes"),
            (s(3600), "About an hour"),
            (s(2 * 3600 + 1700), "2 hours"),
            (s(2 * 3600 + 1900), "3 hours"),
            (s(47 * 3600), "47 hours"),
            (s(48 * 3600), "2 days"),
            (s(14 * 24 * 3600), "2 weeks"),
            (s(60 * 24 * 3600), "2 months"),
            (s(800 * 24 * 3600), "2 years"),
        ];
        for (d, want) in cases {
            assert_eq!(human_duration(d), want, "{d:?}");
        }
        let now = SystemTime::now();
        assert_eq!(human_time(now - s(7200), now), "2 hours ago");
        assert_eq!(human_time(now + s(300), now), "5 minutes from now");
    }

    #[test]
    fn table_layout() {
        let rows = vec![
            vec!["NAME".into(), "ID".into(), "SIZE".into()],
            vec!["gemma3:270m".into(), "abcdef012345".into(), "291 MB".into()],
            vec!["a:latest".into(), "0123456789ab".into(), "1 KB".into()],
        ];
        assert_eq!(
            table(&rows),
            "NAME           ID              SIZE\n\
             gemma3:270m    abcdef012345    291 MB\n\
             a:latest       0123456789ab    1 KB\n"
        );
    }
}
