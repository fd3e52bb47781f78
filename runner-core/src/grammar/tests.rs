//! Grammar behaviour over llguidance's single-byte test vocabulary (bytes 0..=255, then the
//! special tokens `<|tool|>`=256 … `<|end|>`=261, the EOS): every byte choice is a token, so these
//! tests walk the mask exactly as the sampler does, without a model.

use super::*;
use serde_json::json;
use toktrie::ApproximateTokEnv;

const TOOL: Token = 256;
const EOS: Token = 261;
const N: usize = 262;

fn grammars() -> Grammars {
    let specials = [
        ("<|tool|>", 256),
        ("<|/tool|>", 257),
        ("<|user|>", 258),
        ("<|system|>", 259),
        ("<|assistant|>", 260),
        ("<|end|>", 261),
    ]
    .into_iter()
    .map(|(s, i)| (s.to_string(), i))
    .collect();
    Grammars::new(ApproximateTokEnv::single_byte_env(), specials, vec![EOS]).unwrap()
}

fn schema(s: serde_json::Value, close: &[&str]) -> Constraint {
    Constraint::JsonSchema {
        schema: s,
        thinking_close: close.iter().map(|c| c.to_string()).collect(),
    }
}

fn allowed(m: &mut GrammarMask, t: Token) -> bool {
    let mut logits = vec![0.0f32; N];
    m.apply(&mut logits);
    logits[t as usize].is_finite()
}

/// Feed `text` byte by byte, asserting each byte is allowed when it is chosen.
fn feed(m: &mut GrammarMask, text: &str) {
    for (i, &b) in text.as_bytes().iter().enumerate() {
        assert!(
            allowed(m, b as Token),
            "byte {i} ({:?}) of {text:?} masked",
            b as char
        );
        m.commit(b as Token);
    }
}

fn nested() -> serde_json::Value {
    json!({
        "type": "object",
        "properties": {
            "name": {"type": "string"},
            "kind": {"enum": ["cat", "dog"]},
            "tags": {"type": "array", "items": {"type": "integer"}},
            "pos": {"type": "object", "properties": {"x": {"type": "number"}}, "required": ["x"]}
        },
        "required": ["name", "kind"],
        "additionalProperties": false
    })
}

#[test]
fn schema_from_the_first_token_and_eos_only_when_complete() {
    let g = grammars();
    let mut m = g.mask(&schema(nested(), &[])).unwrap();
    assert!(!allowed(&mut m, b'h' as Token), "free text before the JSON");
    assert!(!allowed(&mut m, EOS), "empty response accepted");
    feed(&mut m, r#"{"name": "Tom", "kind": ""#);
    assert!(
        !allowed(&mut m, b'x' as Token),
        "enum value outside cat/dog"
    );
    assert!(allowed(&mut m, b'd' as Token));
    let mut m = g.mask(&schema(nested(), &[])).unwrap();
    feed(
        &mut m,
        r#"{"name": "Tom", "kind": "dog", "tags": [1, 2], "pos": {"x": 1.5}"#,
    );
    assert!(!allowed(&mut m, EOS), "EOS before the closing brace");
    feed(&mut m, "}");
    assert!(allowed(&mut m, EOS));
    assert!(!allowed(&mut m, b'x' as Token), "text after the JSON");
}

#[test]
fn required_and_additional_properties_are_enforced() {
    let g = grammars();
    let mut m = g.mask(&schema(nested(), &[])).unwrap();
    feed(&mut m, r#"{"name": "a""#);
    assert!(
        !allowed(&mut m, b'}' as Token),
        "closed without required kind"
    );
    let mut m = g.mask(&schema(nested(), &[])).unwrap();
    feed(&mut m, r#"{"#);
    feed(&mut m, r#"""#);
    assert!(!allowed(&mut m, b'z' as Token), "unknown key started");
}

#[test]
fn objects_without_additional_properties_admit_only_their_keys() {
    let g = grammars();
    let open = |extra: serde_json::Value| {
        let mut s = json!({
            "type": "object",
            "properties": {"name": {"type": "string"}, "age": {"type": "integer"}},
            "required": ["name"]
        });
        if !extra.is_null() {
            s["additionalProperties"] = extra;
        }
        s
    };
    // Unset: closed, as llama.cpp's json_schema_to_grammar (and so Ollama) closes it.
    let mut m = g.mask(&schema(open(serde_json::Value::Null), &[])).unwrap();
    feed(&mut m, r#"{"name": "a", ""#);
    assert!(!allowed(&mut m, b'z' as Token), "an unlisted key started");
    assert!(allowed(&mut m, b'a' as Token), "a listed key refused");
    // Nested objects close too.
    let nested = json!({"type": "object", "properties": {"o": open(serde_json::Value::Null)}});
    let mut m = g.mask(&schema(nested, &[])).unwrap();
    feed(&mut m, r#"{"o": {""#);
    assert!(!allowed(&mut m, b'z' as Token), "an unlisted nested key");
    // true or a schema keep the object open.
    let mut m = g.mask(&schema(open(json!(true)), &[])).unwrap();
    feed(&mut m, r#"{"name": "a", "zz": [1]}"#);
    assert!(allowed(&mut m, EOS));
    let mut m = g
        .mask(&schema(open(json!({"type": "integer"})), &[]))
        .unwrap();
    feed(&mut m, r#"{"name": "a", "zz": "#);
    assert!(
        !allowed(&mut m, b'"' as Token),
        "extra value must be an integer"
    );
    feed(&mut m, "7}");
    assert!(allowed(&mut m, EOS));
}

#[test]
fn whitespace_between_tokens_is_bounded() {
    let g = grammars();
    let s = json!({"type": "object", "properties": {"a": {"type": "integer"}}});
    let mut m = g.mask(&schema(s, &[])).unwrap();
    feed(&mut m, "{\n");
    assert!(!allowed(&mut m, b'\n' as Token), "a second newline");
    feed(&mut m, &" ".repeat(20));
    assert!(!allowed(&mut m, b' ' as Token), "indentation past 20");
    feed(&mut m, "\"a\": 1 }");
    assert!(allowed(&mut m, EOS));
}

#[test]
fn format_json_is_any_object() {
    let g = grammars();
    let c = Constraint::Json {
        thinking_close: vec![],
    };
    let mut m = g.mask(&c).unwrap();
    assert!(
        !allowed(&mut m, b'[' as Token),
        "Ollama's json grammar roots at an object"
    );
    feed(&mut m, r#"{"a": [1, {"b": null}], "c": "d"}"#);
    assert!(allowed(&mut m, EOS));
}

#[test]
fn single_pass_thinks_freely_then_closes_then_follows_the_schema() {
    let g = grammars();
    let mut m = g
        .mask(&schema(json!({"type": "integer"}), &["\n\n", "."]))
        .unwrap();
    feed(&mut m, "Let me think\nabout {this} [freely]");
    assert!(
        allowed(&mut m, EOS),
        "a response may end inside its thinking"
    );
    feed(&mut m, "\n");
    assert!(allowed(&mut m, b'\n' as Token));
    feed(&mut m, "\n");
    // Thinking is over: only the schema now.
    assert!(!allowed(&mut m, b'x' as Token));
    assert!(!allowed(&mut m, EOS));
    feed(&mut m, "42");
    assert!(allowed(&mut m, EOS));
    // The other closing string works too and ends the thinking at its first occurrence.
    let mut m = g
        .mask(&schema(json!({"type": "integer"}), &["\n\n", "."]))
        .unwrap();
    feed(&mut m, "done.");
    assert!(
        !allowed(&mut m, b'.' as Token),
        "still thinking after the first closing string"
    );
    feed(&mut m, " 7");
    assert!(allowed(&mut m, EOS));
}

#[test]
fn closing_string_as_one_special_token() {
    let g = grammars();
    let mut m = g
        .mask(&schema(json!({"type": "boolean"}), &["<|tool|>"]))
        .unwrap();
    feed(&mut m, "hmm");
    assert!(allowed(&mut m, TOOL));
    m.commit(TOOL);
    assert!(!allowed(&mut m, b'h' as Token));
    feed(&mut m, "true");
    assert!(allowed(&mut m, EOS));
    // Without the special form the token is not text: the plain-text close is still accepted.
    let mut m = g
        .mask(&schema(json!({"type": "boolean"}), &["<|tool|>"]))
        .unwrap();
    feed(&mut m, "a<|tool|>false");
    assert!(allowed(&mut m, EOS));
}

/// Harmony's shape: `<|tool|>` stands for `<|channel|>`, `<|user|>` for `<|message|>`.
#[test]
fn mixed_close_lets_control_tokens_through_the_thinking() {
    let g = grammars();
    let close = "<|tool|>final<|user|>";
    let c = schema(json!({"type": "integer"}), &[close]);
    let mut m = g.mask(&c).unwrap();
    // <|channel|>analysis<|message|>…<|system|>…
    m.commit(TOOL);
    assert!(
        !allowed(&mut m, EOS),
        "the open token needs its channel name"
    );
    feed(&mut m, "analysis");
    m.commit(258);
    feed(&mut m, "thinking. about\n\nit");
    assert!(allowed(&mut m, EOS), "may end inside the thinking");
    assert!(allowed(&mut m, 259));
    m.commit(259);
    m.commit(TOOL);
    feed(&mut m, "fin");
    assert!(allowed(&mut m, b'a' as Token));
    feed(&mut m, "al");
    assert!(
        !allowed(&mut m, b'x' as Token),
        "\"final\" is the close's text"
    );
    assert!(allowed(&mut m, 258));
    m.commit(258);
    assert!(!allowed(&mut m, b'x' as Token));
    assert!(!allowed(&mut m, TOOL));
    feed(&mut m, " 42");
    assert!(allowed(&mut m, EOS));
}

#[test]
fn segments_cut_at_control_tokens() {
    use lark::Part;
    let sp = |s: &str| match s {
        "<|a|>" => Some(1),
        "<|b|>" => Some(2),
        _ => None,
    };
    assert_eq!(
        lark::segments("<|a|>final<|b|>", sp, 5),
        [
            Part::Special(1),
            Part::Text("final".into()),
            Part::Special(2)
        ]
    );
    assert_eq!(lark::segments("x.", sp, 5), [Part::Text("x.".into())]);
}

#[test]
fn compiled_grammars_are_cached_per_schema_and_closing_strings() {
    let g = grammars();
    let a = schema(json!({"type": "integer"}), &[]);
    g.mask(&a).unwrap();
    g.mask(&a).unwrap();
    assert_eq!(g.cached(), 1);
    g.mask(&schema(json!({"type": "integer"}), &["."])).unwrap();
    g.mask(&schema(json!({"type": "string"}), &[])).unwrap();
    assert_eq!(g.cached(), 3);
    // A cached matcher is a fresh start, not the state of an earlier request.
    let mut m1 = g.mask(&a).unwrap();
    feed(&mut m1, "12");
    let mut m2 = g.mask(&a).unwrap();
    assert!(!allowed(&mut m2, EOS));
}

#[test]
fn unsupported_schema_features_are_bad_requests_naming_them() {
    let g = grammars();
    let e = g
        .mask(&schema(
            json!({"type": "object", "patternPropertiesX": 1, "if": {}}),
            &[],
        ))
        .err()
        .expect("unsupported keys must be refused");
    assert_eq!(e.kind, ErrorKind::BadRequest);
    assert!(
        e.message.contains("unsupported JSON schema"),
        "{}",
        e.message
    );
    assert!(e.message.contains("if"), "{}", e.message);
    let e = g
        .mask(&schema(json!({}), &["x<|tool|>", "."]))
        .err()
        .expect("a mixed close must start with a control token and be the only one");
    assert_eq!(e.kind, ErrorKind::BadRequest);
    let e = g.mask(&schema(json!([1]), &[])).err().unwrap();
    assert_eq!(e.kind, ErrorKind::BadRequest);
}

#[test]
fn percentiles_by_nearest_rank() {
    assert_eq!(percentiles(&[]), None);
    let v: Vec<u64> = (1..=100).collect();
    assert_eq!(percentiles(&v), Some((50, 99, 100)));
    assert_eq!(percentiles(&[5]), Some((5, 5, 5)));
}

/// Grammar fast-forward: the forced bytes of each state, as the engine drafts them.
#[test]
fn forced_bytes_follow_the_state_and_stop_where_the_model_chooses() {
    let g = grammars();
    let s = json!({
        "type": "object",
        "properties": {"alpha": {"type": "string"}, "beta": {"type": "integer"}},
        "required": ["alpha", "beta"],
        "additionalProperties": false
    });
    let mut m = g.mask(&schema(s, &[])).unwrap();
    let text = |b: Vec<u8>| String::from_utf8(b).unwrap();
    // The opening brace is forced; whitespace after it is the model's choice.
    assert_eq!(text(m.forced()), "{");
    feed(&mut m, "{\"");
    // After the key's opening quote the only required key left to start is forced.
    let key = text(m.forced());
    assert!(key.starts_with("alpha\""), "{key:?}");
    feed(&mut m, &key);
    feed(&mut m, ": \"x");
    // Inside a free string nothing is forced.
    assert_eq!(text(m.forced()), "");
    feed(&mut m, "\", \"");
    let key = text(m.forced());
    assert!(key.starts_with("beta\""), "{key:?}");
    // Every forced byte is allowed by the mask in turn (the engine verifies them by sampling).
    feed(&mut m, &key);
    feed(&mut m, ": 7");
    assert!(allowed(&mut m, b'}' as Token));
}

/// Deferred commits (the gate's: sent at the engine's `flush`, or by whatever next waits for the
/// worker) walk the grammar exactly as immediate ones: the same mask and forced bytes at every
/// step, whether the flush came or not.
#[test]
fn deferred_commits_give_the_masks_and_forced_bytes_of_immediate_ones() {
    let g = grammars();
    let text = r#"{"name": "Rex", "kind": "dog", "tags": [1, 22], "pos": {"x": 1.5}}"#;
    let mask_of = |m: &mut GrammarMask| -> Vec<bool> {
        let mut logits = vec![0.0f32; N];
        m.apply(&mut logits);
        logits.iter().map(|l| l.is_finite()).collect()
    };
    let mut now = g.mask(&schema(nested(), &[])).unwrap();
    let mut later = g.mask(&schema(nested(), &[])).unwrap();
    assert!(!now.defer, "the gate is off in this process");
    later.defer = true;
    for (i, &b) in text.as_bytes().iter().enumerate() {
        let t = b as Token;
        let want = mask_of(&mut now);
        assert!(want[t as usize], "byte {i} of the text is allowed");
        assert_eq!(mask_of(&mut later), want, "mask before byte {i}");
        now.commit(t);
        later.commit(t);
        assert_eq!(later.queued, Some(b as u32), "held until flushed");
        match i % 3 {
            // The engine's flush after a step's rows.
            0 => later.flush(),
            // Fast-forward asking for forced bytes first: it sends the commit itself.
            1 => assert_eq!(later.forced(), now.forced(), "forced after byte {i}"),
            // Nothing until the next mask is needed.
            _ => {}
        }
        if i % 3 != 2 {
            assert_eq!(later.queued, None);
        }
    }
    assert_eq!(mask_of(&mut later), mask_of(&mut now));
    assert!(mask_of(&mut later)[EOS as usize], "the object is complete");
}

#[test]
fn the_worker_lists_a_few_allowed_ids_and_leaves_many_to_the_mask() {
    let cases: Vec<(Vec<u32>, Option<Vec<u32>>)> = vec![
        (vec![], Some(vec![])),
        (vec![0, 0], Some(vec![])),
        (vec![0b1011, 0], Some(vec![0, 1, 3])),
        (vec![0, 1 << 31, 1], Some(vec![63, 64])),
        // More than SPARSE_MAX allowed: the sampler reads the mask itself.
        (vec![u32::MAX; SPARSE_MAX / 32 + 1], None),
        (
            vec![u32::MAX; SPARSE_MAX / 32],
            Some((0..SPARSE_MAX as u32).collect()),
        ),
    ];
    for (words, want) in cases {
        assert_eq!(sparse_of(&words), want, "{} words", words.len());
    }
}
