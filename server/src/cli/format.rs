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
        // Years from the whole hours, not the rounded ones (Ollama's `int(d.Hours())`).
        _ => format!("{} years", d.as_secs() / 3600 / 24 / 365),
    }
}

/// An RFC 3339 time from the API; `None` for one that does not parse and for Go's zero time
/// (`0001-01-01T00:00:00Z`, what an Ollama server sends for "no time"), which Ollama's
/// `HumanTime` shows as its zero value (`Never`).
pub fn parse_time(s: &str) -> Option<SystemTime> {
    let t = time::OffsetDateTime::parse(s, &time::format_description::well_known::Rfc3339).ok()?;
    (t.year() > 1).then(|| t.into())
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

/// A borderless, left-aligned table as Ollama's tablewriter prints it (no border, no
/// whitespace trimming, four spaces of padding): every cell padded to its column's widest cell
/// and followed by four spaces, the last one too (scripts split on runs of spaces; Ollama's
/// tests compare the bytes).
pub fn table(rows: &[Vec<String>]) -> String {
    layout(None, rows)
}

/// [`table`] under a header row, which tablewriter ends with one space instead of four.
pub fn header_table(header: &[&str], rows: &[Vec<String>]) -> String {
    layout(Some(header), rows)
}

fn layout(header: Option<&[&str]>, rows: &[Vec<String>]) -> String {
    let cols = rows
        .iter()
        .map(Vec::len)
        .chain(header.map(<[&str]>::len))
        .max()
        .unwrap_or(0);
    let mut widths = vec![0usize; cols];
    let cells = header
        .into_iter()
        .flat_map(|h| h.iter().map(|c| c.to_string()).enumerate())
        .chain(rows.iter().flat_map(|r| r.iter().cloned().enumerate()));
    for (i, cell) in cells {
        widths[i] = widths[i].max(cell.chars().count());
    }
    let pad = |line: &mut String, i: usize, cell: &str| {
        line.push_str(cell);
        line.extend(std::iter::repeat_n(' ', widths[i] - cell.chars().count()));
    };
    let mut out = String::new();
    if let Some(h) = header {
        for (i, cell) in h.iter().enumerate() {
            pad(&mut out, i, cell);
            out.push_str(if i + 1 == h.len() { " " } else { "    " });
        }
        out.push('\n');
    }
    for row in rows {
        for (i, cell) in row.iter().enumerate() {
            pad(&mut out, i, cell);
            out.push_str("    ");
        }
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
        // Just under two years, rounded up to the hour, is still one year in whole hours.
        assert_eq!(human_duration(s(2 * 365 * 24 * 3600 - 1)), "1 years");
        let now = SystemTime::now();
        assert_eq!(human_time(now - s(7200), now), "2 hours ago");
        assert_eq!(human_time(now + s(48 * 3600), now), "2 days from now");
        assert_eq!(human_time(now + s(200 * 365 * 24 * 3600), now), "Forever");
        assert_eq!(parse_time("0001-01-01T00:00:00Z"), None);
        assert_eq!(parse_time("garbage"), None);
        assert!(parse_time("2024-05-01T10:00:00.5+02:00").is_some());
        assert_eq!(human_time(now + s(300), now), "5 minutes from now");
    }

    #[test]
    fn table_layout() {
        // Ollama's own list case (cmd_test.go TestListHandler): padded cells, four spaces after
        // each, one after the last header cell.
        let rows = vec![
            vec![
                "model1".into(),
                "sha256:abc12".into(),
                "1.0 KB".into(),
                "24 hours ago".into(),
            ],
            vec![
                "model2".into(),
                "sha256:def45".into(),
                "2.0 KB".into(),
                "2 days ago".into(),
            ],
        ];
        assert_eq!(
            header_table(&["NAME", "ID", "SIZE", "MODIFIED"], &rows),
            "NAME      ID              SIZE      MODIFIED     \n\
             model1    sha256:abc12    1.0 KB    24 hours ago    \n\
             model2    sha256:def45    2.0 KB    2 days ago      \n"
        );
        // And its show section (TestShowInfo): an empty first column indents by four.
        let rows = vec![
            vec![String::new(), "architecture".into(), "test".into()],
            vec![String::new(), "parameters".into(), "7B".into()],
        ];
        assert_eq!(
            table(&rows),
            "    architecture    test    \n    parameters      7B      \n"
        );
    }
}
