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

/// tablewriter's default column width limit (`MAX_ROW_WIDTH`), which every Ollama table keeps
/// except `show`'s System and License sections ([`LONG_COL_WIDTH`]).
pub const COL_WIDTH: usize = 30;
/// The limit `ollama show` sets for its Template, System and License sections.
pub const LONG_COL_WIDTH: usize = 100;

/// A borderless, left-aligned table as Ollama's tablewriter (v0.0.5) prints it (no border, no
/// whitespace trimming, four spaces of padding): every cell padded to its column's widest cell
/// and followed by four spaces, the last one too (scripts split on runs of spaces; Ollama's
/// tests compare the bytes). Cells wider than `COL_WIDTH` are wrapped ([`wrap_cell`]).
pub fn table(rows: &[Vec<String>]) -> String {
    layout(None, rows, COL_WIDTH)
}

/// [`table`] with another column width limit.
pub fn table_width(rows: &[Vec<String>], col_width: usize) -> String {
    layout(None, rows, col_width)
}

/// [`table`] under a header row, which tablewriter ends with one space instead of four.
pub fn header_table(header: &[&str], rows: &[Vec<String>]) -> String {
    layout(Some(header), rows, COL_WIDTH)
}

/// Columns a string takes on a terminal (East Asian wide characters count two).
fn width(s: &str) -> usize {
    unicode_width::UnicodeWidthStr::width(s)
}

/// tablewriter's `WrapString`: `s` (newlines as spaces) split on single spaces, broken into
/// lines of at most `lim` columns with the least raggedness (the sum over lines of the squared
/// room left), a word wider than `lim` raising `lim` to its width.
pub fn wrap_string(s: &str, lim: usize) -> Vec<String> {
    let joined = s.replace('\n', " ");
    let words: Vec<&str> = joined.split(' ').collect();
    let lim = words.iter().map(|w| width(w)).fold(lim, usize::max);
    wrap_words(&words, lim)
        .into_iter()
        .map(|line| line.join(" "))
        .collect()
}

/// tablewriter's `WrapWords` (one column between words, a penalty of 1e5 for an over-long
/// line): the minimal-raggedness breaks, found from the last word back; ties keep the earliest
/// break. The last line costs nothing.
fn wrap_words<'a>(words: &[&'a str], lim: usize) -> Vec<Vec<&'a str>> {
    const PENALTY: i64 = 100_000;
    let n = words.len();
    let lim = lim as i64;
    let widths: Vec<i64> = words.iter().map(|w| width(w) as i64).collect();
    // length(i, j): words i..=j on one line.
    let length = |i: usize, j: usize| -> i64 { widths[i..=j].iter().sum::<i64>() + (j - i) as i64 };
    let mut next = vec![n; n];
    let mut cost = vec![i64::from(i32::MAX); n];
    for i in (0..n).rev() {
        if length(i, n - 1) <= lim {
            cost[i] = 0;
            next[i] = n;
            continue;
        }
        for j in i + 1..n {
            let len = length(i, j - 1);
            let d = lim - len;
            let mut c = d * d + cost[j];
            if len > lim {
                c += PENALTY;
            }
            if c < cost[i] {
                cost[i] = c;
                next[i] = j;
            }
        }
    }
    let mut lines = Vec::new();
    let mut i = 0;
    while i < n {
        lines.push(words[i..next[i]].to_vec());
        i = next[i];
    }
    lines
}

/// How tablewriter lays out one cell (its `parseDimension` with auto-wrap and reflow on): the
/// cell's lines are joined into one paragraph and wrapped at the widest line or `col_width`,
/// whichever is less; returns the lines and the width the cell needs (more than `col_width`
/// when one word is wider).
pub fn wrap_cell(cell: &str, col_width: usize) -> (Vec<String>, usize) {
    let raw: Vec<&str> = cell.split('\n').collect();
    let max = raw
        .iter()
        .map(|l| width(l))
        .max()
        .unwrap_or(0)
        .min(col_width);
    let lines = wrap_string(&raw.join(" "), max);
    let need = lines.iter().map(|l| width(l)).fold(max, usize::max);
    (lines, need)
}

fn layout(header: Option<&[&str]>, rows: &[Vec<String>], col_width: usize) -> String {
    let wrap_row = |cells: Vec<&str>| -> Vec<(Vec<String>, usize)> {
        cells.into_iter().map(|c| wrap_cell(c, col_width)).collect()
    };
    let header = header.map(|h| wrap_row(h.to_vec()));
    let rows: Vec<_> = rows
        .iter()
        .map(|r| wrap_row(r.iter().map(String::as_str).collect()))
        .collect();
    let mut widths: Vec<usize> = Vec::new();
    for row in header.iter().chain(&rows) {
        for (i, (_, w)) in row.iter().enumerate() {
            if widths.len() <= i {
                widths.push(0);
            }
            widths[i] = widths[i].max(*w);
        }
    }
    let mut out = String::new();
    // A row is as tall as its tallest cell; tablewriter fills a shorter cell's missing lines
    // with two spaces, so a wrapped row's next lines are indented two more in an empty column.
    let mut print = |row: &[(Vec<String>, usize)], last_sep: &str| {
        let height = row.iter().map(|(l, _)| l.len()).max().unwrap_or(0);
        for x in 0..height {
            for (i, (lines, _)) in row.iter().enumerate() {
                let cell = lines.get(x).map_or("  ", String::as_str);
                out.push_str(cell);
                out.extend(std::iter::repeat_n(
                    ' ',
                    widths[i].saturating_sub(width(cell)),
                ));
                out.push_str(if i + 1 == row.len() { last_sep } else { "    " });
            }
            out.push('\n');
        }
    };
    if let Some(h) = &header {
        print(h, " ");
    }
    for row in &rows {
        print(row, "    ");
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
    fn wrapping_like_tablewriter() {
        let w = |s: &str, lim: usize| wrap_string(s, lim);
        // Least raggedness, not greedy: greedy would leave "cc" alone on the second line.
        assert_eq!(w("aaa bb cc ddddd", 6), ["aaa", "bb cc", "ddddd"]);
        assert_eq!(w("aaa bb cc ddd", 6), ["aaa bb", "cc ddd"]);
        // A word wider than the limit raises the limit to its width.
        assert_eq!(w("abcdefgh ij", 5), ["abcdefgh", "ij"]);
        // Single spaces split: a double space is an empty word, kept.
        assert_eq!(w("a  b", 10), ["a  b"]);
        assert_eq!(w("", 0), [""]);
        // Wide characters count two columns.
        assert_eq!(w("日本 語", 4), ["日本", "語"]);

        // A cell: its lines reflow into one paragraph wrapped at its widest line (at most the
        // limit), so short lines stay lines; the width it needs is at least that line's.
        assert_eq!(wrap_cell("", 30), (vec![String::new()], 0));
        assert_eq!(wrap_cell("short", 30), (vec!["short".to_owned()], 5));
        assert_eq!(
            wrap_cell("a\nb", 30),
            (vec!["a".to_owned(), "b".to_owned()], 1)
        );
        assert_eq!(
            wrap_cell("aaa bb cc ddddd", 6),
            (vec!["aaa".into(), "bb cc".into(), "ddddd".into()], 6)
        );
        // A name without spaces is never broken, however long.
        let long = "hf.co/someone/a-very-long-model-name-GGUF:Q4_K_M";
        assert_eq!(wrap_cell(long, 30), (vec![long.to_owned()], long.len()));
    }

    #[test]
    fn wrapped_rows() {
        // The other cells of a wrapped row are filled with two spaces (tablewriter's filler),
        // padded to their column: an empty column then indents the next lines by two more.
        let rows = vec![vec![String::new(), "k".into(), "aaa bb cc ddddd".into()]];
        assert_eq!(
            table_width(&rows, 6),
            "    k    aaa       \n\
             \x20           bb cc     \n\
             \x20           ddddd     \n"
        );
        // A header wraps the same way and still ends with one space.
        let rows = vec![vec!["x".into(), "aaa bb cc ddddd".into()]];
        assert_eq!(
            layout(Some(&["N", "V"]), &rows, 6),
            "N    V      \nx    aaa       \n      bb cc     \n      ddddd     \n"
        );
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
