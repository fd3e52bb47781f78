//! Message and call builders shared by the renderers' tests.

use serde_json::Value as J;

use crate::prompt::{Message, ToolCall};

/// A message with `role` and `content`.
pub fn m(role: &str, content: &str) -> Message {
    Message::new(role, content)
}

/// An assistant message with `content` and `thinking`.
pub fn thought(content: &str, thinking: &str) -> Message {
    Message {
        thinking: Some(thinking.into()),
        ..m("assistant", content)
    }
}

/// A call of `name` with `args` (a JSON object; anything else is no arguments), no id.
pub fn call(name: &str, args: J) -> ToolCall {
    ToolCall {
        name: name.into(),
        arguments: args.as_object().cloned().unwrap_or_default(),
        ..Default::default()
    }
}

/// A call of `name` with `args` and the call id `id`.
pub fn call_id(id: &str, name: &str, args: J) -> ToolCall {
    ToolCall {
        id: id.into(),
        ..call(name, args)
    }
}

/// An assistant message with `content`, `thinking` when given, and `calls`.
pub fn assistant(content: &str, thinking: Option<&str>, calls: Vec<ToolCall>) -> Message {
    Message {
        thinking: thinking.map(str::to_string),
        ..with_calls(content, calls)
    }
}

/// Calls from `(name, args)` pairs ([`call`]).
pub fn calls(list: &[(&str, J)]) -> Vec<ToolCall> {
    list.iter().map(|(n, a)| call(n, a.clone())).collect()
}

/// An assistant message with `content` and `calls`.
pub fn with_calls(content: &str, calls: Vec<ToolCall>) -> Message {
    Message {
        tool_calls: calls,
        ..m("assistant", content)
    }
}
