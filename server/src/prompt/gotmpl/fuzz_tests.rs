//! A bounded fuzz target over the parser and executor, on the stable toolchain: templates of
//! random "token soup" built from template syntax pieces (seeded, so a failure reproduces),
//! parsed and executed against a small chat. The property: no panic, no abort, and each
//! template finishes within a time bound. A fixed case count keeps it to seconds in CI.

use std::time::{Duration, Instant};

use super::*;
use serde_json::json;

const PIECES: &[&str] = &[
    "{{",
    "}}",
    "{{-",
    "-}}",
    " ",
    "x",
    "\n",
    "{{if ",
    "{{else}}",
    "{{else if ",
    "{{end}}",
    "{{range ",
    "{{with ",
    "{{break}}",
    "{{continue}}",
    "{{define \"a\"}}",
    "{{template \"a\" .}}",
    "{{block \"b\" .}}",
    "(",
    ")",
    "|",
    ".",
    ".Messages",
    ".Content",
    ".Role",
    "$",
    "$x",
    ":=",
    "=",
    "$i, $v :=",
    "1",
    "100000",
    "-1",
    "1e9",
    "\"s\"",
    "'c'",
    "true",
    "nil",
    "printf",
    "\"%*d\"",
    "\"%9999999d\"",
    "\"%.*f\"",
    "\"%s%s\"",
    "print",
    "println",
    "len",
    "index",
    "slice",
    "eq",
    "and",
    "or",
    "not",
    "json",
    "{{/* c */}}",
    "{{ .Prompt }}",
    "{{ range 100000 }}",
];

/// xorshift64*: deterministic, dependency-free randomness for the generator.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_F491_4F6C_DD1D)
    }

    fn below(&mut self, n: usize) -> usize {
        (self.next() % n as u64) as usize
    }
}

fn soup(rng: &mut Rng) -> String {
    let n = 1 + rng.below(60);
    let mut s = String::new();
    for _ in 0..n {
        // Bias towards well-formed actions so the executor is reached often.
        if rng.below(3) == 0 {
            s.push_str("{{ ");
            for _ in 0..1 + rng.below(4) {
                s.push_str(PIECES[rng.below(PIECES.len())]);
                s.push(' ');
            }
            s.push_str("}}");
        } else {
            s.push_str(PIECES[rng.below(PIECES.len())]);
        }
    }
    s
}

#[test]
fn token_soup_never_panics_and_stays_bounded() {
    let data = Value::from_json_any(&json!({
        "Messages": [{"Role": "user", "Content": "hi"}, {"Role": "assistant", "Content": "yo"}],
        "Prompt": "p", "System": "s",
    }));
    let cases: u64 = std::env::var("HERD_FUZZ_CASES")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(20_000);
    let mut rng = Rng(0x9E37_79B9_7F4A_7C15);
    let (mut parsed, mut executed) = (0, 0);
    let t_all = Instant::now();
    for case in 0..cases {
        let src = soup(&mut rng);
        let t0 = Instant::now();
        if let Ok(t) = GoTemplate::parse(&src) {
            parsed += 1;
            if t.execute(&data).is_ok() {
                executed += 1;
            }
        }
        let took = t0.elapsed();
        assert!(
            took < Duration::from_secs(3),
            "case {case} took {took:?}: {src:?}"
        );
    }
    // The generator must reach the executor, or the target tests only the parser.
    assert!(parsed > cases / 100, "only {parsed} of {cases} parsed");
    assert!(executed > 0, "nothing executed");
    eprintln!(
        "{cases} cases, {parsed} parsed, {executed} executed in {:?}",
        t_all.elapsed()
    );
}
