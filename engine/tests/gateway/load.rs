//! The gateway under load: a burst past the queue refused fast, priorities, a batch split across replicas in
//! order, graceful shutdown with requests in flight, and a reconfiguration every replica follows.

use super::*;

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_burst_beyond_the_queue_gets_quick_429s_and_the_rest_complete() {
    // Small batches and a small queue: a handful of 32-input requests fill it.
    // A slower model than the default tiny one and one-sequence batches, so the queue cannot drain mid-burst.
    let slow = tempfile::tempdir().unwrap();
    let spec = engine::model::tiny::TinySpec {
        hidden: 128,
        layers: 4,
        intermediate: 512,
        ..Default::default()
    };
    engine::model::tiny::write_tiny_bert(slow.path(), spec).unwrap();
    let config = EngineConfig {
        threads: 1,
        max_batch_tokens: 8,
        max_queue_requests: 40,
        max_queue_tokens: 1 << 20,
        ..Default::default()
    };
    let gw = Gateway::new(
        vec![Engine::load(slow.path(), config).unwrap()],
        GatewayConfig::default(),
    )
    .unwrap();
    let router = gw.router();
    let texts: Vec<String> = (0..32).map(|i| format!("the query {i}")).collect();
    let body = json!({ "input": texts }).to_string();
    let burst: Vec<_> = (0..24)
        .map(|_| {
            let (router, body) = (router.clone(), body.clone());
            tokio::spawn(async move {
                let t0 = Instant::now();
                let r = send(&router, "POST", "/v1/embeddings", body).await;
                (r, t0.elapsed())
            })
        })
        .collect();
    let (mut ok, mut refused) = (Vec::new(), Vec::new());
    for t in burst {
        let (r, elapsed) = t.await.unwrap();
        if r.status == StatusCode::OK {
            ok.push((vectors(&r.body), elapsed));
        } else {
            assert_eq!(error_code(&r, StatusCode::TOO_MANY_REQUESTS), "overloaded");
            let after = r
                .headers
                .get("retry-after")
                .map(|v| v.to_str().unwrap().to_owned());
            let secs: u64 = after.as_deref().unwrap_or("none").parse().unwrap_or(0);
            assert!(secs >= 1, "a 429 says when to retry: {after:?}");
            refused.push(elapsed);
        }
    }
    assert!(!refused.is_empty(), "the burst overflowed the queue");
    assert!(!ok.is_empty(), "some of the burst was accepted");
    let want = &ok[0].0;
    assert!(
        ok.iter().all(|(v, _)| v == want && v.len() == 32),
        "accepted ones all complete"
    );
    let slowest_ok = ok.iter().map(|(_, e)| *e).max().unwrap();
    let slowest_refusal = refused.iter().max().unwrap();
    assert!(
        *slowest_refusal < slowest_ok.max(Duration::from_millis(50)),
        "refusals are immediate: {slowest_refusal:?} vs {slowest_ok:?}"
    );
    let metrics = send(&router, "GET", "/metrics", Body::empty()).await;
    let overloaded = format!(
        "embed_requests_total{{route=\"openai\",outcome=\"overloaded\"}} {}",
        refused.len()
    );
    assert!(metrics.body.as_str().unwrap().contains(&overloaded));
}

#[tokio::test]
async fn a_request_names_its_priority_by_header_or_body_field() {
    let dir = model_dir();
    let router = gateway(&dir, 1, GatewayConfig::default()).router();
    let with = |priority: &str| {
        Request::builder()
            .method("POST")
            .uri("/v1/embeddings")
            .header("content-type", "application/json")
            .header("x-priority", priority)
    };
    let body = json!({ "input": "a query" }).to_string();
    assert_eq!(
        send_with(&router, with("batch"), body.clone()).await.status,
        StatusCode::OK
    );
    let bad = send_with(&router, with("urgent"), body).await;
    assert_eq!(
        error_code(&bad, StatusCode::BAD_REQUEST),
        "invalid_priority"
    );
    let field = json!({ "inputs": "a query", "priority": "batch" });
    assert_eq!(post(&router, "/embed", field).await.status, StatusCode::OK);
    let wrong = json!({ "inputs": "a query", "priority": "soon" });
    assert_eq!(
        post(&router, "/embed", wrong).await.status,
        StatusCode::BAD_REQUEST
    );
    // Each was counted in its priority's queue.
    let metrics = send(&router, "GET", "/metrics", Body::empty()).await;
    let text = metrics.body.as_str().unwrap().to_owned();
    assert!(
        text.contains("embed_class_refused_total{replica=\"0\",priority=\"batch\"} 0"),
        "{text}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn split_batches_keep_order_and_numbers_across_replicas() {
    let dir = model_dir();
    let texts: Vec<String> = (0..23)
        .map(|i| format!("query {} of the {}", "a".repeat(i % 7 + 1), i))
        .collect();
    let whole = gateway(
        &dir,
        1,
        GatewayConfig {
            split_size: 1000,
            ..Default::default()
        },
    );
    let split = gateway(
        &dir,
        2,
        GatewayConfig {
            split_size: 4,
            ..Default::default()
        },
    );
    let body = json!({ "input": texts });
    let a = post(&whole.router(), "/v1/embeddings", body.clone()).await;
    let b = post(&split.router(), "/v1/embeddings", body).await;
    let (a, b) = (vectors(&a.body), vectors(&b.body));
    assert_eq!(a.len(), 23);
    assert_close(&a, &b);
    assert_close(&b, &embed(&engine(&dir, EngineConfig::default()), &texts));
    let batches: Vec<u64> = split.loads().iter().map(|l| l.batches).collect();
    assert!(
        batches.iter().all(|&n| n > 0),
        "both replicas ran work: {batches:?}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn graceful_shutdown_finishes_in_flight_requests() {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let dir = model_dir();
    let gw = gateway(&dir, 1, GatewayConfig::default());
    let probe = gw.router();
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
    let server = tokio::spawn(gw.serve(listener, async {
        let _ = stopped.await;
    }));
    let texts: Vec<String> = (0..200).map(|i| format!("the passage {i}")).collect();
    let body = json!({ "input": texts }).to_string();
    let mut conn = tokio::net::TcpStream::connect(addr).await.unwrap();
    let request = format!(
        "POST /v1/embeddings HTTP/1.1\r\nhost: x\r\ncontent-type: application/json\r\ncontent-length: {}\r\nconnection: close\r\n\r\n{body}",
        body.len()
    );
    conn.write_all(request.as_bytes()).await.unwrap();
    // Stop once the request is being served (a batch of it has reached the engine): a stop before the server has
    // read it would close the connection unanswered, rightly, and a fixed sleep lost that race on a loaded machine.
    let deadline = std::time::Instant::now() + Duration::from_secs(10);
    loop {
        let metrics = send(&probe, "GET", "/metrics", Body::empty()).await;
        let batches = metrics
            .body
            .as_str()
            .unwrap_or_default()
            .lines()
            .find_map(|l| l.strip_prefix("embed_batch_tokens_count"))
            .and_then(|rest| rest.split_whitespace().last()?.parse::<u64>().ok())
            .unwrap_or(0);
        if batches > 0 {
            break;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "the request never reached the engine"
        );
        tokio::time::sleep(Duration::from_millis(1)).await;
    }
    stop.send(()).unwrap();
    let mut response = String::new();
    conn.read_to_string(&mut response).await.unwrap();
    assert!(
        response.starts_with("HTTP/1.1 200"),
        "{}",
        &response[..response.len().min(200)]
    );
    tokio::time::timeout(Duration::from_secs(10), server)
        .await
        .expect("the server exits after draining")
        .unwrap()
        .unwrap();
    assert!(
        tokio::net::TcpStream::connect(addr).await.is_err(),
        "no longer accepting"
    );
}

/// `Gateway::reconfigure` reaches every replica's scheduler: a request split over two replicas forms at most one
/// batch per sub-batch under the default settings (a sub-batch is admitted whole), and one batch per sequence once
/// `max_batch_seqs` is 1 — the batches the engines form, counted by their telemetry. A bad setting is refused
/// whole and changes nothing.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn reconfigure_changes_the_batches_every_replica_forms() {
    let dir = model_dir();
    let gw = gateway(
        &dir,
        2,
        GatewayConfig {
            split_size: 4,
            ..Default::default()
        },
    );
    let router = gw.router();
    let texts: Vec<String> = (0..16).map(|i| format!("query number {i}")).collect();
    let body = json!({ "input": texts });
    let batches = |gw: &Gateway| -> Vec<u64> { gw.loads().iter().map(|l| l.batches).collect() };

    let r = post(&router, "/v1/embeddings", body.clone()).await;
    assert_eq!(r.status, StatusCode::OK);
    let before: u64 = batches(&gw).iter().sum();
    assert!(
        before <= 4,
        "four sub-batches of four formed {before} batches"
    );

    let one_seq = EngineConfig {
        max_batch_seqs: 1,
        ..EngineConfig::default()
    };
    gw.reconfigure(&one_seq).unwrap();
    let bad = EngineConfig {
        max_batch_tokens: 0,
        ..EngineConfig::default()
    };
    assert!(gw.reconfigure(&bad).is_err());
    let per_replica = batches(&gw);
    let seqs_before = gw.metrics().snapshot().batch_seqs;
    let r = post(&router, "/v1/embeddings", body).await;
    assert_eq!(r.status, StatusCode::OK);
    let after = batches(&gw);
    let grew: Vec<u64> = after.iter().zip(&per_replica).map(|(a, b)| a - b).collect();
    assert_eq!(
        grew.iter().sum::<u64>(),
        16,
        "one batch per sequence: {grew:?}"
    );
    assert!(
        grew.iter().all(|&n| n > 0),
        "both replicas took work: {grew:?}"
    );
    assert_eq!(gw.metrics().snapshot().batch_seqs - seqs_before, 16);
}
