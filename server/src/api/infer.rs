//! What the inference handlers (`generate`, `chat`, `embed`) share: reaching the engine, model
//! lookup with each handler's own not-found wording, capability checks, keep-alive and option
//! resolution, and conversions from the wire types to the engine's and the runner's.

use std::sync::Arc;

use runner_protocol::Constraint;
use serde_json::{Map, Value};

use super::options::Options;
use super::request::{Format, ThinkValue};
use super::types::{Logprob, Message, TokenLogprob};
use super::AppState;
use crate::config::KeepAlive as ConfigKeepAlive;
use crate::engine::{Engine, Model};
use crate::error::{Error, Result};
use crate::prompt;
use crate::scheduler::KeepAlive;

pub fn engine(state: &AppState) -> Result<&Engine> {
    state
        .engine
        .as_ref()
        .ok_or_else(|| Error::Internal("inference is not enabled on this server".into()))
}

/// How a handler words "no such model" (Ollama differs per endpoint).
#[derive(Debug, Clone, Copy)]
pub enum NotFound {
    /// generate/chat: 404 `model 'NAME' not found`.
    Quoted,
    /// embed/embeddings: 404 `model "NAME" not found, try pulling it first`.
    TryPulling,
}

impl NotFound {
    pub fn error(self, name: &str) -> Error {
        match self {
            NotFound::Quoted => Error::NotFound(format!("model '{name}' not found")),
            NotFound::TryPulling => Error::NotFound(format!(
                "model {} not found, try pulling it first",
                super::show::go_quote(name)
            )),
        }
    }
}

/// The stored model `name`; an unparsable name reads as not found, as in Ollama.
pub async fn lookup(state: &AppState, name: &str, nf: NotFound) -> Result<Arc<Model>> {
    match engine(state)?.model(&state.store, name).await {
        Ok(Some(m)) => Ok(m),
        Ok(None) | Err(Error::InvalidModelName) => Err(nf.error(name)),
        Err(e) => Err(e),
    }
}

/// 400 `"NAME" does not support CAP` unless the model has the capability.
pub fn require(model: &Model, cap: &str, what: &str, name: &str) -> Result<()> {
    if model.has_capability(cap) {
        return Ok(());
    }
    Err(Error::BadRequest(format!(
        "{} does not support {what}",
        super::show::go_quote(name)
    )))
}

pub fn keep_alive(k: Option<ConfigKeepAlive>) -> Option<KeepAlive> {
    k.map(|k| match k {
        ConfigKeepAlive::Forever => KeepAlive::Forever,
        ConfigKeepAlive::For(d) => KeepAlive::For(d),
    })
}

/// Defaults < `OLLAMA_CONTEXT_LENGTH` < the params layer < the request's `options`.
pub fn options(
    engine: &Engine,
    model: &Model,
    req: Option<&Map<String, Value>>,
) -> Result<Options> {
    Options::resolve(engine.settings().context_length, &model.view.options, req)
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

    #[test]
    fn not_found_wording_per_handler() {
        assert_eq!(
            NotFound::Quoted.error("nope").to_string(),
            "model 'nope' not found"
        );
        assert_eq!(
            NotFound::TryPulling.error("nope").to_string(),
            "model \"nope\" not found, try pulling it first"
        );
        assert_eq!(NotFound::Quoted.error("").status(), 404);
    }
}
