//! The OpenAI layer's request structs as Ollama's openai package declares them (openai.go), for
//! `api::gojson`'s decode errors: Ollama's middleware binds the body into them and returns Go's
//! `encoding/json` text ("json: cannot unmarshal string into Go struct field
//! ChatCompletionRequest.max_tokens of type int").

use crate::api::gojson::{GoStruct, GoType};
use GoType::{Any, Plain, Struct, Structs};

const STR: GoType = Plain("string");
const BOOL: GoType = Plain("bool");
const INT: GoType = Plain("int");
const F64: GoType = Plain("float64");
const F32: GoType = Plain("float32");

/// OpenAI's message (Ollama's openai package).
static OPENAI_MESSAGE: GoStruct = GoStruct {
    pkg: "openai",
    name: "Message",
    fields: &[
        ("role", STR),
        ("content", Any),
        ("reasoning", STR),
        ("tool_calls", Plain("[]openai.ToolCall")),
        ("name", STR),
        ("tool_call_id", STR),
    ],
};

static STREAM_OPTIONS: GoStruct = GoStruct {
    pkg: "openai",
    name: "StreamOptions",
    fields: &[("include_usage", BOOL)],
};

/// By the name of herd's Rust type that decodes each.
pub static STRUCTS: &[(&str, GoStruct)] = &[
    (
        "ChatCompletionRequest",
        GoStruct {
            pkg: "openai",
            name: "ChatCompletionRequest",
            fields: &[
                ("model", STR),
                ("messages", Structs("[]openai.Message", &OPENAI_MESSAGE)),
                ("stream", BOOL),
                ("stream_options", Struct(&STREAM_OPTIONS)),
                ("max_tokens", INT),
                ("seed", INT),
                ("stop", Any),
                ("temperature", F64),
                ("frequency_penalty", F64),
                ("presence_penalty", F64),
                ("top_p", F64),
                ("response_format", Plain("openai.ResponseFormat")),
                ("tools", Plain("[]api.Tool")),
                ("reasoning", Plain("openai.Reasoning")),
                ("reasoning_effort", STR),
                ("logprobs", BOOL),
                ("top_logprobs", INT),
                ("_debug_render_only", BOOL),
            ],
        },
    ),
    (
        "CompletionRequest",
        GoStruct {
            pkg: "openai",
            name: "CompletionRequest",
            fields: &[
                ("model", STR),
                ("prompt", STR),
                ("frequency_penalty", F32),
                ("max_tokens", INT),
                ("presence_penalty", F32),
                ("seed", INT),
                ("stop", Any),
                ("stream", BOOL),
                ("stream_options", Struct(&STREAM_OPTIONS)),
                ("temperature", F32),
                ("top_p", F32),
                ("suffix", STR),
                ("logprobs", INT),
                ("_debug_render_only", BOOL),
            ],
        },
    ),
    (
        "EmbeddingsRequest",
        GoStruct {
            pkg: "openai",
            name: "EmbedRequest",
            fields: &[
                ("input", Any),
                ("model", STR),
                ("dimensions", INT),
                ("encoding_format", STR),
            ],
        },
    ),
];
