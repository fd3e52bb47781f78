//! The HTTP surface: Ollama's native `/api` routes, the middleware in front of them (Host guard,
//! CORS, body limit, tracing) and the server loop. Handlers validate and translate shapes; the
//! store and GGUF reader answer model questions, and generate/chat/embed go through the
//! `Inference` seam (`inference.rs`) to whatever runs models.
//!
//! Framework: axum 0.8. It gives tower middleware (tracing, limits, our guards as plain
//! functions), typed extractors that turn malformed requests into our one error type, and
//! `Router` is a `tower::Service`, so tests drive the exact production app with `oneshot` while
//! `serve` feeds it to hyper-util with a real header-read timeout. Same hyper underneath as the
//! runner protocol.

pub mod anthropic;
pub mod auth;
pub mod blobs;
pub mod caps_rules;
pub mod convert;
pub mod create;
pub mod embed;
pub mod error;
pub mod generate;
pub mod gojson;
pub mod gomarshal;
pub mod guard;
pub mod health;
pub mod inference;
pub mod metrics;
pub mod models;
pub mod openai;
pub mod options;
pub mod pull;
pub mod request;
pub mod request_log;
pub mod serve;
pub mod show;
pub mod stream;
pub mod types;

use std::sync::Arc;

use axum::extract::DefaultBodyLimit;
use axum::http::Method;
use axum::http::StatusCode;
use axum::response::IntoResponse;
use axum::routing::{get, head, post, MethodRouter};
use axum::{middleware, Json, Router};
use tower_http::trace::TraceLayer;

use crate::store::Store;

pub use error::OJson;
pub use guard::{CorsPolicy, HostGuard};
pub use inference::{Inference, InferenceDefaults};
pub use serve::{serve, ServeOptions};

/// Largest JSON request body accepted (413 beyond). Chat requests carry base64 images, so this
/// is generous; blob uploads are streamed and not subject to it.
pub const DEFAULT_MAX_JSON_BODY: usize = 256 << 20;

/// `HERD_MAX_BLOB_SIZE`'s default (config.rs spells the same value): above any single GGUF
/// file in practice, below "fill the disk".
pub const DEFAULT_MAX_BLOB_SIZE: u64 = 512 << 30;

/// Everything handlers share. Cheap to clone (the store is a handle; the rest is behind `Arc`).
#[derive(Clone)]
pub struct AppState {
    pub store: Store,
    /// DNS-rebinding protection; `HostGuard::off()` when not bound to loopback.
    pub host_guard: Arc<HostGuard>,
    pub cors: Arc<CorsPolicy>,
    pub max_json_body: usize,
    /// The scheduler-backed engine (also the `inference` below); `/api/ps` reads its scheduler.
    pub engine: Option<crate::engine::Engine>,
    /// Runs models for generate/chat/embed; `None` until the scheduler is wired in (those
    /// endpoints then validate requests and answer 500 for work that needs a model loaded).
    pub inference: Option<Arc<dyn Inference>>,
    /// `OLLAMA_CONTEXT_LENGTH` and `OLLAMA_KEEP_ALIVE`, for requests that leave them unset.
    pub defaults: InferenceDefaults,
    /// Models already read from the store, by manifest digest.
    pub resolved: Arc<inference::ResolvedCache>,
    /// Registry client for pull/push (shares in-flight downloads); `None`: one with default
    /// options (no signing key) is made per request.
    pub registry: Option<crate::store::registry::Registry>,
    /// Largest blob `POST /api/blobs/:digest` accepts (`HERD_MAX_BLOB_SIZE`; 0 = no limit).
    pub max_blob_size: u64,
    /// How `/api/create` runs `quantize` (the runner binary the server is configured with).
    pub quantizer: Arc<crate::create::QuantizeOptions>,
    /// `HERD_API_KEYS` / `HERD_API_KEYS_FILE`; empty = no key required.
    pub api_keys: Arc<auth::ApiKeys>,
    /// Draining flag and in-flight count (SIGTERM), readiness inputs.
    pub lifecycle: Arc<health::Lifecycle>,
    /// The server's Prometheus registry (`/metrics`); the engine's scheduler reports to the
    /// same one (`with_engine`).
    pub metrics: crate::metrics::Metrics,
    /// `HERD_ALLOW_PULL_HOSTS`: registries pull, push and create may contact.
    pub pull_hosts: Arc<crate::config::PullHosts>,
    /// Cloud and remote models: settings, HTTP client, signing key (`crate::remote`).
    pub remote: Arc<crate::remote::Remote>,
    /// `OLLAMA_DEBUG_LOG_REQUESTS`: where inference request bodies are written; `None` = off.
    pub request_log: Option<Arc<request_log::RequestLog>>,
}

impl AppState {
    /// A state with the default origin list, no Host guard and the default body limit; `main`
    /// adds the guard for the address it actually bound.
    pub fn new(store: Store) -> AppState {
        AppState {
            store,
            host_guard: Arc::new(HostGuard::off()),
            cors: Arc::new(CorsPolicy::new(
                &crate::config::Origins::default().allowed(),
            )),
            max_json_body: DEFAULT_MAX_JSON_BODY,
            engine: None,
            inference: None,
            resolved: Arc::default(),
            defaults: InferenceDefaults::default(),
            registry: None,
            max_blob_size: DEFAULT_MAX_BLOB_SIZE,
            quantizer: Arc::default(),
            api_keys: Arc::default(),
            lifecycle: Arc::default(),
            metrics: crate::metrics::Metrics::default(),
            pull_hosts: Arc::default(),
            remote: Arc::default(),
            request_log: None,
        }
    }

    pub fn with_remote(mut self, remote: crate::remote::Remote) -> AppState {
        self.remote = Arc::new(remote);
        self
    }

    pub fn with_request_log(mut self, log: request_log::RequestLog) -> AppState {
        self.request_log = Some(Arc::new(log));
        self
    }

    pub fn with_pull_hosts(mut self, hosts: crate::config::PullHosts) -> AppState {
        self.pull_hosts = Arc::new(hosts);
        self
    }

    /// Refuses (403, before any connection) a registry host `HERD_ALLOW_PULL_HOSTS` leaves out.
    pub fn check_pull_host(&self, name: &crate::store::ModelName) -> crate::error::Result<()> {
        if self.pull_hosts.permits(name.host()) {
            return Ok(());
        }
        Err(crate::error::Error::Forbidden(format!(
            "registry host '{}' is not allowed on this server (HERD_ALLOW_PULL_HOSTS)",
            name.host()
        )))
    }

    pub fn with_api_keys(mut self, keys: auth::ApiKeys) -> AppState {
        self.api_keys = Arc::new(keys);
        self
    }

    pub fn with_lifecycle(mut self, lifecycle: Arc<health::Lifecycle>) -> AppState {
        self.lifecycle = lifecycle;
        self
    }

    pub fn with_registry(mut self, registry: crate::store::registry::Registry) -> AppState {
        self.registry = Some(registry);
        self
    }

    pub fn with_inference(mut self, engine: Arc<dyn Inference>) -> AppState {
        self.inference = Some(engine);
        self
    }

    pub fn with_defaults(mut self, defaults: InferenceDefaults) -> AppState {
        self.defaults = defaults;
        self
    }

    /// Serves inference (and `/api/ps`) with the scheduler-backed engine.
    pub fn with_engine(mut self, engine: crate::engine::Engine) -> AppState {
        self.inference = Some(Arc::new(engine.clone()));
        self.metrics = engine.scheduler().metrics().clone();
        self.engine = Some(engine);
        self
    }

    pub fn with_host_guard(mut self, guard: HostGuard) -> AppState {
        self.host_guard = Arc::new(guard);
        self
    }

    pub fn with_cors(mut self, cors: CorsPolicy) -> AppState {
        self.cors = Arc::new(cors);
        self
    }

    pub fn with_max_json_body(mut self, bytes: usize) -> AppState {
        self.max_json_body = bytes;
        self
    }

    pub fn with_max_blob_size(mut self, bytes: u64) -> AppState {
        self.max_blob_size = bytes;
        self
    }

    pub fn with_quantizer(mut self, q: crate::create::QuantizeOptions) -> AppState {
        self.quantizer = Arc::new(q);
        self
    }
}

/// One entry of the route table: a path, the methods it answers (what tests walk) and the
/// handlers. The router is built from [`routes`] only, so every route gets the same middleware
/// (API keys, draining, metrics) and a test walking this table covers routes added later.
pub struct Route {
    pub path: &'static str,
    pub methods: &'static [Method],
    pub handler: MethodRouter<AppState>,
}

pub(crate) fn route(
    path: &'static str,
    methods: &'static [Method],
    handler: MethodRouter<AppState>,
) -> Route {
    Route {
        path,
        methods,
        handler,
    }
}

/// Every route the server answers.
pub fn routes() -> Vec<Route> {
    const GET: &[Method] = &[Method::GET];
    const GET_HEAD: &[Method] = &[Method::GET, Method::HEAD];
    const POST: &[Method] = &[Method::POST];
    let mut table = vec![
        route("/", GET_HEAD, get(root).head(root)),
        route("/healthz", GET_HEAD, get(health::healthz)),
        route("/readyz", GET_HEAD, get(health::readyz)),
        route("/metrics", GET, get(metrics::metrics)),
        route("/api/version", GET_HEAD, get(version).head(version)),
        route("/api/tags", GET_HEAD, get(models::tags).head(models::tags)),
        route("/api/ps", GET, get(models::ps)),
        route("/api/status", GET, get(status)),
        route("/api/generate", POST, post(generate::generate)),
        route("/api/chat", POST, post(generate::chat)),
        route("/api/embed", POST, post(embed::embed)),
        route("/api/embeddings", POST, post(embed::embeddings)),
        route("/api/show", POST, post(models::show)),
        route("/api/copy", POST, post(models::copy)),
        route("/api/create", POST, post(create::create)),
        route(
            "/api/delete",
            &[Method::DELETE],
            axum::routing::delete(models::delete),
        ),
        route("/api/pull", POST, post(pull::pull)),
        route("/api/push", POST, post(pull::push)),
        route(
            "/api/blobs/{digest}",
            &[Method::HEAD, Method::POST],
            head(blobs::head_blob).post(blobs::create_blob),
        ),
        route("/v1/messages", POST, post(anthropic::messages)),
    ];
    table.extend(openai::routes());
    table
}

/// The whole application, ready for `serve` or `oneshot`.
pub fn app(state: AppState) -> Router {
    let mut router = Router::new();
    for r in routes() {
        router = router.route(r.path, r.handler);
    }
    let routes = router
        .fallback(not_found)
        .method_not_allowed_fallback(method_not_allowed)
        // Innermost, after API keys and draining: explicit cloud references leave here.
        .layer(middleware::from_fn_with_state(
            state.clone(),
            crate::remote::cloud::passthrough,
        ))
        // Admitted inference requests only (after keys and draining), as Ollama logs them.
        .layer(middleware::from_fn_with_state(
            state.clone(),
            request_log::record,
        ))
        .layer(DefaultBodyLimit::max(state.max_json_body))
        .layer(middleware::from_fn_with_state(state.clone(), health::admit))
        .layer(middleware::from_fn_with_state(
            state.clone(),
            auth::require_key,
        ))
        .layer(middleware::from_fn_with_state(state.clone(), guard::cors))
        .layer(middleware::from_fn_with_state(
            state.clone(),
            guard::host_guard,
        ))
        .layer(middleware::from_fn(error::log_server_errors))
        .layer(middleware::from_fn_with_state(
            state.clone(),
            metrics::count,
        ))
        // 5xx are logged once, with their message, by `log_server_errors`.
        .layer(TraceLayer::new_for_http().on_failure(()));
    routes.with_state(state)
}

async fn root() -> &'static str {
    "Ollama is running"
}

/// Ollama's `{"version": …}` plus herd's provenance (git commit, engine pins, config digest) as
/// extra fields, which Ollama's clients ignore.
async fn version() -> Json<crate::provenance::Provenance> {
    Json(crate::provenance::current())
}

/// Ollama's `/api/status`: whether cloud is disabled, and by what.
async fn status(
    axum::extract::State(state): axum::extract::State<AppState>,
) -> Json<serde_json::Value> {
    let r = &state.remote;
    Json(serde_json::json!({"cloud": {
        "disabled": r.cloud_disabled(),
        "source": crate::remote::disabled_source(r.no_cloud_env, r.no_cloud_config),
    }}))
}

/// gin's texts, which clients and scripts match on.
async fn not_found() -> impl IntoResponse {
    (StatusCode::NOT_FOUND, "404 page not found")
}

async fn method_not_allowed() -> impl IntoResponse {
    (StatusCode::METHOD_NOT_ALLOWED, "405 method not allowed")
}
