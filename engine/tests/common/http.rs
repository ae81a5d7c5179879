//! Serving a fixture model over HTTP in a test: a gateway's router beside an engine of its own, and requests
//! answered as JSON. Not every test crate that compiles `common` uses these.
#![allow(dead_code)]

use axum::body::Body;
use axum::http::{Request, StatusCode};
use axum::Router;
use engine::gateway::{Gateway, GatewayConfig};
use engine::{CaptureMode, Dtype, Engine};
use http_body_util::BodyExt;
use serde_json::Value;
use tower::ServiceExt;

use super::models::load;

/// Runs `test` against a gateway serving `name` (split into sub-batches of 5), with an engine of its own beside
/// it, on a runtime of its own: [`Engine::score`] blocks, so the reference is computed outside it.
pub fn with_gateway(name: &str, test: impl AsyncFnOnce(Router, Engine)) {
    let reference = load(name, Dtype::F32, CaptureMode::Off);
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(1)
        .enable_all()
        .build()
        .expect("runtime");
    runtime.block_on(async {
        let served = load(name, Dtype::F32, CaptureMode::Off);
        let config = GatewayConfig {
            model_name: name.into(),
            split_size: 5,
            ..Default::default()
        };
        let gateway = Gateway::new(vec![served], config).expect("gateway");
        test(gateway.router(), reference).await;
    });
}

pub async fn post(router: &Router, path: &str, body: Value) -> (StatusCode, Value) {
    let request = Request::post(path)
        .header("content-type", "application/json")
        .body(Body::from(body.to_string()));
    send(router, request.expect("request")).await
}

pub async fn get(router: &Router, path: &str) -> (StatusCode, Value) {
    send(
        router,
        Request::get(path).body(Body::empty()).expect("request"),
    )
    .await
}

pub async fn send(router: &Router, request: Request<Body>) -> (StatusCode, Value) {
    let response = router.clone().oneshot(request).await.expect("response");
    let status = response.status();
    let bytes = response.into_body().collect().await.expect("body");
    (
        status,
        serde_json::from_slice(&bytes.to_bytes()).expect("JSON body"),
    )
}
