//! Grammar masks behind the gate (`grammar::gate`, on when runner-llamacpp's whole model is on a
//! GPU), in a process of its own since the gate is process-wide: a mask the engine needs before
//! its next launch (the row after a fast-forward run, a draft row after an accepted token) is
//! computed at once, not after the gate's limit, and deferred commits walk the grammar as
//! immediate ones do.

use runner_core::grammar::{gate, Grammars};
use runner_core::sampling::TokenMask;
use runner_core::Token;
use runner_protocol::Constraint;
use std::time::Instant;
use toktrie::ApproximateTokEnv;

/// llguidance's single-byte test vocabulary: bytes 0..=255, then six special tokens, the last
/// the EOS (as runner-core's grammar unit tests set it up).
const EOS: Token = 261;
const N: usize = 262;

#[test]
fn masks_wanted_before_the_next_launch_do_not_wait_for_it() {
    gate::enable();
    let specials = [
        "<|tool|>",
        "<|/tool|>",
        "<|user|>",
        "<|system|>",
        "<|assistant|>",
        "<|end|>",
    ]
    .iter()
    .zip(256u32..)
    .map(|(s, i)| (s.to_string(), i))
    .collect();
    let g = Grammars::new(ApproximateTokEnv::single_byte_env(), specials, vec![EOS]).unwrap();
    let schema = serde_json::json!({
        "type": "object",
        "properties": {"name": {"type": "string"}, "n": {"type": "integer"}},
        "required": ["name", "n"]
    });
    let c = Constraint::JsonSchema {
        schema,
        thinking_close: vec![],
    };
    let text = r#"{"name": "a cat called Rex", "n": 12345}"#;
    let mut m = g.mask(&c).unwrap();
    // How many masks took the gate's whole limit: held back, every one would; a loaded machine
    // may stall a few.
    let mut slow = 0;
    for (i, &b) in text.as_bytes().iter().enumerate() {
        // No step is ever launched: each mask is wanted before the next launch.
        let mut logits = vec![0.0f32; N];
        let started = Instant::now();
        m.apply(&mut logits);
        slow += usize::from(started.elapsed() >= gate::LIMIT);
        assert!(
            logits[b as usize].is_finite(),
            "byte {i} ({:?}) masked",
            b as char
        );
        m.commit(b as Token);
        if i % 2 == 0 {
            m.flush();
        }
    }
    let mut logits = vec![0.0f32; N];
    m.apply(&mut logits);
    assert!(logits[EOS as usize].is_finite(), "the object is complete");
    assert!(
        slow < text.len() / 4,
        "{slow} of {} masks waited the gate's limit",
        text.len()
    );
}
