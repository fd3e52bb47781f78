//! Conversions from the API's request types to the prompt renderer's: messages, Modelfile
//! MESSAGE layers, `think`; and whether the runner should add BOS itself. (Options, formats,
//! metrics and logprobs convert in `api::convert`.)

use super::Model;
use crate::api::request::ThinkValue;
use crate::api::types::Message;
use crate::prompt;

pub fn think(t: Option<ThinkValue>) -> Option<prompt::Think> {
    t.map(|t| {
        if t.is_level {
            prompt::Think::Level(t.level().to_owned())
        } else {
            prompt::Think::Bool(t.enabled())
        }
    })
}

/// A wire message as the prompt renderer takes it.
pub fn render_message(m: &Message) -> prompt::Message {
    prompt::Message {
        role: m.role.clone(),
        content: m.content.clone(),
        thinking: (!m.thinking.is_empty()).then(|| m.thinking.clone()),
        images: m.images.len(),
        tool_calls: m
            .tool_calls
            .iter()
            .map(|c| prompt::ToolCall {
                id: c.id.clone(),
                index: c.function.index,
                name: c.function.name.clone(),
                arguments: c.function.arguments.clone(),
            })
            .collect(),
        tool_name: (!m.tool_name.is_empty()).then(|| m.tool_name.clone()),
        tool_call_id: (!m.tool_call_id.is_empty()).then(|| m.tool_call_id.clone()),
    }
}

/// Modelfile MESSAGE layers as render messages.
pub fn layer_messages(model: &Model) -> Vec<prompt::Message> {
    model
        .view
        .messages
        .iter()
        .map(|m| prompt::Message::new(&m.role.to_lowercase(), &m.content))
        .collect()
}

/// Whether the runner should add BOS itself: not when a Jinja template already printed it.
pub fn add_special(model: &Model, prompt: &str) -> bool {
    !model
        .bos_text
        .as_deref()
        .is_some_and(|b| !b.is_empty() && prompt.starts_with(b))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::api::request::parse_think;
    use serde_json::json;

    #[test]
    fn think_keeps_bool_or_level_shape() {
        let t = |v| think(parse_think(Some(&v)).unwrap());
        assert_eq!(t(json!(true)), Some(prompt::Think::Bool(true)));
        assert_eq!(t(json!(false)), Some(prompt::Think::Bool(false)));
        assert_eq!(t(json!("high")), Some(prompt::Think::Level("high".into())));
        assert_eq!(think(None), None);
    }
}
