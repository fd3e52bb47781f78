use super::*;

#[test]
fn syntax_errors_read_as_go_writes_them() {
    let cases: &[(&[u8], Option<&str>)] = &[
        (br#"{"model": "a"}"#, None),
        (br#"{"model": "a"} trailing"#, None),
        (
            b"{model: 1}",
            Some("invalid character 'm' looking for beginning of object key string"),
        ),
        (
            b"nope",
            Some("invalid character 'o' in literal null (expecting 'u')"),
        ),
        (
            b"xyz",
            Some("invalid character 'x' looking for beginning of value"),
        ),
        (
            br#"{"a" 1}"#,
            Some("invalid character '1' after object key"),
        ),
        (
            br#"{"a": 1 "b": 2}"#,
            Some("invalid character '\"' after object key:value pair"),
        ),
        (
            br#"{"a": [1 2]}"#,
            Some("invalid character '2' after array element"),
        ),
        (
            br#"{"a": [1,]}"#,
            Some("invalid character ']' looking for beginning of value"),
        ),
        (
            br#"{"a": 01}"#,
            Some("invalid character '1' after object key:value pair"),
        ),
        (
            br#"{"a": -x}"#,
            Some("invalid character 'x' in numeric literal"),
        ),
        (
            br#"{"a": 1.x}"#,
            Some("invalid character 'x' after decimal point in numeric literal"),
        ),
        (
            br#"{"a": 1ex}"#,
            Some("invalid character 'x' in exponent of numeric literal"),
        ),
        (
            br#"{"a": tru}"#,
            Some("invalid character '}' in literal true (expecting 'e')"),
        ),
        (
            b"{\"a\": \"x\ny\"}",
            Some("invalid character '\\n' in string literal"),
        ),
        (
            br#"{"a": "\q"}"#,
            Some("invalid character 'q' in string escape code"),
        ),
        (
            br#"{"a": "\u12g4"}"#,
            Some("invalid character 'g' in \\u hexadecimal character escape"),
        ),
        (
            br#"{'a': 1}"#,
            Some("invalid character '\\'' looking for beginning of object key string"),
        ),
        (
            b"{\"a\": \x01}",
            Some("invalid character '\\x01' looking for beginning of value"),
        ),
        (br#"{"model": "#, Some("unexpected EOF")),
        (br#"{"model": "a"#, Some("unexpected EOF")),
        (b"[", Some("unexpected EOF")),
    ];
    for (body, want) in cases {
        assert_eq!(
            syntax_error(body).as_deref(),
            *want,
            "{}",
            String::from_utf8_lossy(body)
        );
    }
}

/// The OpenAI layer's bodies fail with the text Ollama's middleware returns from binding them
/// into its openai package's structs.
#[test]
fn openai_bodies_fail_with_gos_text() {
    use crate::api::openai::chat::ChatCompletionRequest;
    use crate::api::openai::embeddings::EmbeddingsRequest;
    let err = |body: &str| -> String {
        match crate::api::error::decode_json::<ChatCompletionRequest>(body.as_bytes()) {
            Err(crate::error::Error::BadRequest(m)) => m,
            other => panic!("{body}: {other:?}"),
        }
    };
    let cases = [
        (
            r#"{"model":"m","max_tokens":"x"}"#,
            "json: cannot unmarshal string into Go struct field ChatCompletionRequest.max_tokens of type int",
        ),
        (
            r#"{"model":"m","messages":"x"}"#,
            "json: cannot unmarshal string into Go struct field ChatCompletionRequest.messages of type []openai.Message",
        ),
        (
            r#"{"model":"m","messages":[{"role":5}]}"#,
            "json: cannot unmarshal number into Go struct field Message.messages.role of type string",
        ),
        (
            r#"{"model":"m","stream_options":{"include_usage":"yes"}}"#,
            "json: cannot unmarshal string into Go struct field StreamOptions.stream_options.include_usage of type bool",
        ),
        (
            r#"[1]"#,
            "json: cannot unmarshal array into Go value of type openai.ChatCompletionRequest",
        ),
    ];
    for (body, want) in cases {
        assert_eq!(err(body), want, "{body}");
    }
    match crate::api::error::decode_json::<EmbeddingsRequest>(br#"{"model":5}"#) {
        Err(crate::error::Error::BadRequest(m)) => assert_eq!(
            m,
            "json: cannot unmarshal number into Go struct field EmbedRequest.model of type string"
        ),
        other => panic!("{other:?}"),
    }
}

#[test]
fn type_errors_name_the_go_struct_field_and_type() {
    let chat = go_struct("server::api::types::ChatRequest").unwrap();
    let key = |k: &str| Step::Key(k.into());
    let cases: &[(&[Step], &str, Option<&str>)] = &[
        (
            &[key("options")],
            "string",
            Some("json: cannot unmarshal string into Go struct field ChatRequest.options of type map[string]interface {}"),
        ),
        (
            &[key("messages"), Step::Index, key("content")],
            "number",
            Some("json: cannot unmarshal number into Go struct field Message.messages.content of type string"),
        ),
        (
            &[key("messages")],
            "string",
            Some("json: cannot unmarshal string into Go struct field ChatRequest.messages of type []api.Message"),
        ),
        (
            &[key("messages"), Step::Index],
            "string",
            Some("json: cannot unmarshal string into Go struct field ChatRequest.messages of type api.Message"),
        ),
        (
            &[key("top_logprobs")],
            "number 1.5",
            Some("json: cannot unmarshal number 1.5 into Go struct field ChatRequest.top_logprobs of type int"),
        ),
        (
            &[],
            "array",
            Some("json: cannot unmarshal array into Go value of type api.ChatRequest"),
        ),
        // Unknown to the table: the caller keeps serde's text.
        (&[key("format")], "number", None),
        (&[key("nope")], "number", None),
    ];
    for (path, found, want) in cases {
        assert_eq!(type_error(chat, path, found).as_deref(), *want, "{path:?}");
    }
    let generate = go_struct("GenerateRequest").unwrap();
    assert_eq!(
        type_error(generate, &[key("context"), Step::Index], "string").as_deref(),
        Some("json: cannot unmarshal string into Go struct field GenerateRequest.context of type int")
    );
}

#[test]
fn serde_kinds_become_go_kinds() {
    let cases = [
        ("invalid type: string \"x\", expected a map", Some("string")),
        (
            "invalid type: integer `5`, expected a string",
            Some("number"),
        ),
        (
            "invalid type: floating point `1.5`, expected i64",
            Some("number 1.5"),
        ),
        (
            "invalid value: integer `-1`, expected u32",
            Some("number -1"),
        ),
        (
            "invalid type: boolean `true`, expected a string",
            Some("bool"),
        ),
        ("invalid type: map, expected a string", Some("object")),
        ("invalid type: sequence, expected a string", Some("array")),
        ("missing field `model`", None),
    ];
    for (msg, want) in cases {
        assert_eq!(found_kind(msg).as_deref(), want, "{msg}");
    }
}
