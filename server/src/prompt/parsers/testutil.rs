//! Stream-splitting helpers for parser tests: a parser must give the same result for every
//! chunking of its input.

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
