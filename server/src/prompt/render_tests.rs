//! Tests of Ollama's rendering rules (render.rs, values.rs, caps.rs) through the public API.

use serde_json::json;

use super::*;

fn go(src: &str) -> Template {
    Template::parse_go(src).unwrap_or_else(|e| panic!("{e}"))
}

fn chat(t: &Template, messages: Vec<Message>) -> String {
    render_chat(
        t,
        &RenderRequest {
            messages,
            ..Default::default()
        },
    )
    .unwrap()
}

fn m(role: &str, content: &str) -> Message {
    Message::new(role, content)
}

#[test]
fn collate_merges_same_role_except_tool_and_joins_system() {
    let (system, out) = collate(&[
        m("system", "a"),
        m("system", "b"),
        m("user", "u1"),
        m("user", "u2"),
        m("tool", "t1"),
        m("tool", "t2"),
        m("system", "c"),
    ]);
    assert_eq!(system, "a\n\nb\n\nc");
    let roles: Vec<(&str, &str)> = out
        .iter()
        .map(|m| (m.role.as_str(), m.content.as_str()))
        .collect();
    assert_eq!(
        roles,
        vec![
            ("system", "a\n\nb"),
            ("user", "u1\n\nu2"),
            ("tool", "t1"),
            ("tool", "t2"),
            ("system", "c")
        ]
    );
}

#[test]
fn messages_path_sees_merged_messages_and_all_systems() {
    let t = go("[{{ .System }}]{{ range .Messages }}<{{ .Role }}:{{ .Content }}>{{ end }}");
    let out = chat(
        &t,
        vec![
            m("system", "s1"),
            m("user", "a"),
            m("user", "b"),
            m("system", "s2"),
        ],
    );
    assert_eq!(out, "[s1\n\ns2]<system:s1><user:a\n\nb><system:s2>");
}

#[test]
fn message_fields_match_ollama() {
    let t = go("{{ range .Messages }}{{ .Role }}|{{ len .Images }}|{{ .Thinking }}|{{ .ToolName }}|{{ .ToolCallID }}|{{ range .ToolCalls }}{{ .ID }}/{{ .Function.Index }}/{{ .Function.Name }}/{{ .Function.Arguments }}{{ end }};{{ end }}");
    let mut args = serde_json::Map::new();
    args.insert("b".into(), json!([1, "<x>"]));
    args.insert("a".into(), json!(2));
    let call = ToolCall {
        id: "call_1".into(),
        index: 3,
        name: "f".into(),
        arguments: args,
    };
    let out = chat(
        &t,
        vec![
            Message {
                images: 2,
                ..m("user", "look")
            },
            Message {
                thinking: Some("hmm".into()),
                tool_calls: vec![call],
                ..m("assistant", "")
            },
            Message {
                tool_name: Some("f".into()),
                tool_call_id: Some("call_1".into()),
                ..m("tool", "ok")
            },
        ],
    );
    assert_eq!(out, "user|2||||;assistant|0|hmm|||call_1/3/f/{\"a\":2,\"b\":[1,\"\\u003cx\\u003e\"]};tool|0||f|call_1|;");
    // Unknown fields of a message are errors (it is a Go struct), with a position.
    let e = render_chat(
        &go("{{ range .Messages }}\n {{ .Nope }}{{ end }}"),
        &RenderRequest {
            messages: vec![m("user", "x")],
            ..Default::default()
        },
    )
    .unwrap_err();
    assert!(
        e.to_string().contains(":2:5:") && e.to_string().contains("Nope"),
        "{e}"
    );
}

#[test]
fn tool_function_prints_as_json() {
    // qwen2.5's template: `{"type": "function", "function": {{ .Function }}}`.
    let t =
        go("{{ range .Tools }}{{ .Function }}|{{ .Function.Parameters }}{{ end }}{{ .Messages }}");
    let tools = vec![
        json!({"type": "function", "function": {"name": "f", "description": "d",
        "parameters": {"type": "object", "properties": {"x": {"type": "string"}}}}}),
    ];
    let req = RenderRequest {
        messages: vec![],
        tools,
        think: None,
    };
    assert_eq!(
        render_chat(&t, &req).unwrap(),
        r#"{"name":"f","description":"d","parameters":{"type":"object","properties":{"x":{"type":"string"}}}}|{"type":"object","properties":{"x":{"type":"string"}}}[]"#
    );
}

#[test]
fn message_json_uses_go_field_names() {
    let t = go("{{ range .Messages }}{{ json . }}{{ end }}");
    assert_eq!(
        chat(&t, vec![m("user", "a<b")]),
        r#"{"Role":"user","Content":"a\u003cb","Thinking":"","Images":null,"ToolCalls":null,"ToolName":"","ToolCallID":""}"#
    );
}

#[test]
fn templates_are_shareable_across_threads() {
    fn assert_send_sync<T: Send + Sync>() {}
    assert_send_sync::<Template>();
}

#[test]
fn jinja_tools_keep_client_key_order() {
    let t = Template::jinja(
        "{{ tools | tojson }}|{{ messages[0].tool_calls[0].function.arguments | tojson }}".into(),
        String::new(),
        String::new(),
    )
    .unwrap();
    let mut args = serde_json::Map::new();
    args.insert("z".into(), json!(1));
    args.insert("a".into(), json!("é"));
    let call = ToolCall {
        name: "f".into(),
        arguments: args,
        ..Default::default()
    };
    let req = RenderRequest {
        messages: vec![Message {
            tool_calls: vec![call],
            ..m("assistant", "")
        }],
        tools: vec![json!({"type": "function", "function": {"name": "f", "description": "d"}})],
        think: None,
    };
    assert_eq!(
        render_chat(&t, &req).unwrap(),
        r#"[{"type": "function", "function": {"name": "f", "description": "d"}}]|{"z": 1, "a": "é"}"#
    );
}

#[test]
fn tools_print_as_json_and_range_sorted() {
    let t = go("{{ .Tools }}\n{{ range .Tools }}{{ range $k, $v := .Function.Parameters.Properties }}{{ $k }}:{{ toTypeScriptType $v }}:{{ $v.Type }},{{ end }}{{ end }}{{ range .Messages }}{{ end }}");
    let tools = vec![
        json!({"type": "function", "function": {"name": "f", "parameters": {"type": "object", "properties": {
            "z": {"type": ["string", "null"]}, "a": {"type": "integer", "description": "n"}
        }}}}),
    ];
    let out = render_chat(
        &t,
        &RenderRequest {
            messages: vec![m("user", "x")],
            tools,
            think: None,
        },
    )
    .unwrap();
    assert_eq!(
        out,
        "[{\"type\":\"function\",\"function\":{\"name\":\"f\",\"description\":\"\",\"parameters\":{\"type\":\"object\",\"properties\":{\"a\":{\"type\":\"integer\",\"description\":\"n\"},\"z\":{\"type\":[\"string\",\"null\"]}}}}}]\na:number:integer,z:string | null:[string null],"
    );
    assert!(t.uses_tools());
}

#[test]
fn no_tools_print_as_null_but_stay_false_and_empty() {
    // Ollama's `templateTools(nil)` marshals to `null`.
    let t = go("{{ .Tools }}|{{ json .Tools }}|{{ if .Tools }}T{{ else }}F{{ end }}|{{ range .Tools }}x{{ end }}{{ len .Tools }}{{ range .Messages }}{{ end }}");
    assert_eq!(chat(&t, vec![m("user", "x")]), "null|null|F|0");
}

#[test]
fn response_is_appended_when_template_lacks_messages_and_response() {
    let t = go("{{ .System }} USER: {{ .Prompt }} ASSISTANT:");
    assert_eq!(t.source(), "{{ .System }} USER: {{ .Prompt }} ASSISTANT:");
    assert_eq!(
        chat(
            &t,
            vec![
                m("user", "Hello!"),
                m("assistant", "Hi there."),
                m("user", "How are you?")
            ]
        ),
        " USER: Hello! ASSISTANT:Hi there. USER: How are you? ASSISTANT:"
    );
    // Default template.
    let d = Template::default_go();
    assert_eq!(
        chat(
            &d,
            vec![m("user", "a"), m("assistant", "b"), m("user", "c")]
        ),
        "abc"
    );
}

#[test]
fn legacy_prefill_keeps_response_and_cuts_after_it() {
    let t = go(include_str!("testdata/legacy/template.gotmpl"));
    let out = chat(&t, vec![m("user", "Q"), m("assistant", "The answer is")]);
    assert_eq!(
        out,
        "<|im_start|>user\nQ<|im_end|>\n<|im_start|>assistant\nThe answer is"
    );
    // A system message after a user turn flushes that turn first.
    let out = chat(&t, vec![m("user", "Q"), m("system", "S"), m("user", "R")]);
    assert_eq!(
        out,
        "<|im_start|>user\nQ<|im_end|>\n<|im_start|>assistant\n<|im_end|>\n<|im_start|>system\nS<|im_end|>\n<|im_start|>user\nR<|im_end|>\n<|im_start|>assistant\n"
    );
}

#[test]
fn think_values() {
    let t = go("{{ .Think }} {{ .ThinkLevel }} {{ .IsThinkSet }}{{ range .Messages }}{{ end }}");
    let r = |think| {
        render_chat(
            &t,
            &RenderRequest {
                messages: vec![m("user", "x")],
                tools: vec![],
                think,
            },
        )
        .unwrap()
    };
    assert_eq!(r(None), "false  false");
    assert_eq!(r(Some(Think::Bool(true))), "true medium true");
    assert_eq!(r(Some(Think::Bool(false))), "false  true");
    assert_eq!(r(Some(Think::Level("high".into()))), "true high true");
    assert_eq!(r(Some(Think::Level("bogus".into()))), "false bogus true");
}

#[test]
fn generate_suffix_and_plain() {
    let t = go("<PRE> {{ .Prompt }} <SUF>{{ .Suffix }} <MID>");
    assert!(t.uses_suffix());
    let req = GenerateRequest {
        prompt: "def f(".into(),
        suffix: "    return x".into(),
        ..Default::default()
    };
    assert_eq!(
        render_generate(&t, &req).unwrap(),
        "<PRE> def f( <SUF>    return x <MID>"
    );

    let t = go(include_str!("testdata/chatml/template.gotmpl"));
    assert!(!t.uses_suffix());
    let req = GenerateRequest {
        prompt: "Hi [img] and".into(),
        system: "Sys".into(),
        messages: vec![m("user", "earlier"), m("assistant", "ok")],
        images: 2,
        ..Default::default()
    };
    assert_eq!(
        render_generate(&t, &req).unwrap(),
        "<|im_start|>system\nSys<|im_end|>\n<|im_start|>user\nearlier<|im_end|>\n<|im_start|>assistant\nok<|im_end|>\n<|im_start|>user\n[img-1]Hi [img-0] and<|im_end|>\n<|im_start|>assistant\n"
    );
}

#[test]
fn generate_with_a_renderer() {
    // Ollama's generate renders a prompt (and system) as a chat through the model's renderer;
    // a suffix request runs the TEMPLATE beside it instead.
    let t = Template::builtin(
        "qwen3-coder",
        Some(go(
            "{{- if .Suffix }}<PRE> {{ .Prompt }} <SUF>{{ .Suffix }} <MID>\n{{- else }}{{ .Prompt }}\n{{- end }}",
        )),
    )
    .unwrap();
    let req = GenerateRequest {
        prompt: "Write a hello world function".into(),
        system: "You are a helpful coding assistant.".into(),
        ..Default::default()
    };
    assert_eq!(
        render_generate(&t, &req).unwrap(),
        "<|im_start|>system\nYou are a helpful coding assistant.<|im_end|>\n<|im_start|>user\nWrite a hello world function<|im_end|>\n<|im_start|>assistant\n"
    );
    let req = GenerateRequest {
        prompt: "def add(".into(),
        suffix: "    return c".into(),
        ..Default::default()
    };
    assert_eq!(
        render_generate(&t, &req).unwrap(),
        "<PRE> def add( <SUF>    return c <MID>"
    );
}

#[test]
fn image_tags_number_across_messages() {
    let out = tag_images(&[
        Message {
            images: 1,
            ..m("user", "a")
        },
        Message {
            images: 2,
            ..m("user", "x [img] y")
        },
    ]);
    assert_eq!(out[0].content, "[img-0]a");
    assert_eq!(out[1].content, "[img-2]x [img-1] y");
}

#[test]
fn thinking_tag_inference() {
    let qwen = go("{{- range .Messages }}{{ if eq .Role \"assistant\" }}{{ if .Thinking }}<think>\n{{ .Thinking }}\n</think>\n\n{{ end }}{{ .Content }}{{ end }}{{ end }}");
    assert_eq!(
        qwen.thinking_tags(),
        Some(("<think>".into(), "</think>".into()))
    );
    let out = chat(
        &qwen,
        vec![
            m("user", "q"),
            Message {
                thinking: Some("hmm".into()),
                ..m("assistant", "a")
            },
        ],
    );
    assert_eq!(out, "<think>\nhmm\n</think>\n\na");
    // `.Thinking` outside `range .Messages` does not count.
    assert_eq!(
        go("{{ if .Thinking }}<t>{{ .Thinking }}</t>{{ end }}{{ .Messages }}").thinking_tags(),
        None
    );
    assert_eq!(
        go(include_str!("testdata/llama3/template.gotmpl")).thinking_tags(),
        None
    );
    let j = Template::jinja(
        "{% if x %}<think>{% endif %}</think>".into(),
        String::new(),
        String::new(),
    )
    .unwrap();
    assert_eq!(
        j.thinking_tags(),
        Some(("<think>".into(), "</think>".into()))
    );
}

#[test]
fn tool_call_tag_defaults_to_brace() {
    assert_eq!(
        go(include_str!("testdata/llama3/template.gotmpl")).tool_call_tag(),
        "{"
    );
    let t = go("{{ range .Messages }}{{ if .ToolCalls }}[TOOL_CALLS] [{{ range .ToolCalls }}{{ end }}]{{ end }}{{ end }}");
    assert_eq!(t.tool_call_tag(), "[TOOL_CALLS] [");
}

#[test]
fn vars_match_ollama() {
    let vars = |src: &str| match go(src) {
        Template::Go(g) => g.vars,
        _ => unreachable!("a Go template"),
    };
    assert_eq!(vars("{{ .Prompt }}"), ["prompt", "response"]);
    assert_eq!(
        vars("{{ with .Tools }}{{ . }}{{ end }} {{ .System }} {{ .Prompt }}"),
        ["prompt", "response", "system", "tools"]
    );
    assert_eq!(
        vars("{{ range .Messages }}{{ .Role }} {{ .Content }}{{ end }}"),
        ["content", "messages", "role"]
    );
}

#[test]
fn parse_errors_surface_positions() {
    let e = Template::parse_go("ok\n{{ if .A }}").unwrap_err();
    assert_eq!(e.line, 2);
    // Ollama rejects `{{ template "x" }}` without an argument anywhere in the template.
    let e =
        Template::parse_go("{{ define \"x\" }}{{ template \"x\" }}{{ end }}{{ template \"x\" . }}")
            .unwrap_err();
    assert!(e.msg.contains("undefined template specified"), "{e}");
    assert!(Template::parse_go("{{ define \"x\" }}x{{ end }}{{ template \"x\" . }}").is_ok());
    assert!(Template::jinja("{% for %}".into(), String::new(), String::new()).is_err());
}
