//! Serving the router over TCP, and what protects it from its clients: hyper's HTTP/1 connection settings (a
//! deadline for a request's head, a cap on its size), a connection limit, a deadline for the body, and shutdown
//! in three phases — refuse new work while the admitted work drains, stop accepting, answer what is in flight —
//! all within a deadline.
//!
//! axum's own `serve` takes none of these settings, so connections are served here with hyper's builder, as
//! axum does (one task per connection, graceful shutdown by hyper-util).

use std::future::Future;
use std::pin::pin;
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::Duration;

use axum::body::Body;
use axum::extract::{Request, State};
use axum::http::StatusCode;
use axum::middleware::Next;
use axum::response::Response;
use http_body_util::{BodyExt, LengthLimitError, Limited};
use hyper_util::rt::{TokioExecutor, TokioIo, TokioTimer};
use hyper_util::server::graceful::GracefulShutdown;
use hyper_util::service::TowerToHyperService;
use tokio::net::TcpListener;
use tokio::sync::Semaphore;
use tokio::time::{sleep_until, Instant};

use super::{Api, ApiError, Gateway};

/// hyper's smallest read buffer: a request head cap below it cannot be set.
pub(super) const MIN_HEADER_BYTES: usize = 8192;

impl Gateway {
    /// Serves on `listener` until `shutdown` resolves; then drains: new requests and `/health` are answered 503
    /// with `Retry-After` (so a load balancer sees the server go, rather than its port vanish) until the queued
    /// work is done; then it stops accepting, finishes the requests in flight and returns. Past
    /// `shutdown_deadline_ms` from the signal it gives up: an error of kind `TimedOut` naming how many requests
    /// were left unanswered.
    pub async fn serve(
        self,
        listener: TcpListener,
        shutdown: impl Future<Output = ()> + Send + 'static,
    ) -> std::io::Result<()> {
        let routes = self.router();
        self.serve_routes(listener, routes, shutdown).await
    }

    /// [`Gateway::serve`] with `routes`: [`Gateway::router`] and others beside it (a replica's gRPC service,
    /// which speaks HTTP/2 without TLS on the same port).
    pub async fn serve_routes(
        self,
        listener: TcpListener,
        routes: axum::Router,
        shutdown: impl Future<Output = ()> + Send + 'static,
    ) -> std::io::Result<()> {
        let config = self.config().clone();
        let mut http1 = hyper::server::conn::http1::Builder::new();
        http1
            .timer(TokioTimer::new())
            .header_read_timeout(Duration::from_millis(config.header_timeout_ms))
            .max_buf_size(config.max_header_bytes.max(MIN_HEADER_BYTES));
        let mut http2 = hyper::server::conn::http2::Builder::new(TokioExecutor::new());
        http2.timer(TokioTimer::new());
        let acceptor = Acceptor {
            listener,
            connections: Arc::new(Semaphore::new(config.max_connections)),
            http1,
            http2,
            head_timeout: Duration::from_millis(config.header_timeout_ms),
            graceful: GracefulShutdown::new(),
            router: routes,
        };
        let mut shutdown = pin!(shutdown);
        loop {
            tokio::select! {
                _ = &mut shutdown => break,
                _ = acceptor.accept_one() => {}
            }
        }
        self.begin_shutdown();
        let deadline = Instant::now() + Duration::from_millis(config.shutdown_deadline_ms);
        let gateway = self.clone();
        let mut drained = pin!(async move {
            while gateway.outstanding_tokens() > 0 {
                tokio::time::sleep(Duration::from_millis(10)).await;
            }
        });
        loop {
            tokio::select! {
                _ = &mut drained => break,
                _ = sleep_until(deadline) => break,
                _ = acceptor.accept_one() => {}
            }
        }
        let Acceptor {
            listener, graceful, ..
        } = acceptor;
        drop(listener);
        let finished = tokio::select! {
            _ = graceful.shutdown() => true,
            _ = sleep_until(deadline) => false,
        };
        for r in self.inner.replicas.snapshot().iter() {
            r.close();
        }
        let counts = self.requests();
        if finished {
            return Ok(());
        }
        Err(std::io::Error::new(
            std::io::ErrorKind::TimedOut,
            format!(
                "{} of {} requests still unanswered at the shutdown deadline ({} ms)",
                counts.received.saturating_sub(counts.answered),
                counts.received,
                config.shutdown_deadline_ms
            ),
        ))
    }
}

/// The accepting side of a server: its listener, the connection limit, hyper's settings and the connections to
/// shut down gracefully.
struct Acceptor {
    listener: TcpListener,
    connections: Arc<Semaphore>,
    http1: hyper::server::conn::http1::Builder,
    /// For HTTP/2 with prior knowledge (a replica's gRPC clients), told apart by the connection's first bytes.
    http2: hyper::server::conn::http2::Builder<TokioExecutor>,
    /// How long a connection may take to send the bytes that tell its protocol (then hyper's head timeout).
    head_timeout: Duration,
    graceful: GracefulShutdown,
    router: axum::Router,
}

impl Acceptor {
    /// Accepts one connection and serves it on a task of its own. Cancel-safe: it waits only for a permit and
    /// for `accept`.
    async fn accept_one(&self) {
        // Holding a permit before accepting leaves further clients in the kernel's backlog.
        let Ok(permit) = self.connections.clone().acquire_owned().await else {
            return;
        };
        match self.listener.accept().await {
            Ok((stream, _)) => {
                // Without TCP_NODELAY a response written in several pieces (a gRPC stream's frames) waits for
                // the peer's delayed ACK: about 40 ms a call on Linux.
                let _ = stream.set_nodelay(true);
                let service = TowerToHyperService::new(self.router.clone());
                let (http1, http2) = (self.http1.clone(), self.http2.clone());
                let (watcher, head_timeout) = (self.graceful.watcher(), self.head_timeout);
                tokio::spawn(async move {
                    // A connection's errors (a client gone, a head timed out) are its own; one that never tells
                    // its protocol within the head timeout is closed.
                    let io = TokioIo::new(stream);
                    match speaks_http2(io.inner(), head_timeout).await {
                        Some(true) => {
                            let _ = watcher.watch(http2.serve_connection(io, service)).await;
                        }
                        Some(false) => {
                            let _ = watcher.watch(http1.serve_connection(io, service)).await;
                        }
                        None => {}
                    }
                    drop(permit);
                });
            }
            // Out of file descriptors and the like: wait rather than spin (as axum's own loop does).
            Err(_) => tokio::time::sleep(Duration::from_millis(50)).await,
        }
    }
}

/// Whether the connection opens with HTTP/2's prior-knowledge preface (`PRI * HTTP/2.0`) rather than an HTTP/1
/// request line, from its first three bytes (no method starts with `PRI`), peeked within `timeout`; `None` when
/// they do not come in time or the peer closes first. Peeked here rather than by hyper's auto builder, whose
/// detection waits for the bytes without any deadline: an idle connection would hold its permit for good.
async fn speaks_http2(stream: &tokio::net::TcpStream, timeout: Duration) -> Option<bool> {
    const PREFACE: &[u8] = b"PRI";
    let peek = async {
        let mut buf = [0u8; 3];
        loop {
            match stream.peek(&mut buf).await {
                Ok(0) | Err(_) => return None,
                Ok(n) if n >= PREFACE.len() || buf[..n] != PREFACE[..n] => {
                    return Some(buf[..n] == PREFACE[..n] && n >= PREFACE.len());
                }
                // A partial `PRI`: wait for more bytes.
                Ok(_) => tokio::time::sleep(Duration::from_millis(5)).await,
            }
        }
    };
    tokio::time::timeout(timeout, peek).await.ok().flatten()
}

/// Counts every request that reaches the router, and its answer.
pub(super) async fn track(State(gw): State<Gateway>, request: Request, next: Next) -> Response {
    gw.inner.received.fetch_add(1, Ordering::SeqCst);
    let response = next.run(request).await;
    gw.inner.answered.fetch_add(1, Ordering::SeqCst);
    response
}

/// Reads the whole body before any route sees it, within `body_timeout_ms` (408) and `max_payload_bytes` (413,
/// whether or not a `content-length` said so: a chunked body is counted as it comes), so a slow or endless body
/// answers in the one error shape instead of holding its handler.
pub(super) async fn read_body(State(gw): State<Gateway>, request: Request, next: Next) -> Response {
    let api = Api::of_path(request.uri().path());
    let config = gw.config();
    let (parts, body) = request.into_parts();
    let too_large = || {
        ApiError::too_large(
            "payload_too_large",
            format!(
                "the body is over the limit of {} bytes",
                config.max_payload_bytes
            ),
        )
        .response(api)
    };
    // Refused on its `content-length` before a byte is read (nor a `100 Continue` sent for it).
    let declared = parts
        .headers
        .get(axum::http::header::CONTENT_LENGTH)
        .and_then(|v| v.to_str().ok()?.parse::<u64>().ok());
    if declared.is_some_and(|n| n > config.max_payload_bytes as u64) {
        return too_large();
    }
    let limited = Limited::new(body, config.max_payload_bytes);
    let timeout = Duration::from_millis(config.body_timeout_ms);
    let bytes = match tokio::time::timeout(timeout, limited.collect()).await {
        Ok(Ok(collected)) => collected.to_bytes(),
        Ok(Err(e)) if e.is::<LengthLimitError>() => return too_large(),
        Ok(Err(e)) => {
            return ApiError::bad_request("invalid_body", format!("reading the body failed: {e}"))
                .response(api)
        }
        Err(_) => {
            return ApiError::new(
                StatusCode::REQUEST_TIMEOUT,
                "body_timeout",
                format!(
                    "the body did not arrive within {} ms",
                    config.body_timeout_ms
                ),
            )
            .response(api)
        }
    };
    next.run(Request::from_parts(parts, Body::from(bytes)))
        .await
}
