//! Table tests for the parser, the renderer (round trip) and parameter typing. Expected values
//! follow Ollama's parser_test.go behaviour.

use serde_json::json;

use super::*;

fn from(s: &str) -> Command {
    Command::From(s.into())
}
fn param(n: &str, v: &str) -> Command {
    Command::Parameter {
        name: n.into(),
        value: v.into(),
    }
}
fn msg(r: &str, c: &str) -> Command {
    Command::Message {
        role: r.into(),
        content: c.into(),
    }
}

#[test]
fn parses_commands() {
    use Command::*;
    let cases: Vec<(&str, Vec<Command>)> = vec![
        ("FROM foo", vec![from("foo")]),
        ("\nFROM foo\n", vec![from("foo")]),
        ("\u{feff}FROM foo\n", vec![from("foo")]),
        ("from foo\nFrOm bar\n", vec![from("foo"), from("bar")]),
        ("FROM   ./model.gguf  \n", vec![from("./model.gguf")]),
        ("FROM\t/a b/c.gguf\n", vec![from("/a b/c.gguf")]),
        (
            "# comment\nFROM foo # not a comment\n  # indented comment\n",
            vec![from("foo # not a comment")],
        ),
        (
            "FROM foo\nPARAMETER stop <|im_end|>\nparameter stop \"</s>\"\nPARAMETER num_ctx 4096\n",
            vec![
                from("foo"),
                param("stop", "<|im_end|>"),
                param("stop", "</s>"),
                param("num_ctx", "4096"),
            ],
        ),
        (
            "FROM foo\nPARAMETER  temperature 0.2\n",
            vec![from("foo"), param("temperature", "0.2")],
        ),
        (
            "FROM foo\nTEMPLATE \"\"\"{{ if .System }}<|im_start|>system\n{{ .System }}<|im_end|>\n{{ end }}\"\"\"\n",
            vec![
                from("foo"),
                Template(
                    "{{ if .System }}<|im_start|>system\n{{ .System }}<|im_end|>\n{{ end }}".into(),
                ),
            ],
        ),
        (
            "FROM foo\nSYSTEM \"\"\"\nThis is a\nmultiline system.\n\"\"\"\n",
            vec![from("foo"), System("\nThis is a\nmultiline system.\n".into())],
        ),
        (
            "FROM foo\nSYSTEM \"\nThis is a\nmultiline system.\"\n",
            vec![from("foo"), System("\nThis is a\nmultiline system.".into())],
        ),
        (
            "FROM foo\nSYSTEM \"\"\"This is a multiline system with \"quotes\".\"\"\"",
            vec![
                from("foo"),
                System("This is a multiline system with \"quotes\".".into()),
            ],
        ),
        (
            "FROM foo\nSYSTEM You are   a\tbot.  \n",
            vec![from("foo"), System("You are   a\tbot.".into())],
        ),
        ("FROM foo\nSYSTEM \"\"\n", vec![from("foo"), System(String::new())]),
        ("FROM foo\nSYSTEM \n", vec![from("foo"), System(String::new())]),
        (
            "FROM foo\r\nSYSTEM hi\r\nLICENSE \"a\r\nb\"\r\n",
            vec![from("foo"), System("hi".into()), License("a\r\nb".into())],
        ),
        (
            "FROM foo\nMESSAGE system You are a file parser.\nMESSAGE user Hey there!\nMESSAGE assistant Hello, I want to parse all the things!\n",
            vec![
                from("foo"),
                msg("system", "You are a file parser."),
                msg("user", "Hey there!"),
                msg("assistant", "Hello, I want to parse all the things!"),
            ],
        ),
        (
            "FROM foo\nMESSAGE system \"\"\"\nYou are a multiline file parser.\n\"\"\"\n\t\t\t",
            vec![from("foo"), msg("system", "\nYou are a multiline file parser.\n")],
        ),
        (
            "FROM foo\nADAPTER ./lora.gguf\nLICENSE MIT\nLICENSE \"\"\"Apache\n2.0\"\"\"\nREQUIRES v0.14.0\nDRAFT ./draft.gguf\nRENDERER qwen3\nPARSER qwen3\n",
            vec![
                from("foo"),
                Adapter("./lora.gguf".into()),
                License("MIT".into()),
                License("Apache\n2.0".into()),
                Requires("v0.14.0".into()),
                Draft("./draft.gguf".into()),
                Renderer("qwen3".into()),
                Parser("qwen3".into()),
            ],
        ),
        // Non-printable characters are dropped, as Go's strconv.IsPrint filter does.
        (
            "FROM foo\nSYSTEM a\u{1}b\u{200b}c\n",
            vec![from("foo"), System("abc".into())],
        ),
        ("FROM \"quoted name\"\n", vec![from("quoted name")]),
    ];
    for (input, want) in cases {
        let got = parse(input).unwrap_or_else(|e| panic!("{input:?}: {e}"));
        assert_eq!(got.commands, want, "{input:?}");
    }
}

#[test]
fn parse_errors() {
    let cmd = "command must be one of \"from\", \"license\", \"template\", \"system\", \"adapter\", \"draft\", \"renderer\", \"parser\", \"parameter\", \"message\", or \"requires\"";
    let role = "message role must be one of \"system\", \"user\", or \"assistant\"";
    let cases: Vec<(&str, String)> = vec![
        ("", "no FROM line".into()),
        ("# only a comment\n", "no FROM line".into()),
        ("SYSTEM hi\n", "no FROM line".into()),
        (
            "\nFROM foo\nBADCOMMAND param1 value1\n",
            format!("(line 3): {cmd}"),
        ),
        ("FROM foo\nSYSTEM\n", format!("(line 2): {cmd}")),
        ("FROM foo\nSYS-TEM x\n", format!("(line 2): {cmd}")),
        ("FROM foo\r\n\r\nBAD x\r\n", format!("(line 3): {cmd}")),
        (
            "\nFROM foo\nMESSAGE badguy I'm a bad guy!\n",
            format!("(line 3): {role}"),
        ),
        ("FROM foo\nMESSAGE System hi\n", format!("(line 2): {role}")),
        (
            "FROM foo\nMESSAGE system\n",
            "unexpected EOF: system".into(),
        ),
        ("FROM foo\nMESSAGE system", "unexpected EOF".into()),
        (
            "\nFROM foo\nPARAMETER param1\n",
            "unexpected EOF: param1".into(),
        ),
        (
            "FROM foo\nPARAMETER top-k 1\n",
            "unexpected EOF: top".into(),
        ),
        (
            "FROM foo\nSYSTEM \"\"\"unterminated\n",
            "unexpected EOF".into(),
        ),
        (
            "FROM foo\nSYSTEM \"unterminated\nmore",
            "unexpected EOF".into(),
        ),
        ("FROM", "unexpected EOF".into()),
    ];
    for (input, want) in cases {
        let err = parse(input).expect_err(input);
        assert_eq!(err.to_string(), want, "{input:?}");
    }
}

#[test]
fn parse_bytes_handles_boms_and_bad_utf8() {
    let want = vec![from("foo"), Command::System("hé".into())];
    let utf8 = "\u{feff}FROM foo\nSYSTEM hé\n";
    assert_eq!(parse_bytes(utf8.as_bytes()).unwrap().commands, want);
    let le: Vec<u8> = utf8.encode_utf16().flat_map(u16::to_le_bytes).collect();
    assert_eq!(parse_bytes(&le).unwrap().commands, want);
    let be: Vec<u8> = utf8.encode_utf16().flat_map(u16::to_be_bytes).collect();
    assert_eq!(parse_bytes(&be).unwrap().commands, want);
    let bad = parse_bytes(b"FROM foo\nSYSTEM a\xffb\n").unwrap();
    assert_eq!(bad.commands[1], Command::System("a\u{fffd}b".into()));
}

#[test]
fn renders_like_ollama() {
    let mf = Modelfile {
        commands: vec![
            from("/models/blobs/sha256-abc"),
            Command::Template("{{ .Prompt }}".into()),
            Command::System("line one\nline two".into()),
            param("stop", "<|im_end|>"),
            param("temperature", "0.7"),
            Command::License("a \"quoted\"\nlicense".into()),
            msg("user", "hi there"),
        ],
    };
    assert_eq!(
        mf.to_string(),
        "FROM /models/blobs/sha256-abc\n\
         TEMPLATE {{ .Prompt }}\n\
         SYSTEM \"line one\nline two\"\n\
         PARAMETER stop <|im_end|>\n\
         PARAMETER temperature 0.7\n\
         LICENSE \"\"\"a \"quoted\"\nlicense\"\"\"\n\
         MESSAGE user hi there\n"
    );
}

#[test]
fn round_trips() {
    let values = [
        "plain",
        "",
        " leading space",
        "trailing space ",
        "\ttab edge\t",
        "multi\nline",
        "multi\nline with \"quotes\"",
        "\"starts with a quote",
        "\"fully quoted\"",
        "ends with quote\"",
        "\"",
        "\"\"",
        "crlf\r\ninside",
        "lone\rcr",
        "has \"\"\" triple on one line",
        "{{- range .Messages }}<|im_start|>{{ .Role }}\n{{ .Content }}<|im_end|>\n{{ end }}<|im_start|>assistant\n",
        "# looks like a comment",
        "ünïcödé ✓ 日本語",
    ];
    for v in values {
        let mf = Modelfile {
            commands: vec![
                from(v),
                param("stop", v),
                Command::Template(v.into()),
                Command::System(v.into()),
                Command::Adapter(v.into()),
                Command::License(v.into()),
                msg("assistant", v),
                Command::Requires(v.into()),
                Command::Draft(v.into()),
                Command::Renderer(v.into()),
                Command::Parser(v.into()),
            ],
        };
        let text = mf.to_string();
        let back = parse(&text).unwrap_or_else(|e| panic!("{v:?} -> {text:?}: {e}"));
        assert_eq!(back, mf, "{v:?} -> {text:?}");
    }
}

#[test]
fn typed_parameters() {
    let ok: Vec<(&str, &str, serde_json::Value)> = vec![
        ("num_ctx", "4096", json!(4096)),
        ("seed", "-1", json!(-1)),
        ("num_gpu", "+2", json!(2)),
        ("main_gpu", "0", json!(0)),
        ("temperature", "0.7", json!(0.7)),
        ("top_p", "1", json!(1)),
        ("min_p", ".05", json!(0.05)),
        ("repeat_penalty", "1.1", json!(1.1)),
        ("use_mmap", "false", json!(false)),
        ("use_mmap", "T", json!(true)),
        ("use_mmap", "1", json!(true)),
        ("stop", "</s>", json!(["</s>"])),
    ];
    for (n, v, want) in ok {
        assert_eq!(format_param(n, v), Ok(want), "{n} {v}");
    }
    let bad = [
        ("num_ctx", "4k", "invalid int value [4k]"),
        ("num_ctx", "1.5", "invalid int value [1.5]"),
        ("num_ctx", "1_000", "invalid int value [1_000]"),
        ("temperature", "hot", "invalid float value [hot]"),
        ("temperature", "inf", "invalid float value [inf]"),
        ("temperature", "1e39", "invalid float value [1e39]"),
        ("use_mmap", "yes", "invalid bool value [yes]"),
        ("foo", "1", "unknown parameter 'foo'"),
        ("mirostat", "1", "unknown parameter 'mirostat'"),
    ];
    for (n, v, want) in bad {
        assert_eq!(format_param(n, v), Err(want.to_owned()), "{n} {v}");
    }
}

#[test]
fn parameters_accumulate_stop_and_warn_on_deprecated() {
    let mf = parse(
        "FROM x\nPARAMETER stop a\nPARAMETER temperature 0.1\nPARAMETER stop b\n\
         PARAMETER mirostat 2\nPARAMETER temperature 0.3\nPARAMETER penalize_newline true\n",
    )
    .unwrap();
    let out = parameters(&mf).unwrap();
    assert_eq!(
        serde_json::Value::Object(out.params),
        json!({"stop": ["a", "b"], "temperature": 0.3})
    );
    assert_eq!(
        out.warnings,
        vec![
            "warning: parameter mirostat is deprecated",
            "warning: parameter penalize_newline is deprecated"
        ]
    );
    for d in DEPRECATED_PARAMETERS {
        let mf = parse(&format!("FROM x\nPARAMETER {d} 1\n")).unwrap();
        assert!(parameters(&mf).unwrap().params.is_empty(), "{d}");
    }
    let bad = parse("FROM x\nPARAMETER num_ctx big\n").unwrap();
    assert_eq!(parameters(&bad), Err("invalid int value [big]".to_owned()));
}

#[test]
fn requires_is_semver_without_v() {
    for (input, want) in [
        ("0.14.0", "0.14.0"),
        ("v0.14.0", "0.14.0"),
        ("1", "1"),
        ("v1.2", "1.2"),
        ("1.2.3-rc.1+build.5", "1.2.3-rc.1+build.5"),
    ] {
        assert_eq!(validate_requires(input), Ok(want.to_owned()), "{input}");
    }
    for bad in [
        "", "v", "01.2.3", "1.2.3.4", "1.2-rc1", "x.y.z", "1.2.3-", "1.2.3-01", "vv1",
    ] {
        assert_eq!(
            validate_requires(bad),
            Err("requires must be a valid semver (e.g. 0.14.0)".to_owned()),
            "{bad}"
        );
    }
}

#[test]
fn requires_compares_by_semver_precedence() {
    for (have, required, ok) in [
        ("0.30.0", "0.14.0", true),
        ("0.30.0", "v0.30.0", true),
        ("0.30.0", "0.30.1", false),
        ("0.30.0", "0.31", false),
        ("0.30.0", "1", false),
        ("0.30.0", "0.9.9", true),
        ("0.30.0", "0.30.0-rc1", true),
        ("0.30.0-rc1", "0.30.0", false),
        ("0.30.0", "0.30.0+build.7", true),
    ] {
        assert_eq!(satisfies(have, required), ok, "{have} vs {required}");
    }
}
