//! Engine unit tests: one group per Go `text/template` feature the TEMPLATE layers rely on.
//! Expected strings are what Go's text/template prints for the same template and data.

use super::*;
use serde_json::json;

fn render(src: &str, data: serde_json::Value) -> String {
    let t = GoTemplate::parse(src).unwrap_or_else(|e| panic!("parse {src:?}: {e}"));
    t.execute(&Value::from_json_any(&data))
        .unwrap_or_else(|e| panic!("exec {src:?}: {e}"))
}

fn exec_err(src: &str, data: serde_json::Value) -> TemplateError {
    let t = GoTemplate::parse(src).unwrap();
    t.execute(&Value::from_json_any(&data)).unwrap_err()
}

#[test]
fn text_and_fields() {
    assert_eq!(render("plain text", json!({})), "plain text");
    assert_eq!(render("a{{ .X }}b", json!({"X": "1"})), "a1b");
    assert_eq!(
        render("{{ .A.B.C }}", json!({"A": {"B": {"C": "deep"}}})),
        "deep"
    );
    assert_eq!(render("{{ . }}", json!("dot")), "dot");
}

#[test]
fn trim_markers() {
    assert_eq!(render("a  \n {{- .X -}} \n\t b", json!({"X": "x"})), "axb");
    assert_eq!(render("a {{- .X }} b", json!({"X": "x"})), "ax b");
    assert_eq!(render("a {{ .X -}} b", json!({"X": "x"})), "a xb");
    // `{{-3}}` is the number -3, not a trim marker.
    assert_eq!(render("a {{-3}}", json!({})), "a -3");
}

#[test]
fn comments() {
    assert_eq!(render("a{{/* hidden */}}b", json!({})), "ab");
    assert_eq!(render("a \n{{- /* x */ -}}\n b", json!({})), "ab");
    assert!(GoTemplate::parse("{{/* open").is_err());
}

#[test]
fn missingkey_zero_and_nil() {
    // A missing key of a map[string]any is a nil interface: falsy, printed as "<no value>".
    assert_eq!(
        render("[{{ if .Nope }}yes{{ else }}no{{ end }}]", json!({})),
        "[no]"
    );
    assert_eq!(render("{{ .Nope }}", json!({})), "<no value>");
    assert_eq!(
        render("{{ index .M \"k\" }}|{{ len .M }}", json!({"M": {}})),
        "<no value>|0"
    );
    // A field of a nil value is an error, not a silent empty string.
    let e = exec_err("x\n  {{ .Nope.Deeper }}", json!({}));
    assert_eq!((e.line, e.col), (2, 6));
    assert!(e.msg.contains("nil pointer evaluating"), "{e}");
}

#[test]
fn struct_fields_error_when_missing() {
    let t = GoTemplate::parse("{{ .Role }}{{ .Missing }}").unwrap();
    let v = Value::strukt(vec![("Role", Value::str("user"))]);
    let e = t.execute(&v).unwrap_err();
    assert!(e.msg.contains("can't evaluate field Missing"), "{e}");
    assert_eq!(
        GoTemplate::parse("{{ .Role }}")
            .unwrap()
            .execute(&v)
            .unwrap(),
        "user"
    );
}

#[test]
fn truthiness() {
    let src = "{{ if .V }}T{{ else }}F{{ end }}";
    for (v, want) in [
        (json!(""), "F"),
        (json!("x"), "T"),
        (json!(0), "F"),
        (json!(0.5), "T"),
        (json!(null), "F"),
        (json!([]), "F"),
        (json!([1]), "T"),
        (json!({}), "F"),
        (json!({"a": 1}), "T"),
        (json!(false), "F"),
        (json!(true), "T"),
    ] {
        assert_eq!(render(src, json!({ "V": v })), want, "value {v}");
    }
}

#[test]
fn if_else_chains_and_with() {
    let src = "{{ if eq .R \"a\" }}A{{ else if eq .R \"b\" }}B{{ else }}C{{ end }}";
    assert_eq!(render(src, json!({"R": "a"})), "A");
    assert_eq!(render(src, json!({"R": "b"})), "B");
    assert_eq!(render(src, json!({"R": "z"})), "C");
    let w = "{{ with .S }}<{{ . }}>{{ else with .T }}({{ . }}){{ else }}none{{ end }}";
    assert_eq!(render(w, json!({"S": "s"})), "<s>");
    assert_eq!(render(w, json!({"T": "t"})), "(t)");
    assert_eq!(render(w, json!({})), "none");
}

#[test]
fn variables_and_scopes() {
    assert_eq!(
        render(
            "{{ $x := .A }}{{ $x }}{{ $x = \"b\" }}{{ $x }}",
            json!({"A": "a"})
        ),
        "ab"
    );
    // `$` is the root even inside range; assignment inside range persists after it.
    let src = "{{ $n := 0 }}{{ range .L }}{{ $n = . }}{{ $.P }}{{ end }}{{ $n }}";
    assert_eq!(render(src, json!({"L": [1, 2], "P": "p"})), "pp2");
    // Declarations inside if are popped at end.
    let e = GoTemplate::parse("{{ if true }}{{ $y := 1 }}{{ end }}{{ $y }}")
        .unwrap()
        .execute(&Value::Nil);
    assert!(e.unwrap_err().msg.contains("undefined variable: $y"));
    assert_eq!(
        render("{{ if $v := .A }}{{ $v }}{{ end }}", json!({"A": "val"})),
        "val"
    );
}

#[test]
fn range_slices_maps_ints_else() {
    assert_eq!(
        render("{{ range .L }}[{{ . }}]{{ end }}", json!({"L": ["a", "b"]})),
        "[a][b]"
    );
    assert_eq!(
        render(
            "{{ range $i, $v := .L }}{{ $i }}={{ $v }};{{ end }}",
            json!({"L": ["a", "b"]})
        ),
        "0=a;1=b;"
    );
    assert_eq!(
        render(
            "{{ range $v := .L }}{{ $v }}{{ end }}",
            json!({"L": ["x", "y"]})
        ),
        "xy"
    );
    // Maps iterate in sorted key order regardless of insertion order.
    let m = json!({"M": {"zeta": 1, "alpha": 2, "mid": 3}});
    assert_eq!(
        render(
            "{{ range $k, $v := .M }}{{ $k }}:{{ $v }},{{ end }}",
            m.clone()
        ),
        "alpha:2,mid:3,zeta:1,"
    );
    assert_eq!(render("{{ range .M }}{{ . }}{{ end }}", m), "231");
    assert_eq!(
        render("{{ range .L }}x{{ else }}empty{{ end }}", json!({"L": []})),
        "empty"
    );
    assert_eq!(
        render("{{ range .Missing }}x{{ else }}empty{{ end }}", json!({})),
        "empty"
    );
    assert_eq!(
        render("{{ range $i := 3 }}{{ $i }}{{ end }}", json!({})),
        "012"
    );
}

#[test]
fn break_and_continue() {
    let src = "{{ range .L }}{{ if eq . 3 }}{{ break }}{{ end }}{{ if eq . 1 }}{{ continue }}{{ end }}{{ . }}{{ end }}";
    assert_eq!(render(src, json!({"L": [0, 1, 2, 3, 4]})), "02");
    assert!(GoTemplate::parse("{{ break }}").is_err());
}

#[test]
fn define_template_block() {
    let src = "{{ define \"greet\" }}hi {{ . }}{{ end }}{{ template \"greet\" .Name }}|{{ block \"b\" .X }}[{{ . }}]{{ end }}";
    assert_eq!(render(src, json!({"Name": "bob", "X": "x"})), "hi bob|[x]");
    // A called template sees `$` as its argument, not the caller's variables.
    let e = exec_err(
        "{{ define \"t\" }}{{ $v }}{{ end }}{{ $v := 1 }}{{ template \"t\" }}",
        json!({}),
    );
    assert!(e.msg.contains("undefined variable"), "{e}");
    assert!(exec_err("{{ template \"nope\" }}", json!({}))
        .msg
        .contains("no such template"));
}

#[test]
fn pipelines_and_parens() {
    assert_eq!(render("{{ .A | printf \"%s!\" }}", json!({"A": "x"})), "x!");
    assert_eq!(
        render("{{ .A | printf \"%s-%s\" \"p\" }}", json!({"A": "x"})),
        "p-x"
    );
    assert_eq!(
        render("{{ (index .L 1).N }}", json!({"L": [{"N": 1}, {"N": 2}]})),
        "2"
    );
    assert_eq!(
        render("{{ len (slice .L 1) }}", json!({"L": [1, 2, 3]})),
        "2"
    );
    assert!(exec_err("{{ .A .B }}", json!({"A": 1, "B": 2}))
        .msg
        .contains("non-function"));
}

#[test]
fn literals() {
    assert_eq!(
        render(r#"{{ "a\tb\n\"q\"\u00e9\x41" }}"#, json!({})),
        "a\tb\n\"q\"éA"
    );
    assert_eq!(render("{{ `raw\\n` }}", json!({})), "raw\\n");
    assert_eq!(
        render(
            "{{ 42 }} {{ -7 }} {{ 1.5 }} {{ 0x1F }} {{ true }} {{ 'a' }}",
            json!({})
        ),
        "42 -7 1.5 31 true 97"
    );
    assert_eq!(
        render("{{ 1e6 }} {{ 100000.0 }}", json!({})),
        "1e+06 100000"
    );
}

#[test]
fn logic_and_comparison() {
    assert_eq!(
        render(
            "{{ and 1 0 2 }}|{{ and 1 2 }}|{{ or 0 \"\" }}|{{ or 0 \"x\" }}",
            json!({})
        ),
        "0|2||x"
    );
    // and/or short-circuit: the erroring operand is never evaluated.
    assert_eq!(render("{{ or true .Nope.X }}", json!({})), "true");
    assert_eq!(
        render("{{ not .E }} {{ not 1 }}", json!({"E": ""})),
        "true false"
    );
    assert_eq!(render("{{ eq 1 2 3 1 }} {{ ne \"a\" \"b\" }} {{ lt 1 2 }} {{ le 2 2 }} {{ gt \"b\" \"a\" }} {{ ge 1 2 }}", json!({})), "true true true true true false");
    // JSON numbers are float64 in Go; they compare with int constants by value here.
    assert_eq!(render("{{ eq .N 3 }}", json!({"N": 3})), "true");
    assert!(exec_err("{{ lt \"a\" 1 }}", json!({}))
        .msg
        .contains("incompatible"));
}

#[test]
fn len_index_slice() {
    assert_eq!(
        render(
            "{{ len .S }} {{ len .L }} {{ len .M }}",
            json!({"S": "héllo", "L": [1, 2], "M": {"a": 1}})
        ),
        "6 2 1"
    );
    assert_eq!(
        render(
            "{{ index .L 1 }} {{ index .M \"a\" }} {{ index .N 0 1 }}",
            json!({"L": ["x", "y"], "M": {"a": "A"}, "N": [[1, 2]]})
        ),
        "y A 2"
    );
    assert_eq!(
        render(
            "{{ slice .S 1 3 }} {{ slice .L 1 }}",
            json!({"S": "abcd", "L": [1, 2, 3]})
        ),
        "bc [2 3]"
    );
    assert!(exec_err("{{ index .L 5 }}", json!({"L": [1]}))
        .msg
        .contains("out of range"));
}

#[test]
fn print_family_and_printf_verbs() {
    assert_eq!(render("{{ print 1 2 \"a\" \"b\" 3 }}", json!({})), "1 2ab3");
    assert_eq!(render("{{ println 1 \"a\" }}", json!({})), "1 a\n");
    assert_eq!(
        render(
            r#"{{ printf "%s|%d|%v|%q|%t|%f|%.2f|%5d|%-4s|%05d|%x|%%" "s" 42 .L "q\"" true 1.5 3.14159 7 "ab" 42 255 }}"#,
            json!({"L": ["a", 1]})
        ),
        "s|42|[a 1]|\"q\\\"\"|true|1.500000|3.14|    7|ab  |00042|ff|%"
    );
    assert_eq!(
        render(r#"{{ printf "%d" "x" }}"#, json!({})),
        "%!d(string=x)"
    );
    assert_eq!(
        render(r#"{{ printf "%v" .M }}"#, json!({"M": {"b": 1, "a": "x"}})),
        "map[a:x b:1]"
    );
}

#[test]
fn json_function_matches_go_marshal() {
    assert_eq!(
        render(
            "{{ json .V }}",
            json!({"V": {"z": "<a&b>", "a": [1, 2.5, null, true], "n": "line\nnext\u{2028}"}})
        ),
        r#"{"a":[1,2.5,null,true],"n":"line\nnext\u2028","z":"\u003ca\u0026b\u003e"}"#
    );
    assert_eq!(
        render("{{ json .S }}", json!({"S": "tab\tq\"\\"})),
        r#""tab\tq\"\\""#
    );
    assert_eq!(render("{{ json .F }}", json!({"F": 1e-7})), "1e-7");
}

#[test]
fn dates_and_typescript_types() {
    let today = render("{{ currentDate }}", json!({}));
    assert_eq!(today.len(), 10);
    assert_eq!(today.as_bytes()[4], b'-');
    let y = render("{{ yesterdayDate }}", json!({}));
    assert!(y < today, "{y} < {today}");
    assert_eq!(ts_type(&json!({"type": "string"})), "string");
    assert_eq!(
        ts_type(&json!({"type": ["integer", "null"]})),
        "number | null"
    );
    assert_eq!(
        ts_type(&json!({"anyOf": [{"type": "array"}, {"type": "object"}]})),
        "any[] | Record<string, any>"
    );
    assert_eq!(ts_type(&json!({})), "any");
    // Not a ToolProperty: "any".
    assert_eq!(
        render(
            "{{ toTypeScriptType .X }}",
            json!({"X": {"type": "string"}})
        ),
        "any"
    );
}

#[test]
fn parse_errors_have_positions() {
    let e = GoTemplate::parse("ok\nline {{ if .A }}x").unwrap_err();
    assert_eq!(e.line, 2, "{e}");
    let e = GoTemplate::parse("{{ nosuchfunc 1 }}").unwrap_err();
    assert!(e.msg.contains("not defined"), "{e}");
    assert_eq!((e.line, e.col), (1, 4));
    let e = GoTemplate::parse("ab\ncd {{ .A ) }}").unwrap_err();
    assert_eq!((e.line, e.col), (2, 10), "{e}");
    assert!(GoTemplate::parse("{{ end }}").is_err());
    assert!(GoTemplate::parse("{{ \"unterminated }}").is_err());
    assert!(GoTemplate::parse("{{ .A").is_err());
}

#[test]
fn vars_and_response_cut() {
    let t = GoTemplate::parse(
        "{{ range $.Messages }}{{ .Content }}{{ end }}{{ define \"x\" }}{{ .Tools }}{{ end }}",
    )
    .unwrap();
    assert_eq!(t.vars(), vec!["$", "content", "messages", "tools"]);
    let t = GoTemplate::parse(
        "S{{ .System }}P{{ .Prompt }}R{{ .Response }}E{{ if .Response }}end{{ end }}",
    )
    .unwrap();
    let cut = t.root_cut_at_response();
    let data = Value::from_json_any(&json!({"System": "s", "Prompt": "p", "Response": "r"}));
    assert_eq!(t.execute_nodes(&cut, &data).unwrap(), "SsPpRr");
    assert_eq!(t.execute(&data).unwrap(), "SsPpRrEend");
}
