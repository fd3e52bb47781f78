//! `herd serve`: log the effective configuration, open the store (pruning unreferenced blobs
//! older than an hour unless `OLLAMA_NOPRUNE`), bind `OLLAMA_HOST`, build the app state for the
//! address actually bound (HTTPS when `HERD_TLS_CERT`/`HERD_TLS_KEY` are set), and serve until
//! SIGINT/SIGTERM. On the signal the server drains:
//! readiness and new requests answer 503 while admitted requests (streams) finish, for at most
//! `HERD_SHUTDOWN_GRACE`; then the listener closes and every runner is stopped and reaped.

use std::time::Duration;

use anyhow::Context;
use tokio::net::TcpListener;

use crate::api::{
    self, serve::shutdown_signal, AppState, CorsPolicy, HostGuard, InferenceDefaults, ServeOptions,
};
use crate::config::Config;
use crate::store::Store;

/// Binds the listener. Go's `net.Listen("tcp", …)` on a wildcard IPv4 address (`0.0.0.0`, or
/// the empty host of `:port`) listens on every address of the machine, IPv6 included (one
/// dual-stack socket), so clients that reach `localhost` as `::1` connect: here the same, `[::]`
/// with IPV6_V6ONLY off, and `0.0.0.0` alone where the machine has no IPv6.
async fn listen(bind: &str) -> std::io::Result<TcpListener> {
    let addr = tokio::net::lookup_host(bind).await?.next().ok_or_else(|| {
        std::io::Error::new(std::io::ErrorKind::InvalidInput, "no address to bind")
    })?;
    if let std::net::SocketAddr::V4(v4) = addr {
        if v4.ip().is_unspecified() {
            if let Ok(l) = dual_stack(v4.port()) {
                return Ok(l);
            }
        }
    }
    TcpListener::bind(addr).await
}

fn dual_stack(port: u16) -> std::io::Result<TcpListener> {
    use socket2::{Domain, Protocol, Socket, Type};
    let s = Socket::new(Domain::IPV6, Type::STREAM, Some(Protocol::TCP))?;
    s.set_only_v6(false)?;
    s.set_reuse_address(true)?;
    s.set_nonblocking(true)?;
    let addr = std::net::SocketAddr::from((std::net::Ipv6Addr::UNSPECIFIED, port));
    s.bind(&addr.into())?;
    s.listen(1024)?;
    TcpListener::from_std(s.into())
}

/// Ollama's `PruneLayers` grace period: blobs younger than this may belong to a pull or create
/// that has not written its manifest yet.
pub const PRUNE_OLDER_THAN: Duration = Duration::from_secs(3600);

pub async fn run(config: Config) -> anyhow::Result<()> {
    let effective = config.effective();
    crate::provenance::set_config(&effective);
    let pairs: Vec<String> = effective
        .into_iter()
        .map(|(k, v)| format!("{k}:{v}"))
        .collect();
    tracing::info!(target: "herd", "server config: {}", pairs.join(" "));
    for line in crate::config::take_fallbacks() {
        tracing::warn!(target: "herd", "invalid environment variable, using default: {line}");
    }
    let nofile = match crate::api::serve::raise_nofile_limit() {
        Ok(n) => {
            tracing::debug!(limit = n, "open file limit");
            n
        }
        Err(e) => {
            tracing::warn!(error = %e, "could not raise the open file limit");
            1024
        }
    };
    let max_connections = match config.listen.max_connections {
        0 => api::serve::default_max_connections(nofile),
        n => n as usize,
    };
    let tls = match config.listen.tls().map_err(anyhow::Error::msg)? {
        None => None,
        Some((cert, key)) => {
            Some(api::serve::tls::acceptor(cert, key).map_err(anyhow::Error::msg)?)
        }
    };
    let api_keys = api::auth::ApiKeys::new(config.api_keys().map_err(anyhow::Error::msg)?);
    if !api_keys.is_empty() {
        tracing::info!(target: "herd", keys = api_keys.len(), "API keys required");
    }

    let root = config.models.clone();
    let noprune = config.noprune;
    let store = tokio::task::spawn_blocking(move || -> anyhow::Result<Store> {
        let store = Store::open(&root)
            .with_context(|| format!("opening the model store at {}", root.display()))?;
        if noprune {
            tracing::info!("OLLAMA_NOPRUNE set: not pruning blobs");
        } else {
            match store.prune(PRUNE_OLDER_THAN) {
                Ok(report) => tracing::info!(?report, "pruned the model store"),
                Err(e) => tracing::warn!(error = %e, "pruning the model store failed"),
            }
        }
        Ok(store)
    })
    .await
    .context("store task")??;

    // Like `ollama serve`: make sure the registry key pair exists (a failure only disables
    // authenticated registries).
    let key_dir = crate::config::key_dir();
    let kd = key_dir.clone();
    match tokio::task::spawn_blocking(move || crate::store::registry::auth::ensure_keypair(&kd))
        .await
    {
        Ok(Ok(_)) => {}
        Ok(Err(e)) => tracing::warn!(error = %e, "registry key pair unavailable"),
        Err(e) => tracing::warn!(error = %e, "registry key task failed"),
    }
    let registry = crate::store::registry::Registry::new(
        store.clone(),
        crate::store::registry::RegistryOptions {
            key_dir: Some(key_dir.clone()),
            ..Default::default()
        },
    )?;

    let bind = config.host.bind_addr();
    let listener = listen(&bind)
        .await
        .with_context(|| format!("listening on {bind}"))?;
    let local = listener.local_addr()?;
    let guard = HostGuard::detect(local);
    let (engine, _runner_dir) = crate::engine::start(&config)
        .context("starting the engine (runner socket directory, RPC tunnel ends)")?;
    if let Some(workers) = &engine.settings().rpc {
        // Loads see only workers that are up: find them before the first request.
        workers.probe_all().await;
    }
    let lifecycle = std::sync::Arc::new(api::health::Lifecycle::new(Some(config.runner_path())));
    let state = AppState::new(store)
        .with_api_keys(api_keys)
        .with_lifecycle(lifecycle.clone())
        .with_registry(registry)
        .with_pull_hosts(config.allow_pull_hosts.clone())
        .with_remote(crate::remote::Remote::new(
            &config.remote,
            Some(key_dir.clone()),
            crate::remote::Remote::server_json_disables_cloud(&key_dir),
        ))
        .with_host_guard(guard)
        .with_cors(CorsPolicy::new(&config.origins.allowed()))
        .with_defaults(InferenceDefaults {
            context_length: config.context_length,
            keep_alive: config.keep_alive,
            go_template: config.go_template,
        })
        .with_engine(engine.clone())
        .with_max_blob_size(config.max_blob_size)
        .with_quantizer(crate::create::QuantizeOptions {
            runner: config.runner_path(),
            mlx_runner: config.mlx_runner_path(),
            threads: 0,
            env: crate::runner::runner_env(std::env::vars_os()),
        });
    let scheme = if tls.is_some() { "https" } else { "http" };
    let state = if config.listen.debug_log_requests {
        let log = api::request_log::RequestLog::create(scheme)
            .context("enable OLLAMA_DEBUG_LOG_REQUESTS")?;
        tracing::info!(target: "herd", "request debug logging enabled; inference request logs will be stored in {} and include request bodies and replay curl commands", log.dir().display());
        state.with_request_log(log)
    } else {
        state
    };
    tracing::info!(target: "herd", max_connections, "Listening on {local} ({scheme}, version {})", crate::VERSION);
    let grace = config.shutdown_grace;
    let drained = async move {
        shutdown_signal().await;
        lifecycle.start_draining();
        tracing::info!(target: "herd", in_flight = lifecycle.in_flight(), ?grace, "draining: refusing new requests");
        if !lifecycle.wait_idle(grace).await {
            tracing::warn!(target: "herd", in_flight = lifecycle.in_flight(), "grace period over; closing in-flight requests");
        }
    };
    // The grace is spent in `drained`; what is left for `serve` only closes idle connections.
    let opts = ServeOptions {
        shutdown_grace: Duration::from_secs(1),
        body: api::serve::BodyPolicy {
            timeout: config.listen.body_timeout,
            min_rate: config.listen.body_min_rate,
        },
        idle_timeout: config.listen.idle_timeout,
        max_connections,
        tls,
        ..ServeOptions::default()
    };
    api::serve(listener, api::app(state), opts, drained).await?;
    // No runner outlives the server: stop and reap them all before returning.
    engine.scheduler().shutdown().await;
    tracing::info!(target: "herd", "server stopped");
    Ok(())
}
