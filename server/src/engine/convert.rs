//! Conversions from the API's wire and request types to the renderer's and the runner's:
//! messages, Modelfile MESSAGE layers, `think`, `format` constraints, logprobs, and whether the
//! runner should add BOS itself.

use runner_protocol::Constraint;

use super::Model;
use crate::api::request::{Format, ThinkValue};
use crate::api::types::{Logprob, Message, TokenLogprob};
use crate::config::KeepAlive as ConfigKeepAlive;
use crate::prompt;
use crate::scheduler::KeepAlive;

pub fn keep_alive(k: ConfigKeepAlive) -> KeepAlive {
    match k {
        ConfigKeepAlive::Forever => KeepAlive::Forever,
        ConfigKeepAlive::For(d) => KeepAlive::For(d),
    }
}

pub fn constraint(format: &Format) -> Option<Constraint> {
    match format {
        Format::None => None,
        Format::Json => Some(Constraint::Json {
            thinking_close: Vec::new(),
        }),
        Format::Schema(s) => Some(Constraint::JsonSchema {
            schema: s.clone(),
            thinking_close: Vec::new(),
        }),
    }
}

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

pub fn logprobs(lp: Vec<runner_protocol::TokenLogprob>) -> Vec<Logprob> {
    lp.into_iter()
        .map(|t| Logprob {
            token: TokenLogprob {
                token: t.token,
                logprob: f64::from(t.logprob),
                bytes: t.bytes,
            },
            top_logprobs: t
                .top_logprobs
                .into_iter()
                .map(|a| TokenLogprob {
                    token: a.token,
                    logprob: f64::from(a.logprob),
                    bytes: a.bytes,
                })
                .collect(),
        })
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

    #[test]
    fn format_becomes_a_constraint() {
        assert_eq!(constraint(&Format::None), None);
        assert!(matches!(
            constraint(&Format::Json),
            Some(Constraint::Json { .. })
        ));
        let schema = json!({"type": "object"});
        assert_eq!(
            constraint(&Format::Schema(schema.clone())),
            Some(Constraint::JsonSchema {
                schema,
                thinking_close: Vec::new()
            })
        );
    }

    #[test]
    fn logprobs_map_field_for_field() {
        let lp = runner_protocol::TokenLogprob {
            token: "a".into(),
            logprob: -0.5,
            bytes: vec![97],
            top_logprobs: vec![runner_protocol::TopLogprob {
                token: "b".into(),
                logprob: -1.0,
                bytes: vec![98],
            }],
        };
        let out = logprobs(vec![lp]);
        assert_eq!(
            serde_json::to_value(&out).unwrap(),
            json!([{"token": "a", "logprob": -0.5, "bytes": [97],
                    "top_logprobs": [{"token": "b", "logprob": -1.0, "bytes": [98]}]}])
        );
    }
}
