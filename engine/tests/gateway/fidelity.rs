//! Each surface as a client of the API it copies meets it (issue 21): OpenAI's and TEI's statuses, error shapes,
//! input forms and `/tokenize` answer, the number format, model names, routes and content types; and the
//! server's start-up and shutdown as a client sees them.

use super::*;

fn raw_post(path: &str) -> axum::http::request::Builder {
    Request::builder().method("POST").uri(path)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn over_limit_input_is_400_on_openai_naming_auto_truncate_and_422_on_tei_naming_truncate() {
    let dir = model_dir();
    let router = gateway(&dir, 1, GatewayConfig::default()).router();
    let long = "a ".repeat(100);
    let openai = post(&router, "/v1/embeddings", json!({ "input": long })).await;
    assert_eq!(
        error_code(&openai, StatusCode::BAD_REQUEST),
        "input_too_long"
    );
    let message = openai.body["error"]["message"].as_str().unwrap();
    assert!(message.contains("--auto-truncate"), "{message}");
    let tei = post(&router, "/embed", json!({ "inputs": long })).await;
    assert_eq!(
        error_code(&tei, StatusCode::UNPROCESSABLE_ENTITY),
        "validation"
    );
    let message = tei.body["error"].as_str().unwrap();
    assert!(message.contains("\"truncate\": true"), "{message}");
    // The request's `truncate` wins on TEI's surface; `--auto-truncate` is the default of both.
    let cut = post(
        &router,
        "/embed",
        json!({ "inputs": long, "truncate": true }),
    )
    .await;
    assert_eq!(cut.status, StatusCode::OK, "{}", cut.body);
    let auto = gateway(
        &dir,
        1,
        GatewayConfig {
            auto_truncate: true,
            ..Default::default()
        },
    )
    .router();
    let openai = post(&auto, "/v1/embeddings", json!({ "input": long })).await;
    assert_eq!(openai.status, StatusCode::OK, "{}", openai.body);
    assert_eq!(openai.body["usage"]["prompt_tokens"], 48);
    let refused = post(
        &auto,
        "/embed",
        json!({ "inputs": long, "truncate": false }),
    )
    .await;
    assert_eq!(refused.status, StatusCode::UNPROCESSABLE_ENTITY);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tokenize_answers_teis_token_objects_and_honours_add_special_tokens() {
    let dir = model_dir();
    let e = engine(&dir, EngineConfig::default());
    let router = gateway(&dir, 1, GatewayConfig::default()).router();
    let text = "the search query";
    let with = post(&router, "/tokenize", json!({ "inputs": [text, "a"] })).await;
    assert_eq!(with.status, StatusCode::OK, "{}", with.body);
    let tokens = with.body[0].as_array().unwrap();
    assert_eq!(token_ids(&with.body[0]), e.tokenize(text).unwrap());
    assert_eq!(token_ids(&with.body[1]), e.tokenize("a").unwrap());
    let (first, last) = (&tokens[0], &tokens[tokens.len() - 1]);
    for special in [first, last] {
        assert_eq!(special["special"], true, "{special}");
        assert!(special["start"].is_null() && special["stop"].is_null());
    }
    assert_eq!(first["text"], "[CLS]");
    let words = &tokens[1..tokens.len() - 1];
    for t in words {
        let (start, stop) = (
            t["start"].as_u64().unwrap() as usize,
            t["stop"].as_u64().unwrap() as usize,
        );
        assert_eq!(t["special"], false);
        assert_eq!(t["text"], text[start..stop], "{t}");
    }
    assert_eq!(words[0]["text"], "the");
    let without = post(
        &router,
        "/tokenize",
        json!({ "inputs": text, "add_special_tokens": false }),
    )
    .await;
    assert_eq!(without.body[0].as_array().unwrap(), words);
    // TEI's /tokenize takes texts only.
    let ids = post(&router, "/tokenize", json!({ "inputs": [1, 2] })).await;
    assert_eq!(error_code(&ids, StatusCode::BAD_REQUEST), "validation");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn embed_takes_token_ids_as_tei_does() {
    let dir = model_dir();
    let e = engine(&dir, EngineConfig::default());
    let router = gateway(&dir, 1, GatewayConfig::default()).router();
    let ids = e.tokenize("the search query").unwrap();
    let by_text = post(&router, "/embed", json!({ "inputs": "the search query" })).await;
    let by_ids = post(&router, "/embed", json!({ "inputs": ids })).await;
    assert_eq!(by_ids.status, StatusCode::OK, "{}", by_ids.body);
    assert_eq!(by_ids.body, by_text.body);
    let lists = post(&router, "/embed", json!({ "inputs": [ids, ids] })).await;
    assert_eq!(lists.body.as_array().unwrap().len(), 2);
    let mixed = post(&router, "/embed", json!({ "inputs": ["a", [1, 2]] })).await;
    assert_eq!(error_code(&mixed, StatusCode::BAD_REQUEST), "validation");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn wrong_input_shape_is_described_without_rust_internals() {
    let dir = model_dir();
    let router = gateway(&dir, 1, GatewayConfig::default()).router();
    for (path, body) in [
        ("/embed", json!({ "inputs": 5 })),
        ("/v1/embeddings", json!({ "input": 5 })),
        ("/v1/embeddings", json!({ "input": [1, "a"] })),
        ("/v1/embeddings", json!({ "input": [{ "text": "a" }] })),
        ("/tokenize", json!({ "inputs": { "text": "a" } })),
    ] {
        let r = post(&router, path, body.clone()).await;
        assert_eq!(r.status, StatusCode::BAD_REQUEST, "{body}");
        let message = r.body["error"]
            .as_str()
            .or(r.body["error"]["message"].as_str())
            .unwrap();
        for internal in ["untagged", "enum", "TeiInput", "OpenAiInput", "variant"] {
            assert!(!message.contains(internal), "{body}: {message}");
        }
        assert!(
            message.contains("array of strings") || message.contains("mixes"),
            "{body}: {message}"
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn each_surface_answers_errors_in_its_own_shape() {
    let dir = model_dir();
    let router = gateway(&dir, 1, GatewayConfig::default()).router();
    let openai = post(&router, "/v1/embeddings", json!({ "input": [] })).await;
    assert_eq!(openai.body["error"]["type"], "invalid_request_error");
    assert_eq!(openai.body["error"]["code"], "empty_input");
    for path in ["/embed", "/tokenize"] {
        let tei = post(&router, path, json!({ "inputs": [] })).await;
        assert_eq!(error_code(&tei, StatusCode::BAD_REQUEST), "empty", "{path}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn floats_are_written_in_the_shortest_form_that_round_trips() {
    let dir = model_dir();
    let router = gateway(&dir, 1, GatewayConfig::default()).router();
    let texts: Vec<String> = (0..20).map(|i| format!("passage number {i}")).collect();
    for (path, body) in [
        ("/v1/embeddings", json!({ "input": texts })),
        ("/embed", json!({ "inputs": texts })),
    ] {
        let response = router
            .clone()
            .oneshot(raw_post(path).body(Body::from(body.to_string())).unwrap())
            .await
            .unwrap();
        let bytes = response.into_body().collect().await.unwrap().to_bytes();
        let text = std::str::from_utf8(&bytes).unwrap();
        let start = text.find("[-").or(text.find("[0")).unwrap();
        let numbers = text[start..]
            .split(|c: char| !(c.is_ascii_digit() || "-.eE".contains(c)))
            .filter(|t| t.contains('.'));
        let mut n = 0;
        for t in numbers {
            let x: f32 = t.parse().unwrap();
            // Rust's `{:e}` writes an f32 with the fewest digits that read back to it.
            let shortest = format!("{x:e}");
            let digits = |s: &str| {
                let mantissa = s.split(['e', 'E']).next().unwrap();
                mantissa
                    .chars()
                    .filter(char::is_ascii_digit)
                    .skip_while(|&c| c == '0')
                    .count()
            };
            assert!(
                digits(t) <= digits(&shortest),
                "{path}: {t} has more digits than {shortest}"
            );
            n += 1;
        }
        assert_eq!(n, 20 * 32, "{path}: every component checked");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn unknown_model_is_404_unless_served_under_that_name() {
    let dir = model_dir();
    let router = gateway(
        &dir,
        1,
        GatewayConfig {
            model_name: "minilm".into(),
            model_aliases: vec!["text-embedding-3-small".into()],
            ..Default::default()
        },
    )
    .router();
    let unknown = post(
        &router,
        "/v1/embeddings",
        json!({ "input": "a", "model": "gpt-4" }),
    )
    .await;
    assert_eq!(
        error_code(&unknown, StatusCode::NOT_FOUND),
        "model_not_found"
    );
    let message = unknown.body["error"]["message"].as_str().unwrap();
    assert!(
        message.contains("minilm, text-embedding-3-small"),
        "{message}"
    );
    for model in [
        json!("minilm"),
        json!("text-embedding-3-small"),
        Value::Null,
    ] {
        let r = post(
            &router,
            "/v1/embeddings",
            json!({ "input": "a", "model": model }),
        )
        .await;
        assert_eq!(r.status, StatusCode::OK, "{model}: {}", r.body);
        assert_eq!(r.body["model"], "minilm");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn unknown_route_and_wrong_method_get_a_json_error() {
    let dir = model_dir();
    let router = gateway(&dir, 1, GatewayConfig::default()).router();
    let missing = send(&router, "POST", "/v1/embedding", Body::empty()).await;
    assert_eq!(error_code(&missing, StatusCode::NOT_FOUND), "not_found");
    let missing = send(&router, "GET", "/nope", Body::empty()).await;
    assert_eq!(error_code(&missing, StatusCode::NOT_FOUND), "validation");
    let method = send(&router, "GET", "/v1/embeddings", Body::empty()).await;
    assert_eq!(
        error_code(&method, StatusCode::METHOD_NOT_ALLOWED),
        "method_not_allowed"
    );
    let method = send(&router, "GET", "/embed", Body::empty()).await;
    assert_eq!(
        error_code(&method, StatusCode::METHOD_NOT_ALLOWED),
        "validation"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn wrong_content_type_is_415() {
    let dir = model_dir();
    let router = gateway(&dir, 1, GatewayConfig::default()).router();
    let body = json!({ "input": "a" }).to_string();
    let form = send_with(
        &router,
        raw_post("/v1/embeddings").header("content-type", "application/x-www-form-urlencoded"),
        body.clone(),
    )
    .await;
    assert_eq!(
        error_code(&form, StatusCode::UNSUPPORTED_MEDIA_TYPE),
        "unsupported_media_type"
    );
    let tei = send_with(
        &router,
        raw_post("/embed").header("content-type", "text/plain"),
        json!({ "inputs": "a" }).to_string(),
    )
    .await;
    assert_eq!(
        error_code(&tei, StatusCode::UNSUPPORTED_MEDIA_TYPE),
        "validation"
    );
    for kind in [
        "application/json",
        "application/json; charset=utf-8",
        "Application/JSON",
    ] {
        let ok = send_with(
            &router,
            raw_post("/v1/embeddings").header("content-type", kind),
            body.clone(),
        )
        .await;
        assert_eq!(ok.status, StatusCode::OK, "{kind}: {}", ok.body);
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn authorization_scheme_is_matched_without_regard_to_case() {
    let dir = model_dir();
    let router = gateway(
        &dir,
        1,
        GatewayConfig {
            api_key: Some("sesame".into()),
            ..Default::default()
        },
    )
    .router();
    let body = json!({ "input": "a" }).to_string();
    for value in ["Bearer sesame", "bearer sesame", "BEARER sesame"] {
        let r = send_with(
            &router,
            raw_post("/v1/embeddings").header("authorization", value),
            body.clone(),
        )
        .await;
        assert_eq!(r.status, StatusCode::OK, "{value}: {}", r.body);
    }
    for value in ["Basic sesame", "Bearersesame", "sesame"] {
        let r = send_with(
            &router,
            raw_post("/v1/embeddings").header("authorization", value),
            body.clone(),
        )
        .await;
        assert_eq!(r.status, StatusCode::UNAUTHORIZED, "{value}");
    }
    let tei = send_with(
        &router,
        raw_post("/embed").header("authorization", "Bearer nope"),
        json!({ "inputs": "a" }).to_string(),
    )
    .await;
    assert_eq!(error_code(&tei, StatusCode::UNAUTHORIZED), "unauthorized");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn health_answers_503_while_draining_instead_of_the_port_vanishing() {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    async fn get_health(addr: std::net::SocketAddr) -> String {
        let mut conn = tokio::net::TcpStream::connect(addr).await.unwrap();
        conn.write_all(b"GET /health HTTP/1.1\r\nhost: x\r\nconnection: close\r\n\r\n")
            .await
            .unwrap();
        let mut response = String::new();
        conn.read_to_string(&mut response).await.unwrap();
        response
    }
    // A slower model than the default tiny one, so the work is still queued when the signal comes.
    let slow = tempfile::tempdir().unwrap();
    let spec = engine::model::tiny::TinySpec {
        hidden: 128,
        layers: 4,
        intermediate: 512,
        ..Default::default()
    };
    engine::model::tiny::write_tiny_bert(slow.path(), spec).unwrap();
    let gw = gateway(&slow, 1, GatewayConfig::default());
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
    let server = tokio::spawn(gw.clone().serve(listener, async {
        let _ = stopped.await;
    }));
    assert!(get_health(addr).await.starts_with("HTTP/1.1 200"));
    let texts: Vec<String> = (0..2000).map(|i| format!("the passage {i}")).collect();
    let body = json!({ "input": texts }).to_string();
    let mut conn = tokio::net::TcpStream::connect(addr).await.unwrap();
    let request = format!(
        "POST /v1/embeddings HTTP/1.1\r\nhost: x\r\ncontent-type: application/json\r\ncontent-length: {}\r\nconnection: close\r\n\r\n{body}",
        body.len()
    );
    conn.write_all(request.as_bytes()).await.unwrap();
    let deadline = Instant::now() + Duration::from_secs(10);
    while gw.loads()[0].outstanding_tokens() == 0 {
        if Instant::now() > deadline {
            let mut response = String::new();
            conn.read_to_string(&mut response).await.unwrap();
            panic!("the work never reached the queue: {response}");
        }
        tokio::time::sleep(Duration::from_millis(1)).await;
    }
    stop.send(()).unwrap();
    tokio::time::sleep(Duration::from_millis(5)).await;
    let draining = get_health(addr).await;
    assert!(draining.starts_with("HTTP/1.1 503"), "{draining}");
    assert!(
        draining.contains("\"error_type\":\"unhealthy\""),
        "{draining}"
    );
    let mut response = String::new();
    conn.read_to_string(&mut response).await.unwrap();
    assert!(
        response.starts_with("HTTP/1.1 200"),
        "the queued work finished"
    );
    tokio::time::timeout(Duration::from_secs(10), server)
        .await
        .expect("the server exits after draining")
        .unwrap()
        .unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn normalize_false_returns_the_pooled_vector_before_normalize() {
    let dir = model_dir();
    // The same model without its Normalize module: its output is the pooled vector.
    let pooled_dir = model_dir();
    let modules = pooled_dir.path().join("modules.json");
    let mut list: Vec<Value> =
        serde_json::from_str(&std::fs::read_to_string(&modules).unwrap()).unwrap();
    list.retain(|m| !m["type"].as_str().unwrap().ends_with("Normalize"));
    std::fs::write(&modules, serde_json::to_string(&list).unwrap()).unwrap();
    let pooled = embed(&engine(&pooled_dir, EngineConfig::default()), &TEXTS);
    let router = gateway(&dir, 1, GatewayConfig::default()).router();
    let raw = post(
        &router,
        "/embed",
        json!({ "inputs": TEXTS, "normalize": false }),
    )
    .await;
    let raw: Vec<Vec<f32>> = raw.body.as_array().unwrap().iter().map(floats).collect();
    for (got, want) in raw.iter().zip(&pooled) {
        let norm = want.iter().map(|x| x * x).sum::<f32>().sqrt();
        assert!(
            (norm - 1.0).abs() > 1e-3,
            "the pooled vector is not unit length"
        );
        for (a, b) in got.iter().zip(want) {
            assert!((a - b).abs() <= 1e-5 * norm, "{a} vs {b}");
        }
    }
    let cut = post(
        &router,
        "/embed",
        json!({ "inputs": TEXTS[0], "normalize": false, "dimensions": 8 }),
    )
    .await;
    assert_eq!(floats(&cut.body[0]), raw[0][..8]);
    // Normalized (the default) is what the model with its Normalize module gives, bit for bit.
    let unit = post(&router, "/embed", json!({ "inputs": TEXTS })).await;
    let unit: Vec<Vec<f32>> = unit.body.as_array().unwrap().iter().map(floats).collect();
    assert_eq!(unit, embed(&engine(&dir, EngineConfig::default()), &TEXTS));
}
