//! Stream-splitting helpers for parser tests: a parser must give the same result for every
//! chunking of its input.

use std::fmt::Display;

use serde_json::Value as J;

use super::{Parsed, Parser};

/// Feed `chunks` in order, the last with `done`, and gather everything.
pub fn run(p: &mut dyn Parser, chunks: &[&str]) -> Parsed {
    let mut all = Parsed::default();
    for (i, c) in chunks.iter().enumerate() {
        all.extend(p.add(c, i + 1 == chunks.len()));
    }
    if chunks.is_empty() {
        all.extend(p.add("", true));
    }
    all
}

/// Call `f` with: the whole text, one char per chunk, and every split into three parts at char
/// boundaries (which covers every tag split at every byte a tokenizer could produce).
pub fn every_split(s: &str, mut f: impl FnMut(&[&str])) {
    f(&[s]);
    let chars: Vec<&str> = s
        .char_indices()
        .map(|(i, c)| &s[i..i + c.len_utf8()])
        .collect();
    f(&chars);
    let cuts: Vec<usize> = (0..=s.len()).filter(|&i| s.is_char_boundary(i)).collect();
    for (x, &i) in cuts.iter().enumerate() {
        for &j in &cuts[x..] {
            f(&[&s[..i], &s[i..j], &s[j..]]);
        }
    }
}

/// The result of `text` in one chunk, after checking that every chunking gives the same
/// content, thinking and calls (ids aside).
pub fn same_for_every_split<P: Parser>(make: impl Fn() -> P, text: &str) -> Parsed {
    let want = run(&mut make(), &[text]);
    let calls = |p: &Parsed| {
        p.tool_calls
            .iter()
            .map(|c| (c.index, c.name.clone(), c.arguments.clone()))
            .collect::<Vec<_>>()
    };
    every_split(text, |chunks| {
        let got = run(&mut make(), chunks);
        assert_eq!(
            (&got.content, &got.thinking, calls(&got)),
            (&want.content, &want.thinking, calls(&want)),
            "{chunks:?}"
        );
    });
    want
}

/// Checks that every chunking of `text` parses to `content`, `thinking` and `calls` (each a name
/// and its arguments as printed JSON, so key order counts), the calls indexed 0, 1, … with ids
/// from `call_id`.
pub fn check<P: Parser>(
    make: impl Fn() -> P,
    text: &str,
    (content, thinking, calls): (&str, &str, &[(&str, impl Display)]),
) {
    let want: Vec<(&str, String)> = calls.iter().map(|(n, a)| (*n, a.to_string())).collect();
    every_split(text, |chunks| {
        let r = run(&mut make(), chunks);
        let got: Vec<(&str, String)> = r
            .tool_calls
            .iter()
            .map(|c| (c.name.as_str(), J::Object(c.arguments.clone()).to_string()))
            .collect();
        assert_eq!(
            (r.content.as_str(), r.thinking.as_str(), &got),
            (content, thinking, &want),
            "{chunks:?}"
        );
        for (i, c) in r.tool_calls.iter().enumerate() {
            assert_eq!(c.index, i as i64, "{chunks:?}");
            assert!(c.id.starts_with("call_") && c.id.len() == 13, "{}", c.id);
        }
    });
}
