//! Turning token bytes into streamed text: whole UTF-8 characters only, and stop strings cut out
//! with a partial-match holdback.
//!
//! Invariants: every string `push` returns is valid UTF-8 and never ends inside a character;
//! text that could still become the start of a stop string is held back until it cannot; once a
//! stop string appears, the text before it is released and nothing after it ever is.

/// What the caller should do after a `push`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Step {
    /// Text that is now safe to send (may be empty).
    pub text: String,
    /// A stop string matched; generation must end.
    pub stopped: bool,
}

#[derive(Debug, Default)]
pub struct TextStream {
    /// Bytes not yet forming whole characters.
    raw: Vec<u8>,
    /// Decoded text held back because its tail may start a stop string.
    held: String,
    stops: Vec<String>,
    stopped: bool,
}

impl TextStream {
    pub fn new(stops: &[String]) -> TextStream {
        TextStream {
            stops: stops.iter().filter(|s| !s.is_empty()).cloned().collect(),
            ..Default::default()
        }
    }

    /// Feed the bytes of one token.
    pub fn push(&mut self, bytes: &[u8]) -> Step {
        if self.stopped {
            return Step {
                text: String::new(),
                stopped: true,
            };
        }
        self.raw.extend_from_slice(bytes);
        let decoded = take_utf8(&mut self.raw, false);
        self.held.push_str(&decoded);
        self.release()
    }

    /// End of generation: flush incomplete bytes (as U+FFFD) and any held text that turned out
    /// not to be a stop string.
    pub fn finish(&mut self) -> String {
        if self.stopped {
            return String::new();
        }
        let rest = take_utf8(&mut self.raw, true);
        self.held.push_str(&rest);
        let step = self.release();
        if step.stopped {
            return step.text;
        }
        let mut out = step.text;
        out.push_str(&std::mem::take(&mut self.held));
        out
    }

    fn release(&mut self) -> Step {
        // Earliest stop-string occurrence wins.
        let hit = self
            .stops
            .iter()
            .filter_map(|s| self.held.find(s.as_str()))
            .min();
        if let Some(at) = hit {
            let text = self.held[..at].to_string();
            self.held.clear();
            self.stopped = true;
            return Step {
                text,
                stopped: true,
            };
        }
        let keep = self
            .stops
            .iter()
            .map(|s| partial_suffix(&self.held, s))
            .max()
            .unwrap_or(0);
        let cut = self.held.len() - keep;
        let text = self.held[..cut].to_string();
        self.held.drain(..cut);
        Step {
            text,
            stopped: false,
        }
    }
}

/// Length of the longest proper prefix of `stop` that `text` ends with. Always a char boundary
/// of `text`: a stop string starts with a lead byte, which cannot be a continuation byte.
fn partial_suffix(text: &str, stop: &str) -> usize {
    let max = text.len().min(stop.len().saturating_sub(1));
    (1..=max)
        .rev()
        .find(|&n| text.as_bytes()[text.len() - n..] == stop.as_bytes()[..n])
        .unwrap_or(0)
}

/// Remove and return the longest decodable prefix of `raw`. Invalid sequences become U+FFFD; an
/// incomplete sequence at the end stays in `raw` unless `flush`.
fn take_utf8(raw: &mut Vec<u8>, flush: bool) -> String {
    let mut out = String::new();
    let mut i = 0;
    while i < raw.len() {
        match std::str::from_utf8(&raw[i..]) {
            Ok(s) => {
                out.push_str(s);
                i = raw.len();
            }
            Err(e) => {
                let good = e.valid_up_to();
                out.push_str(std::str::from_utf8(&raw[i..i + good]).unwrap_or_default());
                i += good;
                match e.error_len() {
                    Some(bad) => {
                        out.push('\u{FFFD}');
                        i += bad;
                    }
                    None if flush => {
                        out.push('\u{FFFD}');
                        i = raw.len();
                    }
                    None => break,
                }
            }
        }
    }
    raw.drain(..i);
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn run(stops: &[&str], pieces: &[&[u8]]) -> (Vec<String>, bool, String) {
        let stops: Vec<String> = stops.iter().map(|s| s.to_string()).collect();
        let mut ts = TextStream::new(&stops);
        let mut out = Vec::new();
        let mut stopped = false;
        for p in pieces {
            let s = ts.push(p);
            out.push(s.text);
            if s.stopped {
                stopped = true;
                break;
            }
        }
        let tail = ts.finish();
        (out, stopped, tail)
    }

    #[test]
    fn multibyte_chars_are_never_split() {
        // "é" = C3 A9, "😀" = F0 9F 98 80 split across tokens.
        let (out, stopped, tail) = run(&[], &[b"a\xC3", b"\xA9b\xF0\x9F", b"\x98", b"\x80!"]);
        assert_eq!(out, vec!["a", "éb", "", "😀!"]);
        assert!(!stopped);
        assert_eq!(tail, "");
    }

    #[test]
    fn invalid_and_truncated_bytes_become_replacement_chars() {
        let (out, _, tail) = run(&[], &[b"x\xFFy", b"\xE2\x82"]);
        assert_eq!(out, vec!["x\u{FFFD}y", ""]);
        assert_eq!(tail, "\u{FFFD}");
    }

    #[test]
    fn stop_string_is_cut_and_not_included() {
        let (out, stopped, tail) = run(&["\n\n"], &[b"Hello", b" world\n", b"\nmore"]);
        assert_eq!(out, vec!["Hello", " world", ""]);
        assert!(stopped);
        assert_eq!(tail, "");
    }

    #[test]
    fn partial_match_is_held_then_released_when_it_diverges() {
        let (out, stopped, tail) = run(&["STOP"], &[b"ab ST", b"O", b"P?"]);
        // "ST" and "STO" are held; "STOP" completes the stop string.
        assert_eq!(out, vec!["ab ", "", ""]);
        assert!(stopped);
        assert_eq!(tail, "");

        let (out, stopped, tail) = run(&["STOP"], &[b"ab ST", b"Ox"]);
        assert_eq!(out, vec!["ab ", "STOx"]);
        assert!(!stopped);
        assert_eq!(tail, "");
    }

    #[test]
    fn held_prefix_is_flushed_at_the_end() {
        let (out, stopped, tail) = run(&["</end>"], &[b"done </e"]);
        assert_eq!(out, vec!["done "]);
        assert!(!stopped);
        assert_eq!(tail, "</e");
    }

    #[test]
    fn earliest_of_several_stops_wins_and_multibyte_stops_work() {
        let (out, stopped, _) = run(&["b", "é"], &[b"a\xC3\xA9b"]);
        assert_eq!(out, vec!["a"]);
        assert!(stopped);
    }
}
