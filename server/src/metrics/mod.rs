//! The server's Prometheus metrics: one registry per server (a [`Metrics`] handle in the app
//! state and the scheduler), the series herd exports, and their text exposition for `/metrics`.
//!
//! Crate: `prometheus` (tikv/rust-prometheus) without its protobuf feature. It writes the
//! classic Prometheus text format (0.0.4) that every scraper reads and `promtool check metrics`
//! lints; `prometheus-client` writes only OpenMetrics, whose counter `# TYPE` lines name the
//! family without `_total`, which promtool's text linter reports as a counter lacking the
//! suffix.
//!
//! Invariants:
//! - Labels are bounded: `route` is the matched route template (never a raw path), `model` a
//!   model the store resolved (a request for an unknown model never reaches the scheduler),
//!   `cause` and `status` small closed sets.
//! - Scheduler gauges (queue depth, in-flight, loaded models and memory) are published as a
//!   whole snapshot by the scheduler actor after every event ([`Metrics::publish`]); series of
//!   models no longer queued or loaded are removed rather than left at a stale value.
//! - Events are counted where they happen: HTTP responses in `api::metrics`, queue waits, loads
//!   and runner deaths in the scheduler actor, tokens and latencies in the engine's completion
//!   stream ([`CompletionMeter`]).

use std::collections::BTreeMap;
use std::collections::BTreeSet;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use prometheus::{
    Encoder, HistogramOpts, HistogramVec, IntCounterVec, IntGauge, IntGaugeVec, Opts, Registry,
    TextEncoder,
};

/// Content type of the text exposition format.
pub const CONTENT_TYPE: &str = "text/plain; version=0.0.4; charset=utf-8";

/// Seconds buckets for waits, loads and time to first token: 5 ms … ~5 min.
const SLOW_BUCKETS: &[f64] = &[
    0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0, 120.0, 300.0,
];
/// Seconds buckets for the gap between output tokens: 1 ms … 2.5 s.
const TOKEN_BUCKETS: &[f64] = &[
    0.001, 0.0025, 0.005, 0.01, 0.02, 0.04, 0.06, 0.08, 0.1, 0.15, 0.2, 0.3, 0.5, 1.0, 2.5,
];

/// Handle to the registry and its series. Cheap to clone; clones share the same series.
#[derive(Clone)]
pub struct Metrics {
    inner: Arc<Inner>,
}

struct Inner {
    registry: Registry,
    requests: IntCounterVec,
    queue_depth: IntGaugeVec,
    queue_wait: HistogramVec,
    in_flight: IntGaugeVec,
    ttft: HistogramVec,
    token_latency: HistogramVec,
    prompt_tokens: IntCounterVec,
    output_tokens: IntCounterVec,
    draft_tokens: IntCounterVec,
    draft_accepted: IntCounterVec,
    load_seconds: HistogramVec,
    load_failures: IntCounterVec,
    runner_restarts: IntCounterVec,
    loaded_models: IntGauge,
    memory: IntGaugeVec,
    memory_device: IntGaugeVec,
    /// Models each per-model gauge was last published for, to drop the ones now gone.
    published: Mutex<BTreeSet<String>>,
}

impl std::fmt::Debug for Metrics {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Metrics")
    }
}

impl Default for Metrics {
    fn default() -> Self {
        Metrics::new()
    }
}

fn counter(r: &Registry, name: &str, help: &str, labels: &[&str]) -> IntCounterVec {
    let c = IntCounterVec::new(Opts::new(name, help), labels).expect("valid counter");
    r.register(Box::new(c.clone())).expect("unique name");
    c
}

fn gauge(r: &Registry, name: &str, help: &str, labels: &[&str]) -> IntGaugeVec {
    let g = IntGaugeVec::new(Opts::new(name, help), labels).expect("valid gauge");
    r.register(Box::new(g.clone())).expect("unique name");
    g
}

fn histogram(r: &Registry, name: &str, help: &str, buckets: &[f64]) -> HistogramVec {
    let opts = HistogramOpts::new(name, help).buckets(buckets.to_vec());
    let h = HistogramVec::new(opts, &["model"]).expect("valid histogram");
    r.register(Box::new(h.clone())).expect("unique name");
    h
}

/// One model's share of the scheduler's state, as [`Metrics::publish`] takes it.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ModelState {
    /// Requests waiting for a slot on it.
    pub queued: i64,
    /// Leases held on its runners.
    pub in_flight: i64,
    /// Ready runners of it.
    pub loaded: i64,
    /// Bytes its ready runners use (runner reports, else estimates), and of those on devices.
    pub memory: i64,
    pub memory_device: i64,
}

impl Metrics {
    pub fn new() -> Metrics {
        let r = Registry::new();
        let inner = Inner {
            requests: counter(
                &r,
                "herd_http_requests_total",
                "HTTP requests answered, by route template, method and status code.",
                &["route", "method", "status"],
            ),
            queue_depth: gauge(
                &r,
                "herd_queue_depth",
                "Requests admitted and waiting for a runner slot, by model.",
                &["model"],
            ),
            queue_wait: histogram(
                &r,
                "herd_queue_wait_seconds",
                "Time from admission to a runner slot (includes loading the model), by model.",
                SLOW_BUCKETS,
            ),
            in_flight: gauge(
                &r,
                "herd_requests_in_flight",
                "Requests holding a runner slot now, by model.",
                &["model"],
            ),
            ttft: histogram(
                &r,
                "herd_time_to_first_token_seconds",
                "Time from the request's arrival to its first generated token, by model.",
                SLOW_BUCKETS,
            ),
            token_latency: histogram(
                &r,
                "herd_time_per_output_token_seconds",
                "Time between consecutive generated tokens of a completion, by model.",
                TOKEN_BUCKETS,
            ),
            prompt_tokens: counter(
                &r,
                "herd_prompt_tokens_total",
                "Prompt tokens evaluated (the responses' prompt_eval_count), by model.",
                &["model"],
            ),
            output_tokens: counter(
                &r,
                "herd_output_tokens_total",
                "Tokens generated (the responses' eval_count), by model.",
                &["model"],
            ),
            draft_tokens: counter(
                &r,
                "herd_draft_tokens_total",
                "Speculative decoding: draft tokens the model verified (draft model, n-gram \
                 or grammar fast-forward), by model.",
                &["model"],
            ),
            draft_accepted: counter(
                &r,
                "herd_draft_accepted_tokens_total",
                "Speculative decoding: draft tokens the model's sampling confirmed, by model.",
                &["model"],
            ),
            load_seconds: histogram(
                &r,
                "herd_model_load_seconds",
                "Time to start a runner and load a model until it is ready, by model.",
                SLOW_BUCKETS,
            ),
            load_failures: counter(
                &r,
                "herd_model_load_failures_total",
                "Model loads that failed, by model.",
                &["model"],
            ),
            runner_restarts: counter(
                &r,
                "herd_runner_restarts_total",
                "Runners that died without being asked to stop (the next request loads a fresh \
                 one), by model and cause: exit, signal, oom or unresponsive.",
                &["model", "cause"],
            ),
            loaded_models: {
                let g = IntGauge::new("herd_loaded_models", "Runners loaded and ready.")
                    .expect("valid gauge");
                r.register(Box::new(g.clone())).expect("unique name");
                g
            },
            memory: gauge(
                &r,
                "herd_model_memory_bytes",
                "Memory used by a loaded model's runners, by model.",
                &["model"],
            ),
            memory_device: gauge(
                &r,
                "herd_model_memory_device_bytes",
                "Of herd_model_memory_bytes, the part on accelerators, by model.",
                &["model"],
            ),
            published: Mutex::default(),
            registry: r,
        };
        Metrics {
            inner: Arc::new(inner),
        }
    }

    /// The text exposition of every series.
    pub fn render(&self) -> String {
        let mut buf = Vec::new();
        let families = self.inner.registry.gather();
        // Encoding in-memory families into a Vec cannot fail.
        let _ = TextEncoder::new().encode(&families, &mut buf);
        String::from_utf8(buf).unwrap_or_default()
    }

    /// One HTTP response. `route` is the matched route template, or `unmatched`.
    pub fn request(&self, route: &str, method: &str, status: u16) {
        self.inner
            .requests
            .with_label_values(&[route, method, &status.to_string()])
            .inc();
    }

    /// A request got its runner slot after `waited`.
    pub fn queue_wait(&self, model: &str, waited: Duration) {
        self.inner
            .queue_wait
            .with_label_values(&[model])
            .observe(waited.as_secs_f64());
    }

    /// A model load finished: `Some(took)` when the runner became ready.
    pub fn load(&self, model: &str, took: Option<Duration>) {
        match took {
            Some(d) => self
                .inner
                .load_seconds
                .with_label_values(&[model])
                .observe(d.as_secs_f64()),
            None => self.inner.load_failures.with_label_values(&[model]).inc(),
        }
    }

    /// A runner died on its own (`cause` from `runner::ExitCause::label`).
    pub fn runner_restart(&self, model: &str, cause: &str) {
        self.inner
            .runner_restarts
            .with_label_values(&[model, cause])
            .inc();
    }

    /// Replaces the scheduler gauges with `state` (every model queued or loaded now).
    pub fn publish(&self, state: &BTreeMap<String, ModelState>) {
        let i = &self.inner;
        let mut published = i.published.lock().unwrap_or_else(|e| e.into_inner());
        for gone in published.iter().filter(|m| !state.contains_key(*m)) {
            for g in [&i.queue_depth, &i.in_flight, &i.memory, &i.memory_device] {
                let _ = g.remove_label_values(&[gone]);
            }
        }
        for (model, s) in state {
            i.queue_depth.with_label_values(&[model]).set(s.queued);
            i.in_flight.with_label_values(&[model]).set(s.in_flight);
            i.memory.with_label_values(&[model]).set(s.memory);
            i.memory_device
                .with_label_values(&[model])
                .set(s.memory_device);
        }
        i.loaded_models.set(state.values().map(|s| s.loaded).sum());
        *published = state.keys().cloned().collect();
    }

    /// The per-completion recorder for `model`; `started` is when the HTTP request arrived.
    pub fn completion(&self, model: &str, started: std::time::Instant) -> CompletionMeter {
        let i = &self.inner;
        CompletionMeter {
            model: model.to_owned(),
            started,
            last_token: None,
            ttft_pending: true,
            ttft: i.ttft.with_label_values(&[model]),
            token_latency: i.token_latency.with_label_values(&[model]),
            prompt_tokens: i.prompt_tokens.with_label_values(&[model]),
            output_tokens: i.output_tokens.with_label_values(&[model]),
            draft_tokens: i.draft_tokens.with_label_values(&[model]),
            draft_accepted: i.draft_accepted.with_label_values(&[model]),
        }
    }
}

/// Records one completion's first-token time, token gaps and token counts. Owned by the
/// completion stream that sees every runner chunk (`engine::steps`).
pub struct CompletionMeter {
    model: String,
    started: std::time::Instant,
    last_token: Option<std::time::Instant>,
    /// The request's first token is still to come (false for a second pass of one request).
    ttft_pending: bool,
    ttft: prometheus::Histogram,
    token_latency: prometheus::Histogram,
    prompt_tokens: prometheus::IntCounter,
    output_tokens: prometheus::IntCounter,
    draft_tokens: prometheus::IntCounter,
    draft_accepted: prometheus::IntCounter,
}

impl CompletionMeter {
    /// The model this completion's series are labelled with.
    pub fn model(&self) -> &str {
        &self.model
    }

    /// A generated token arrived now: the first sets time to first token, later ones the gap.
    pub fn token(&mut self) {
        let now = std::time::Instant::now();
        match self.last_token {
            None if self.ttft_pending => self
                .ttft
                .observe(now.duration_since(self.started).as_secs_f64()),
            // A later pass's first token follows a prefill, not a decode step.
            None => {}
            Some(prev) => self
                .token_latency
                .observe(now.duration_since(prev).as_secs_f64()),
        }
        self.ttft_pending = false;
        self.last_token = Some(now);
    }

    /// For a further generation of a request whose first token was already recorded (the
    /// two-pass rollback's second pass): its first token is no time to first token.
    pub fn continued(mut self) -> Self {
        self.ttft_pending = false;
        self
    }

    /// The completion finished with the runner's counts.
    pub fn done(&mut self, prompt_tokens: u64, output_tokens: u64) {
        self.prompt_tokens.inc_by(prompt_tokens);
        self.output_tokens.inc_by(output_tokens);
    }

    /// The completion's speculative decoding counts (the runner's `drafted`/`accepted`).
    pub fn drafted(&mut self, drafted: u64, accepted: u64) {
        self.draft_tokens.inc_by(drafted);
        self.draft_accepted.inc_by(accepted);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn series(text: &str, prefix: &str) -> Vec<String> {
        text.lines()
            .filter(|l| l.starts_with(prefix))
            .map(str::to_owned)
            .collect()
    }

    #[test]
    fn publish_replaces_the_gauges() {
        let m = Metrics::new();
        let mut s = BTreeMap::new();
        s.insert(
            "a:latest".to_string(),
            ModelState {
                queued: 2,
                in_flight: 1,
                loaded: 1,
                memory: 100,
                memory_device: 0,
            },
        );
        s.insert(
            "b:latest".to_string(),
            ModelState {
                loaded: 1,
                memory: 50,
                ..Default::default()
            },
        );
        m.publish(&s);
        let text = m.render();
        assert_eq!(
            series(&text, "herd_queue_depth{"),
            vec![
                r#"herd_queue_depth{model="a:latest"} 2"#,
                r#"herd_queue_depth{model="b:latest"} 0"#
            ]
        );
        assert_eq!(
            series(&text, "herd_loaded_models "),
            vec!["herd_loaded_models 2"]
        );
        s.remove("a:latest");
        m.publish(&s);
        let text = m.render();
        assert_eq!(
            series(&text, "herd_model_memory_bytes{"),
            vec![r#"herd_model_memory_bytes{model="b:latest"} 50"#]
        );
        assert_eq!(
            series(&text, "herd_loaded_models "),
            vec!["herd_loaded_models 1"]
        );
    }

    #[test]
    fn completion_meter_counts() {
        let m = Metrics::new();
        let mut c = m.completion("a", std::time::Instant::now());
        c.token();
        c.token();
        c.token();
        c.done(7, 3);
        c.drafted(5, 4);
        let text = m.render();
        assert!(text.contains(r#"herd_draft_tokens_total{model="a"} 5"#));
        assert!(text.contains(r#"herd_draft_accepted_tokens_total{model="a"} 4"#));
        assert!(text.contains(r#"herd_time_to_first_token_seconds_count{model="a"} 1"#));
        assert!(text.contains(r#"herd_time_per_output_token_seconds_count{model="a"} 2"#));
        assert!(text.contains(r#"herd_prompt_tokens_total{model="a"} 7"#));
        assert!(text.contains(r#"herd_output_tokens_total{model="a"} 3"#));
        m.request("/api/chat", "POST", 404);
        assert!(m.render().contains(
            r#"herd_http_requests_total{method="POST",route="/api/chat",status="404"} 1"#
        ));
    }
}
