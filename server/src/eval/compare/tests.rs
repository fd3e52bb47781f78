use super::*;
use crate::eval::record::{Response, RowProvenance};
use serde_json::json;

fn row(id: u32, content: &str, gold: &str) -> Record {
    Record {
        id: json!(id),
        repeat: 0,
        request_hash: "sha256:r".into(),
        prompt_hash: format!("sha256:p{id}"),
        gold: Some(json!(gold)),
        scorer: None,
        model: "m".into(),
        error: None,
        response: Response {
            content: content.into(),
            thinking: None,
            tool_calls: None,
        },
        done_reason: Some("stop".into()),
        prompt_eval_count: 1,
        eval_count: 1,
        total_duration: 1,
        load_duration: 0,
        prompt_eval_duration: 0,
        eval_duration: 0,
        provenance: RowProvenance {
            host: "http://h".into(),
            server: json!({"version": "1", "git_commit": "abc"}),
            model_digest: Some("d".into()),
        },
    }
}

#[test]
fn table_adds_up_and_counts_flips() {
    // (A's answer, B's answer) against gold "y".
    let pairs = [
        ("y", "y"),
        ("y", "y"),
        ("n", "n"),
        ("y", "n"),
        ("y", "n"),
        ("n", "y"),
        (" y", "y"),
    ];
    let a: Vec<_> = (0..).zip(pairs).map(|(i, (x, _))| row(i, x, "y")).collect();
    let mut b: Vec<_> = (0..).zip(pairs).map(|(i, (_, y))| row(i, y, "y")).collect();
    b[2].error = Some("boom".into());
    let r = compare(&a, &b, None).unwrap();
    assert_eq!((r.items, r.scored, r.errors_a, r.errors_b), (7, 6, 0, 1));
    assert_eq!(
        (r.both_correct, r.both_wrong, r.a_only, r.b_only),
        (3, 0, 2, 1)
    );
    assert_eq!(
        r.both_correct + r.both_wrong + r.a_only + r.b_only,
        r.scored
    );
    assert_eq!((r.correct_a, r.correct_b), (5, 4));
    assert!((r.mcnemar_p - 1.0).abs() < 1e-12);
    // " y" vs "y": same prediction (trimmed), different bytes.
    assert_eq!((r.predictions_identical, r.responses_identical), (3, 2));
    assert_eq!(r.verdicts[2].a, None);
    let text = render(&r);
    assert!(
        text.contains("correct A                 5/6 (83.3%)\n"),
        "{text}"
    );
    assert!(text.contains("McNemar exact p           1.000\n"), "{text}");
    assert!(!text.contains("MIXED"), "{text}");
}

#[test]
fn refuses_to_pair_differing_rows_naming_the_first() {
    let a = vec![row(1, "y", "y"), row(2, "y", "y"), row(3, "y", "y")];
    let mut b = a.clone();
    b[1].prompt_hash = "sha256:other".into();
    b[2].prompt_hash = "sha256:other".into();
    let e = compare(&a, &b, None).unwrap_err().to_string();
    assert_eq!(e, "cannot pair item 2: its prompt differs between A and B");
    let mut b = a.clone();
    b[2].gold = Some(json!("z"));
    let e = compare(&a, &b, None).unwrap_err().to_string();
    assert_eq!(e, "cannot pair item 3: its gold differs between A and B");
    let e = compare(&a, &a[..2], None).unwrap_err().to_string();
    assert_eq!(e, "cannot pair the runs: item 3 is in A but not in B");
}

#[test]
fn mixed_banner_when_a_run_has_two_sources() {
    let a = vec![row(1, "y", "y"), row(2, "y", "y")];
    let mut b = a.clone();
    let r = compare(&a, &b, None).unwrap();
    assert!(!r.mixed());
    b[1].provenance.server["git_commit"] = json!("def");
    let r = compare(&a, &b, None).unwrap();
    assert!(r.mixed());
    let text = render(&r);
    assert!(text.starts_with("MIXED: "), "{text}");
    assert!(
        text.contains("  B: ") && text.contains("commit def"),
        "{text}"
    );
    // A and B from different builds is the point of compare, not MIXED.
    let mut b = a.clone();
    for r in &mut b {
        r.provenance.server["git_commit"] = json!("def");
    }
    assert!(!compare(&a, &b, None).unwrap().mixed());
}

#[test]
fn cli_scorer_overrides_the_rows() {
    let a = vec![row(1, "it is y", "y")];
    let r = compare(&a, &a, None).unwrap();
    assert_eq!(r.correct_a, 0);
    let r = compare(&a, &a, Some(&Scorer::Contains)).unwrap();
    assert_eq!(r.correct_a, 1);
    let mut b = a.clone();
    b[0].scorer = Some("contains".into());
    let mut a2 = a.clone();
    a2[0].scorer = Some("contains".into());
    assert_eq!(compare(&a2, &b, None).unwrap().correct_a, 1);
}
