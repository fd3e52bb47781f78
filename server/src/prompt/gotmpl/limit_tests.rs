//! Resource-bound tests: every hostile template from issue 22 fails with a limit error (or Go's
//! own printf marker) quickly, and never aborts or overflows the stack.

use std::time::{Duration, Instant};

use super::limits::{MAX_PARSE_DEPTH, MAX_TEMPLATE_DEPTH};
use super::*;
use serde_json::json;

fn run(src: &str) -> Result<String, TemplateError> {
    GoTemplate::parse(src)?.execute(&Value::from_json_any(&json!({"X": "x"})))
}

/// Runs `src` and expects a limit error within 3 s (a debug build on a shared 2-core box; the
/// release build takes milliseconds).
fn limit_err(src: &str) -> TemplateError {
    let t0 = Instant::now();
    let e = run(src).expect_err("a hostile template must fail");
    let took = t0.elapsed();
    assert!(e.limit, "not a limit error: {e}");
    assert!(took < Duration::from_secs(3), "took {took:?} for {e}");
    e
}

#[test]
fn printf_width_and_precision_follow_gos_bounds() {
    // A literal number past Go's bound ends the format (Go prints %!(NOVERB)).
    assert_eq!(
        run(r#"{{ printf "%0100000000000d" 1 }}"#).unwrap(),
        "%!(NOVERB)%!(EXTRA int=1)"
    );
    assert_eq!(
        run(r#"{{ printf "%.100000000000f" 1.5 }}"#).unwrap(),
        "%!(NOVERB)%!(EXTRA float64=1.5)"
    );
    // `*` past 1e6 is a bad width/precision; the verb still prints.
    assert_eq!(
        run(r#"{{ printf "%*d" 100000000000 1 }}"#).unwrap(),
        "%!(BADWIDTH)1"
    );
    assert_eq!(
        run(r#"{{ printf "%.*f" 100000000000 1.5 }}"#).unwrap(),
        "%!(BADPREC)1.500000"
    );
    // Widths within Go's bound still pad.
    assert_eq!(run(r#"{{ printf "%05d" 42 }}"#).unwrap(), "00042");
    assert_eq!(
        run(r#"{{ printf "%*d" 1000000 1 }}"#).unwrap().len(),
        1_000_000
    );
    // Legal widths that add up past the output cap fail before allocating.
    let e = limit_err(r#"{{ printf "%9999999d%9999999d" 1 2 }}"#);
    assert!(e.msg.contains("output exceeds"), "{e}");
}

#[test]
fn deep_nesting_is_a_parse_error_not_a_stack_overflow() {
    for (open, close) in [("{{if 1}}", "{{end}}"), ("{{range 1}}", "{{end}}")] {
        let src = format!("{}x{}", open.repeat(100_000), close.repeat(100_000));
        let e = limit_err(&src);
        assert!(e.msg.contains("nesting depth"), "{e}");
    }
    let src = format!("{{{{ {}1{} }}}}", "(".repeat(100_000), ")".repeat(100_000));
    limit_err(&src);
    // A stray `else` outside any `if` is an ordinary parse error, not a limit.
    assert!(!run("{{else if 1}}x").unwrap_err().limit);
    let chain = format!(
        "{{{{if 0}}}}{}y{{{{end}}}}",
        "{{else if 0}}".repeat(100_000)
    );
    limit_err(&chain);
    // Nesting below the bound still renders.
    let n = MAX_PARSE_DEPTH - 1;
    let src = format!("{}x{}", "{{if 1}}".repeat(n), "{{end}}".repeat(n));
    assert_eq!(run(&src).unwrap(), "x");
}

#[test]
fn exponential_define_chain_stops_quickly() {
    // Each level calls the next twice: 2^34 calls if unbounded.
    let mut src = String::from(r#"{{define "t0"}}xxxxxxxxxxxxxxxx{{end}}"#);
    for i in 1..=34 {
        let p = i - 1;
        src.push_str(&format!(
            r#"{{{{define "t{i}"}}}}{{{{template "t{p}" .}}}}{{{{template "t{p}" .}}}}{{{{end}}}}"#
        ));
    }
    src.push_str(r#"{{template "t34" .}}"#);
    limit_err(&src);
}

#[test]
fn recursion_is_bounded_even_with_deep_bodies() {
    let e = limit_err(r#"{{define "a"}}{{template "a" .}}{{end}}{{template "a" .}}"#);
    assert!(e.msg.contains("depth"), "{e}");
    // Recursion whose body nests near the parse bound: bounded by total execution depth,
    // within the default 2 MiB test-thread stack.
    let n = MAX_PARSE_DEPTH - 2;
    let src = format!(
        r#"{{{{define "a"}}}}{}{{{{template "a" .}}}}{}{{{{end}}}}{{{{template "a" .}}}}"#,
        "{{if 1}}".repeat(n),
        "{{end}}".repeat(n)
    );
    limit_err(&src);
    // Legit shallow recursion is fine.
    let src =
        r#"{{define "c"}}{{if gt . 0}}{{.}}{{template "c" (slice "xxxxxxxxxx" 1)}}{{end}}{{end}}"#;
    assert!(GoTemplate::parse(src).is_ok());
    let _ = MAX_TEMPLATE_DEPTH;
}

#[test]
fn runaway_ranges_stop_on_steps_or_output() {
    let e = limit_err("{{range 100000}}{{range 100000}}{{end}}{{end}}");
    assert!(e.msg.contains("step limit"), "{e}");
    limit_err("{{range 1000000000000}}{{end}}");
    let e = limit_err("{{range 100000}}{{range 100000}}abcdefgh{{end}}{{end}}");
    assert!(e.msg.contains("output exceeds") || e.msg.contains("step limit"));
    // String doubling through a variable stops (its bytes cost steps; no string passes the
    // output cap).
    limit_err(r#"{{$x := "aaaaaaaa"}}{{range 60}}{{$x = printf "%s%s" $x $x}}{{end}}{{$x}}"#);
    limit_err(r#"{{$x := "aaaaaaaa"}}{{range 60}}{{$x = print $x $x $x}}{{end}}"#);
    limit_err(r#"{{$x := "aaaaaaaa"}}{{range 60}}{{$x = println $x $x}}{{end}}"#);
    // Ordinary ranges are unaffected.
    assert_eq!(run("{{range 3}}{{.}}{{end}}").unwrap(), "012");
    assert_eq!(
        run("{{range $i, $v := 100000}}{{end}}done").unwrap(),
        "done"
    );
}

#[test]
fn budget_grows_with_the_data() {
    // 5k messages through a template that loops over all of them per message would be
    // 2.5e7 steps: refused. A linear template over the same data renders.
    let msgs: Vec<_> = (0..5_000)
        .map(|i| json!({"Role": "user", "Content": format!("m{i}")}))
        .collect();
    let data = Value::from_json_any(&json!({ "Messages": msgs }));
    let lin = GoTemplate::parse("{{range .Messages}}<{{.Role}}>{{.Content}}{{end}}").unwrap();
    assert!(lin.execute(&data).unwrap().starts_with("<user>m0<user>m1"));
    let quad =
        GoTemplate::parse("{{range .Messages}}{{range $.Messages}}{{.Content}}{{end}}{{end}}")
            .unwrap();
    let t0 = Instant::now();
    let e = quad.execute(&data).unwrap_err();
    assert!(e.limit, "{e}");
    assert!(t0.elapsed() < Duration::from_secs(5), "{:?}", t0.elapsed());
}
