//! The HTTP gateway end to end on the tiny model: every route's answer on its engine's numbers, token ids,
//! dimensions, prompts and `/tokenize`; `refusals`: every refusal (status and error body), the API key and a server
//! shutting down; `load`: overload, priorities, batch splitting across replicas, graceful shutdown and
//! reconfiguration; `fidelity`: how closely each surface follows the API it copies (OpenAI, TEI), and start-up and
//! shutdown as a client sees them; `outputs`: the output formats and the routes beyond embedding (`/`,
//! `/embed_all`, `/similarity`, `/decode`, `/v1/models`).

mod fidelity;
mod load;
mod outputs;
mod refusals;

use std::time::{Duration, Instant};

use axum::body::Body;
use axum::http::{Request, StatusCode};
use axum::Router;
use base64::Engine as _;
use engine::gateway::{Gateway, GatewayConfig};
use engine::{Engine, EngineConfig};
use http_body_util::BodyExt;
use serde_json::{json, Value};
use tower::ServiceExt;

fn model_dir() -> tempfile::TempDir {
    let dir = tempfile::tempdir().unwrap();
    engine::model::tiny::write_tiny_bert(dir.path(), Default::default()).unwrap();
    std::fs::write(
        dir.path().join("config_sentence_transformers.json"),
        r#"{"prompts": {"query": "query: ", "passage": "the "}}"#,
    )
    .unwrap();
    dir
}

fn engine(dir: &tempfile::TempDir, config: EngineConfig) -> Engine {
    Engine::load(
        dir.path(),
        EngineConfig {
            threads: 1,
            ..config
        },
    )
    .unwrap()
}

fn gateway(dir: &tempfile::TempDir, replicas: usize, config: GatewayConfig) -> Gateway {
    let engines = (0..replicas)
        .map(|_| engine(dir, EngineConfig::default()))
        .collect();
    Gateway::new(engines, config).unwrap()
}

/// The engine's own answer, computed off the test's async threads (`Engine::embed` blocks).
fn embed<S: AsRef<str> + Sync>(engine: &Engine, texts: &[S]) -> Vec<Vec<f32>> {
    std::thread::scope(|s| s.spawn(|| engine.embed(texts).unwrap()).join().unwrap())
}

/// Vectors computed in batches of different composition agree to float rounding (GEMM blocking follows the row
/// count); the same batch gives the same bits.
fn assert_close(a: &[Vec<f32>], b: &[Vec<f32>]) {
    assert_eq!(a.len(), b.len());
    for (i, (x, y)) in a.iter().zip(b).enumerate() {
        assert_eq!(x.len(), y.len());
        let diff = x
            .iter()
            .zip(y)
            .map(|(p, q)| (p - q).abs())
            .fold(0.0, f32::max);
        assert!(diff < 1e-5, "vector {i} differs by {diff}");
    }
}

struct Reply {
    status: StatusCode,
    headers: axum::http::HeaderMap,
    body: Value,
}

async fn send(router: &Router, method: &str, path: &str, body: impl Into<Body>) -> Reply {
    send_with(router, Request::builder().method(method).uri(path), body).await
}

async fn send_with(
    router: &Router,
    request: axum::http::request::Builder,
    body: impl Into<Body>,
) -> Reply {
    let response = router
        .clone()
        .oneshot(request.body(body.into()).unwrap())
        .await
        .unwrap();
    let status = response.status();
    let headers = response.headers().clone();
    let bytes = response.into_body().collect().await.unwrap().to_bytes();
    let body = serde_json::from_slice(&bytes)
        .unwrap_or_else(|_| Value::String(String::from_utf8_lossy(&bytes).into_owned()));
    Reply {
        status,
        headers,
        body,
    }
}

async fn post(router: &Router, path: &str, body: Value) -> Reply {
    send(router, "POST", path, body.to_string()).await
}

fn vectors(openai: &Value) -> Vec<Vec<f32>> {
    openai["data"]
        .as_array()
        .unwrap()
        .iter()
        .map(|d| floats(&d["embedding"]))
        .collect()
}

fn floats(v: &Value) -> Vec<f32> {
    v.as_array()
        .unwrap()
        .iter()
        .map(|x| x.as_f64().unwrap() as f32)
        .collect()
}

/// Asserts the status and the error shape of the route's surface, and returns OpenAI's `code` or TEI's
/// `error_type`.
fn error_code(reply: &Reply, status: StatusCode) -> String {
    assert_eq!(reply.status, status, "{}", reply.body);
    let e = &reply.body["error"];
    if let Some(message) = e.as_str() {
        assert!(!message.is_empty(), "{}", reply.body);
        assert_eq!(reply.body.as_object().unwrap().len(), 2, "{}", reply.body);
        return reply.body["error_type"].as_str().unwrap().to_owned();
    }
    assert!(e["message"].as_str().is_some_and(|m| !m.is_empty()), "{e}");
    assert!(e["type"].as_str().is_some(), "{e}");
    e["code"].as_str().unwrap().to_owned()
}

/// The ids of one input's `/tokenize` answer (TEI's token objects).
fn token_ids(tokens: &Value) -> Vec<u32> {
    tokens
        .as_array()
        .unwrap()
        .iter()
        .map(|t| t["id"].as_u64().unwrap() as u32)
        .collect()
}

const TEXTS: [&str; 3] = ["the search query", "embedding a passage", "a"];

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn openai_and_tei_answer_the_engines_numbers() {
    let dir = model_dir();
    let reference = embed(&engine(&dir, EngineConfig::default()), &TEXTS);
    let gw = gateway(&dir, 1, GatewayConfig::default());
    let router = gw.router();

    let r = post(
        &router,
        "/v1/embeddings",
        json!({ "input": TEXTS, "model": "all-MiniLM-L6-v2" }),
    )
    .await;
    assert_eq!(r.status, StatusCode::OK, "{}", r.body);
    assert_eq!(vectors(&r.body), reference);
    assert_eq!(r.body["object"], "list");
    assert_eq!(r.body["data"][1]["index"], 1);
    let tokens: usize = TEXTS.iter().map(|t| gw_engine_tokens(&dir, t)).sum();
    assert_eq!(r.body["usage"]["prompt_tokens"], tokens);
    assert_eq!(r.body["usage"]["total_tokens"], tokens);
    for h in [
        "x-tokenization-time",
        "x-queue-time",
        "x-inference-time",
        "x-total-time",
    ] {
        let ms: f64 = r.headers[h].to_str().unwrap().parse().unwrap();
        assert!(ms >= 0.0, "{h}");
    }

    let one = post(&router, "/v1/embeddings", json!({ "input": TEXTS[0] })).await;
    assert_close(&vectors(&one.body), &reference[..1]);

    let b64 = post(
        &router,
        "/v1/embeddings",
        json!({ "input": TEXTS, "encoding_format": "base64" }),
    )
    .await;
    for (d, want) in b64.body["data"].as_array().unwrap().iter().zip(&reference) {
        let bytes = base64::engine::general_purpose::STANDARD
            .decode(d["embedding"].as_str().unwrap())
            .unwrap();
        let got: Vec<f32> = bytes
            .chunks_exact(4)
            .map(|c| f32::from_le_bytes(c.try_into().unwrap()))
            .collect();
        assert_eq!(&got, want);
    }

    let tei = post(&router, "/embed", json!({ "inputs": TEXTS })).await;
    assert_eq!(tei.status, StatusCode::OK);
    let tei: Vec<Vec<f32>> = tei.body.as_array().unwrap().iter().map(floats).collect();
    assert_eq!(tei, reference);
    let tei_one = post(
        &router,
        "/embed",
        json!({ "inputs": TEXTS[2], "normalize": true }),
    )
    .await;
    assert_close(&[floats(&tei_one.body[0])], &reference[2..]);
}

fn gw_engine_tokens(dir: &tempfile::TempDir, text: &str) -> usize {
    engine(dir, EngineConfig::default())
        .tokenize(text)
        .unwrap()
        .len()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn token_ids_dimensions_prompts_and_tokenize() {
    let dir = model_dir();
    let e = engine(&dir, EngineConfig::default());
    let gw = gateway(&dir, 1, GatewayConfig::default());
    let router = gw.router();

    let ids = e.tokenize(TEXTS[0]).unwrap();
    let tok = post(&router, "/tokenize", json!({ "inputs": TEXTS[0] })).await;
    assert_eq!(token_ids(&tok.body[0]), ids);

    let by_ids = post(&router, "/v1/embeddings", json!({ "input": ids })).await;
    let by_text = post(&router, "/v1/embeddings", json!({ "input": [TEXTS[0]] })).await;
    assert_eq!(vectors(&by_ids.body), vectors(&by_text.body));
    let lists = post(&router, "/v1/embeddings", json!({ "input": [ids, ids] })).await;
    assert_eq!(vectors(&lists.body).len(), 2);

    let short = post(
        &router,
        "/v1/embeddings",
        json!({ "input": TEXTS[0], "dimensions": 8 }),
    )
    .await;
    let v = &vectors(&short.body)[0];
    let full = &vectors(&by_text.body)[0];
    assert_eq!(v.len(), 8);
    let norm: f32 = v.iter().map(|x| x * x).sum::<f32>().sqrt();
    assert!((norm - 1.0).abs() < 1e-5, "re-normalized after truncation");
    let scale = full[..8].iter().map(|x| x * x).sum::<f32>().sqrt();
    for (a, b) in v.iter().zip(&full[..8]) {
        assert!((a - b / scale).abs() < 1e-5);
    }
    // Regression: TEI's `normalize: false` with `dimensions` used to come back re-normalized anyway. It is the
    // cut of the pooled vector (fidelity::normalize_false_returns_the_pooled_vector_before_normalize): the cut of
    // the unit one, scaled.
    let raw = post(
        &router,
        "/embed",
        json!({ "inputs": TEXTS[0], "dimensions": 8, "normalize": false }),
    )
    .await;
    let raw = floats(&raw.body[0]);
    let ratio = raw[0] / full[0];
    for (a, b) in raw.iter().zip(&full[..8]) {
        assert!((a - b * ratio).abs() < 1e-5 * ratio.abs(), "{a} vs {b}");
    }

    let prompted = post(
        &router,
        "/embed",
        json!({ "inputs": "is it", "prompt_name": "query" }),
    )
    .await;
    assert_eq!(floats(&prompted.body[0]), embed(&e, &["query: is it"])[0]);
    let prompted_openai = post(
        &router,
        "/v1/embeddings",
        json!({ "input": "is it", "prompt_name": "query" }),
    )
    .await;
    assert_eq!(vectors(&prompted_openai.body)[0], floats(&prompted.body[0]));

    let with_default = gateway(
        &dir,
        1,
        GatewayConfig {
            default_prompt_name: Some("passage".into()),
            ..Default::default()
        },
    );
    let d = post(
        &with_default.router(),
        "/embed",
        json!({ "inputs": "search" }),
    )
    .await;
    assert_close(&[floats(&d.body[0])], &embed(&e, &["the search"]));
    let unknown = GatewayConfig {
        default_prompt_name: Some("nope".into()),
        ..Default::default()
    };
    assert!(Gateway::new(vec![engine(&dir, EngineConfig::default())], unknown).is_err());

    let health = send(&router, "GET", "/health", Body::empty()).await;
    assert_eq!(health.status, StatusCode::OK);
    let info = send(&router, "GET", "/info", Body::empty()).await;
    assert_eq!(info.body["model_id"], "all-MiniLM-L6-v2");
    assert_eq!(info.body["version"], env!("CARGO_PKG_VERSION"));
    assert_eq!(info.body["model"]["dim"], e.dim());
    let metrics = send(&router, "GET", "/metrics", Body::empty()).await;
    let text = metrics.body.as_str().unwrap();
    for needle in [
        "embed_requests_total{route=\"openai\",outcome=\"ok\"}",
        "embed_stage_seconds_bucket{stage=\"queue\",le=\"+Inf\"}",
        "embed_queue_sequences{replica=\"0\"} 0",
        "embed_batch_fill_count",
        "embed_batch_tokens_bucket",
    ] {
        assert!(text.contains(needle), "{needle} missing from:\n{text}");
    }
    let value = |prefix: &str| -> f64 {
        text.lines()
            .find_map(|l| l.strip_prefix(prefix))
            .unwrap()
            .parse()
            .unwrap()
    };
    let sum = value("embed_stage_seconds_sum{stage=\"total\"} ");
    let count = value("embed_stage_seconds_count{stage=\"total\"} ");
    // Any HTTP request takes more than 10 µs; a clamped histogram would say 2 µs.
    assert!(
        count > 0.0 && sum > count * 1e-5,
        "latencies recorded: {sum} s over {count}"
    );
    // Every batch's forward pass is counted once, by how it ran.
    let forwards: f64 = ["eager", "capture", "replay"]
        .iter()
        .map(|run| value(&format!("embed_forwards_total{{run=\"{run}\"}} ")))
        .sum();
    assert_eq!(forwards, value("embed_batch_tokens_count "));
    assert!(value("embed_forwards_total{run=\"eager\"} ") >= 1.0);
}

/// The model's own `default_prompt_name` (config_sentence_transformers.json) is put before a text that names no
/// prompt, by the gateway and by `Engine::embed`, as sentence-transformers' `encode` does; a request's
/// `prompt_name` and the server's `--default-prompt-name` replace it, `prompt_name: ""` leaves it off (as
/// sentence-transformers' `prompt=""`); where the prompt is left out of pooling, a text cut from the left is refused
/// (it would lose the prompt in place of its own first tokens) but its token states are served; a default naming
/// no prompt is refused at load, as sentence-transformers refuses it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_models_default_prompt_applies_where_none_is_named() {
    let dir = model_dir();
    let plain = engine(&dir, EngineConfig::default());
    let want = embed(&plain, &["query: is it", "the is it"]);
    let st_config = dir.path().join("config_sentence_transformers.json");
    std::fs::write(
        &st_config,
        r#"{"prompts": {"query": "query: ", "passage": "the ", "bare": null}, "default_prompt_name": "query"}"#,
    )
    .unwrap();
    let e = engine(&dir, EngineConfig::default());
    assert_eq!(e.info().default_prompt.as_deref(), Some("query"));
    assert_eq!(embed(&e, &["is it"])[0], want[0]);
    let router = gateway(&dir, 1, GatewayConfig::default()).router();
    let default = post(&router, "/embed", json!({ "inputs": "is it" })).await;
    assert_eq!(floats(&default.body[0]), want[0]);
    let named = post(
        &router,
        "/embed",
        json!({ "inputs": "is it", "prompt_name": "passage" }),
    )
    .await;
    assert_eq!(floats(&named.body[0]), want[1]);
    let none = post(
        &router,
        "/embed",
        json!({ "inputs": "is it", "prompt_name": "" }),
    )
    .await;
    assert_eq!(floats(&none.body[0]), embed(&plain, &["is it"])[0]);
    // A prompt written as null is an empty one, as sentence-transformers reads it.
    let bare = post(
        &router,
        "/embed",
        json!({ "inputs": "is it", "prompt_name": "bare" }),
    )
    .await;
    assert_eq!(floats(&bare.body[0]), floats(&none.body[0]));
    let flag = GatewayConfig {
        default_prompt_name: Some("passage".into()),
        ..Default::default()
    };
    let server_default = post(
        &gateway(&dir, 1, flag).router(),
        "/embed",
        json!({ "inputs": "is it" }),
    )
    .await;
    assert_eq!(floats(&server_default.body[0]), want[1]);
    // With the prompt left out of pooling, a text cut from the left would lose the prompt instead of its own
    // first tokens: refused where it is pooled; its token states, which pool nothing, are served.
    std::fs::write(
        dir.path().join("1_Pooling/config.json"),
        r#"{"pooling_mode": "mean", "include_prompt": false}"#,
    )
    .unwrap();
    let router = gateway(&dir, 1, GatewayConfig::default()).router();
    let long =
        json!({ "inputs": "a ".repeat(100), "truncate": true, "truncation_direction": "Left" });
    let pooled = post(&router, "/embed", long.clone()).await;
    assert_eq!(
        error_code(&pooled, StatusCode::UNPROCESSABLE_ENTITY),
        "validation"
    );
    assert!(
        pooled.body["error"]
            .as_str()
            .unwrap()
            .contains("prompt `query`"),
        "{}",
        pooled.body
    );
    let states = post(&router, "/embed_all", long).await;
    assert_eq!(states.status, StatusCode::OK, "{}", states.body);

    std::fs::write(
        &st_config,
        r#"{"prompts": {"query": "query: "}, "default_prompt_name": "nope"}"#,
    )
    .unwrap();
    let err = Engine::load(dir.path(), EngineConfig::default())
        .err()
        .expect("refused")
        .to_string();
    assert!(
        err.contains("default_prompt_name") && err.contains("nope"),
        "{err}"
    );
}
