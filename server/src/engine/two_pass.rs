//! `OLLAMA_FORMAT_TWO_PASS=1`: the rollback switch for single-pass think+format (DESIGN 6). A
//! format on a response that begins in thinking runs as Ollama used to run it, two generations
//! on one runner slot:
//! 1. the prompt with no constraint at all; the output parser's thinking (and any tool calls it
//!    reports) stream to the client as they come; calls a parser holds for the last chunk (the
//!    ones a harmony model makes before its final message) come with pass two's last chunk;
//! 2. as soon as the parser reports content (anything but whitespace) that generation is
//!    cancelled (its connection dropped). The content of the chunk that crossed the boundary is
//!    dropped with it: pass two writes the content anew, under the format;
//! 3. the caller re-renders the prompt with the parsed thinking as an assistant prefill
//!    ([`prefill`], and for harmony [`open_final`]) and the second generation runs with the
//!    format from its first token (no closing strings); its output is parsed as content;
//! 4. the final chunk's metrics add both passes (`prompt_eval_count`/`_duration`,
//!    `eval_count`/`_duration`); `done_reason` is the second's. A first pass that ends before any
//!    content is the whole answer, exactly as the single pass would deliver it.
//!
//! A cancelled generation sends no timings, so pass one's are the server's own measurement:
//! prompt tokens by the runner's tokenizer, prompt time until the first token, one token per
//! chunk received, eval time from the first token to the cancel.

use std::time::{Duration, Instant};

use futures_util::{Stream, StreamExt};
use runner_protocol::{CompletionRequest, Constraint, Prompt, TokenizeRequest};
use tokio::sync::mpsc;
use tokio_stream::wrappers::ReceiverStream;

use super::completion::{events, Event, Step};
use crate::api::types::Metrics;
use crate::error::Result;
use crate::prompt::parsers::{harmony::FINAL_HEADER, Parser};
use crate::prompt::Message;
use crate::scheduler::Lease;

/// Whether a request runs as two passes: the switch is on and it carries a format whose
/// response begins in thinking (closing strings named). Everything else is one generation in
/// either mode: no format, or a format that applies from the first token.
pub fn applies(switch: bool, c: Option<&Constraint>) -> bool {
    switch
        && match c {
            Some(Constraint::Json { thinking_close })
            | Some(Constraint::JsonSchema { thinking_close, .. }) => !thinking_close.is_empty(),
            None => false,
        }
}

/// The same constraint with no closing strings: the format from the first token.
fn from_first_token(c: Option<Constraint>) -> Option<Constraint> {
    c.map(|c| match c {
        Constraint::Json { .. } => Constraint::Json {
            thinking_close: Vec::new(),
        },
        Constraint::JsonSchema { schema, .. } => Constraint::JsonSchema {
            schema,
            thinking_close: Vec::new(),
        },
    })
}

/// The assistant message pass two's prompt ends with: the parsed thinking, no content yet.
pub fn prefill(thinking: &str) -> Message {
    Message {
        thinking: Some(thinking.to_owned()),
        ..Message::new("assistant", "")
    }
}

/// Harmony renders a thinking prefill as a finished analysis message, so the model's next
/// tokens would be a new message header, which a format from the first token cannot allow.
/// The prompt opens the final message itself (Ollama's harmony prompt fix for the same flow).
/// `harmony`: the model's responses are parsed as harmony.
pub fn open_final(harmony: bool, mut prompt: String) -> String {
    if harmony && !prompt.ends_with(FINAL_HEADER) {
        if !prompt.ends_with("<|start|>assistant") {
            prompt.push_str("<|start|>assistant");
        }
        prompt.push_str(FINAL_HEADER);
    }
    prompt
}

/// Pass two as the caller renders it from the parsed thinking.
pub struct Second {
    pub prompt: String,
    /// Whether the runner adds BOS to this prompt.
    pub add_special: bool,
    /// Parses pass two's output, which starts in content.
    pub parser: Box<dyn Parser>,
}

pub type Reprompt = Box<dyn FnOnce(&str) -> Result<Second> + Send>;

pub struct Plan {
    pub lease: Lease,
    /// The request the single pass would send; pass one sends it without its constraint.
    pub first: CompletionRequest,
    /// Pass one's output parser (the response begins in thinking).
    pub parser: Box<dyn Parser>,
    pub reprompt: Reprompt,
    /// When the HTTP request arrived, and how long acquiring the runner took.
    pub started: Instant,
    pub load: Duration,
}

/// Runs the two passes; the stream ends after `Event::Done` or an `Err`. Dropping it cancels
/// whichever pass is running and releases the lease.
pub fn run(plan: Plan) -> impl Stream<Item = Result<Event>> + Send {
    let (tx, rx) = mpsc::channel(16);
    tokio::spawn(async move {
        if let Err(e) = drive(plan, &tx).await {
            let _ = tx.send(Err(e)).await;
        }
    });
    ReceiverStream::new(rx)
}

type Tx = mpsc::Sender<Result<Event>>;

/// Pass one as the server measured it.
#[derive(Debug, Default)]
struct PassOne {
    thinking: String,
    transcript: String,
    first_token: Option<Instant>,
    tokens: u64,
}

async fn drive(plan: Plan, tx: &Tx) -> Result<()> {
    let Plan {
        lease,
        mut first,
        mut parser,
        reprompt,
        started,
        load,
    } = plan;
    let constraint = from_first_token(first.constraint.take());
    let sent = Instant::now();
    let mut one = Box::pin(super::steps(
        lease.completion(&first).await?,
        started,
        load,
        lease.meter(started),
    ));
    let mut p1 = PassOne {
        transcript: prompt_text(&first.prompt),
        ..PassOne::default()
    };
    loop {
        let step = tokio::select! {
            () = tx.closed() => return Ok(()),
            s = one.next() => s,
        };
        let (content, logprobs) = match step {
            None => return Ok(()),
            Some(Err(e)) => return Err(e),
            Some(Ok(Step::Done { reason, metrics })) => {
                // Ended before any content: the whole answer, as a single pass would give it.
                let parsed = parser.add("", true);
                let done = Event::Done {
                    parsed,
                    reason,
                    metrics,
                    transcript: p1.transcript,
                };
                let _ = tx.send(Ok(done)).await;
                return Ok(());
            }
            Some(Ok(Step::Text {
                content, logprobs, ..
            })) => (content, logprobs),
        };
        p1.first_token.get_or_insert_with(Instant::now);
        p1.tokens += 1;
        p1.transcript.push_str(&content);
        let mut parsed = parser.add(&content, false);
        p1.thinking.push_str(&parsed.thinking);
        let boundary = !parsed.content.trim().is_empty();
        // The boundary chunk's tokens are partly content that pass two rewrites: its logprobs
        // would describe text the client never sees.
        let logprobs = if boundary {
            parsed.content.clear();
            Vec::new()
        } else {
            logprobs
        };
        if (!parsed.is_empty() || !logprobs.is_empty())
            && tx
                .send(Ok(Event::Text {
                    parsed,
                    logprobs,
                    prompt_tokens: None,
                }))
                .await
                .is_err()
        {
            return Ok(());
        }
        if boundary {
            break;
        }
    }
    let cancelled = Instant::now();
    drop(one);
    // Calls a parser holds for the last chunk (harmony's) are pass one's, delivered with pass
    // two's last chunk (Ollama's parser lives through both passes); the rest of what it held is
    // content, which pass two writes anew.
    let mut carried = parser.add("", true).tool_calls;
    let mut summed = pass_one_metrics(&lease, &first, &p1, sent, cancelled).await;
    // Pass one was cut short, so its counts never passed through `steps`.
    lease
        .meter(started)
        .continued()
        .done(summed.prompt_eval_count, summed.eval_count);

    let second = reprompt(&p1.thinking)?;
    let mut req = first;
    req.prompt = Prompt::Text(second.prompt.clone());
    req.add_special = second.add_special;
    req.constraint = constraint;
    let meter = lease.meter(started).continued();
    let two = super::steps(lease.completion(&req).await?, started, load, meter);
    let mut two = Box::pin(events(two, second.parser, second.prompt));
    loop {
        let item = tokio::select! {
            () = tx.closed() => return Ok(()),
            i = two.next() => i,
        };
        let Some(item) = item else { return Ok(()) };
        let item = item.map(|e| match e {
            Event::Done {
                mut parsed,
                reason,
                metrics,
                transcript,
            } => {
                carried.append(&mut parsed.tool_calls);
                parsed.tool_calls = std::mem::take(&mut carried);
                summed.total_duration = metrics.total_duration;
                summed.load_duration = metrics.load_duration;
                summed.prompt_eval_count += metrics.prompt_eval_count;
                summed.prompt_eval_duration += metrics.prompt_eval_duration;
                summed.eval_count += metrics.eval_count;
                summed.eval_duration += metrics.eval_duration;
                Event::Done {
                    parsed,
                    reason,
                    metrics: summed,
                    transcript,
                }
            }
            text => text,
        });
        if tx.send(item).await.is_err() {
            return Ok(());
        }
    }
}

fn prompt_text(p: &Prompt) -> String {
    match p {
        Prompt::Text(t) => t.clone(),
        Prompt::Tokens(_) => String::new(),
    }
}

/// Pass one's counts and durations (see the module docs); a tokenizer failure only loses the
/// prompt count.
async fn pass_one_metrics(
    lease: &Lease,
    req: &CompletionRequest,
    p1: &PassOne,
    sent: Instant,
    cancelled: Instant,
) -> Metrics {
    let prompt_eval_count = match &req.prompt {
        Prompt::Tokens(t) => t.len() as u64,
        Prompt::Text(content) => {
            let t = TokenizeRequest {
                content: content.clone(),
                add_special: req.add_special,
                parse_special: req.parse_special,
            };
            match lease.tokenize(&t).await {
                Ok(r) => r.tokens.len() as u64,
                Err(e) => {
                    tracing::warn!(error = %e, "two-pass: could not count pass one's prompt");
                    0
                }
            }
        }
    };
    let first = p1.first_token.unwrap_or(cancelled);
    Metrics {
        prompt_eval_count,
        prompt_eval_duration: first.duration_since(sent).as_nanos() as u64,
        eval_count: p1.tokens,
        eval_duration: cancelled.duration_since(first).as_nanos() as u64,
        ..Metrics::default()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn two_passes_only_for_a_format_after_thinking_with_the_switch_on() {
        let close = || vec!["</think>".to_string()];
        let schema = Constraint::JsonSchema {
            schema: json!({"type": "object"}),
            thinking_close: close(),
        };
        let json_close = Constraint::Json {
            thinking_close: close(),
        };
        let json_now = Constraint::Json {
            thinking_close: vec![],
        };
        let cases = [
            (true, Some(&schema), true),
            (true, Some(&json_close), true),
            (true, Some(&json_now), false),
            (true, None, false),
            (false, Some(&schema), false),
            (false, None, false),
        ];
        for (switch, c, want) in cases {
            assert_eq!(applies(switch, c), want, "{switch} {c:?}");
        }
        assert_eq!(
            from_first_token(Some(schema.clone())),
            Some(Constraint::JsonSchema {
                schema: json!({"type": "object"}),
                thinking_close: vec![],
            })
        );
        assert_eq!(from_first_token(Some(json_close)), Some(json_now));
        assert_eq!(from_first_token(None), None);
    }

    #[test]
    fn harmony_prompts_open_the_final_message_once() {
        let cases = [
            (
                true,
                "x<|end|>",
                "x<|end|><|start|>assistant<|channel|>final<|message|>",
            ),
            (
                true,
                "x<|start|>assistant",
                "x<|start|>assistant<|channel|>final<|message|>",
            ),
            (
                true,
                "x<|channel|>final<|message|>",
                "x<|channel|>final<|message|>",
            ),
            (false, "x<|end|>", "x<|end|>"),
        ];
        for (harmony, prompt, want) in cases {
            assert_eq!(open_final(harmony, prompt.to_string()), want);
        }
        let m = prefill("because");
        assert_eq!(
            (m.role.as_str(), m.content.as_str(), m.thinking.as_deref()),
            ("assistant", "", Some("because"))
        );
    }
}
