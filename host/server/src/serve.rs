//! `tally serve`: MCP over stdio (default) or streamable HTTP (`--http ADDR`).

use std::net::SocketAddr;
use std::process::ExitCode;
use std::sync::Arc;
use std::time::Duration;

use axum::Json;
use axum::routing::get;
use rmcp::ServiceExt;
use rmcp::transport::streamable_http_server::session::local::LocalSessionManager;
use rmcp::transport::streamable_http_server::{StreamableHttpServerConfig, StreamableHttpService};
use serde_json::json;
use tally_engine::Engine;

use crate::mcp::{Shared, TallyServer};

/// Exit code when the server cannot start as configured.
const EXIT_CONFIG: u8 = 2;

/// Serves MCP over stdin/stdout until the client closes it. stdout carries protocol messages
/// only; logs go to stderr.
pub async fn stdio(engine: Arc<Engine>) -> ExitCode {
    let server = TallyServer::new(Shared::new(engine));
    let running = match server.serve(rmcp::transport::stdio()).await {
        Ok(r) => r,
        Err(e) => {
            tracing::error!("the MCP session could not start: {e}");
            return ExitCode::FAILURE;
        }
    };
    match running.waiting().await {
        Ok(reason) => {
            tracing::info!(?reason, "stdio session ended");
            ExitCode::SUCCESS
        }
        Err(e) => {
            tracing::error!("the MCP session failed: {e}");
            ExitCode::FAILURE
        }
    }
}

/// Origins a browser page may call from: the server's own address, by default.
fn default_origins(addr: SocketAddr) -> Vec<String> {
    let port = addr.port();
    vec![
        format!("http://127.0.0.1:{port}"),
        format!("http://localhost:{port}"),
        format!("http://[::1]:{port}"),
    ]
}

/// Serves MCP over streamable HTTP at `/mcp`, with `GET /health`.
pub async fn http(engine: Arc<Engine>, addr: SocketAddr, extra_origins: Vec<String>) -> ExitCode {
    if !addr.ip().is_loopback() {
        eprintln!(
            "tally serve: refusing to listen on {addr}: only loopback addresses (127.0.0.1, ::1) are served until token \
             authentication is configured; anyone who can reach a non-loopback address could query every dataset. \
             Use --http 127.0.0.1:{} (and a reverse proxy with authentication if you must expose it).",
            addr.port()
        );
        return ExitCode::from(EXIT_CONFIG);
    }
    let listener = match tokio::net::TcpListener::bind(addr).await {
        Ok(l) => l,
        Err(e) => {
            eprintln!("tally serve: cannot listen on {addr}: {e}");
            return ExitCode::from(EXIT_CONFIG);
        }
    };
    let bound = listener.local_addr().unwrap_or(addr);
    let mut origins = default_origins(bound);
    origins.extend(extra_origins);
    // rmcp switches Origin validation off when the allow-list is empty; ours never is, and
    // validation is enforced explicitly. Host validation (DNS rebinding) stays at its
    // loopback-only default.
    let config = StreamableHttpServerConfig::default()
        .with_allowed_origins(origins.clone())
        .enforce_origin_validation()
        .with_sse_keep_alive(Some(Duration::from_secs(15)));
    let cancel = config.cancellation_token.clone();
    let shared = Shared::new(Arc::clone(&engine));
    let service: StreamableHttpService<TallyServer, LocalSessionManager> =
        StreamableHttpService::new(
            move || Ok(TallyServer::new(Arc::clone(&shared))),
            Arc::new(LocalSessionManager::default()),
            config,
        );
    let health_engine = Arc::clone(&engine);
    let app = axum::Router::new()
        .route(
            "/health",
            get(move || {
                let engine = Arc::clone(&health_engine);
                async move {
                    let catalog = engine.catalog();
                    Json(json!({
                        "status": "ok",
                        "version": env!("CARGO_PKG_VERSION"),
                        "datasets": catalog.datasets.len(),
                        "broken_datasets": catalog.broken.len(),
                    }))
                }
            }),
        )
        .route_service("/mcp", service);
    // The address the server actually listens on, for scripts that asked for port 0.
    eprintln!("tally: serving MCP at http://{bound}/mcp (health: http://{bound}/health)");
    tracing::info!(%bound, ?origins, "serving streamable HTTP");
    let served = axum::serve(listener, app)
        .with_graceful_shutdown(async move {
            shutdown_signal().await;
            cancel.cancel();
        })
        .await;
    match served {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            tracing::error!("the HTTP server failed: {e}");
            ExitCode::FAILURE
        }
    }
}

async fn shutdown_signal() {
    let ctrl_c = async {
        let _ = tokio::signal::ctrl_c().await;
    };
    #[cfg(unix)]
    let terminate = async {
        match tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()) {
            Ok(mut s) => {
                s.recv().await;
            }
            Err(_) => std::future::pending::<()>().await,
        }
    };
    #[cfg(not(unix))]
    let terminate = std::future::pending::<()>();
    tokio::select! {
        _ = ctrl_c => {},
        _ = terminate => {},
    }
    tracing::info!("shutting down");
}
