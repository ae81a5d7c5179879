//! Every refusal a client can meet, with its status and the one error body: bad input on each route, a missing or
//! wrong API key, a server shutting down.

use super::*;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bad_input_gets_the_right_status_and_one_error_shape() {
    let dir = model_dir();
    let gw = gateway(
        &dir,
        1,
        GatewayConfig {
            max_client_batch: 4,
            max_payload_bytes: 1024,
            ..Default::default()
        },
    );
    let router = gw.router();
    let long = "a ".repeat(100);
    let cases: Vec<(&str, Body, StatusCode, &str)> = vec![
        (
            "/v1/embeddings",
            "{not json".into(),
            StatusCode::BAD_REQUEST,
            "invalid_json",
        ),
        ("/embed", "".into(), StatusCode::BAD_REQUEST, "validation"),
        (
            "/v1/embeddings",
            Body::from(b"{\"input\": \"\xff\xfe\"}".to_vec()),
            StatusCode::BAD_REQUEST,
            "invalid_utf8",
        ),
        (
            "/v1/embeddings",
            json!({ "input": 5 }).to_string().into(),
            StatusCode::BAD_REQUEST,
            "invalid_type",
        ),
        (
            "/v1/embeddings",
            json!({ "input": [1, "a"] }).to_string().into(),
            StatusCode::BAD_REQUEST,
            "invalid_type",
        ),
        (
            "/v1/embeddings",
            json!({ "inputs": "a" }).to_string().into(),
            StatusCode::BAD_REQUEST,
            "invalid_type",
        ),
        (
            "/embed",
            json!({ "inputs": "a", "normalize": "yes" })
                .to_string()
                .into(),
            StatusCode::BAD_REQUEST,
            "validation",
        ),
        (
            "/v1/embeddings",
            json!({ "input": "a", "encoding_format": "int4" })
                .to_string()
                .into(),
            StatusCode::BAD_REQUEST,
            "invalid_type",
        ),
        (
            "/v1/embeddings",
            json!({ "input": [] }).to_string().into(),
            StatusCode::BAD_REQUEST,
            "empty_input",
        ),
        (
            "/embed",
            json!({ "inputs": [] }).to_string().into(),
            StatusCode::BAD_REQUEST,
            "empty",
        ),
        (
            "/v1/embeddings",
            json!({ "input": "" }).to_string().into(),
            StatusCode::BAD_REQUEST,
            "empty_input",
        ),
        (
            "/embed",
            json!({ "inputs": ["a", ""] }).to_string().into(),
            StatusCode::BAD_REQUEST,
            "empty",
        ),
        (
            "/v1/embeddings",
            json!({ "input": [[]] }).to_string().into(),
            StatusCode::BAD_REQUEST,
            "empty_input",
        ),
        (
            "/v1/embeddings",
            json!({ "input": [2, 999999, 3] }).to_string().into(),
            StatusCode::BAD_REQUEST,
            "invalid_token_id",
        ),
        (
            "/v1/embeddings",
            json!({ "input": "a", "dimensions": 0 }).to_string().into(),
            StatusCode::BAD_REQUEST,
            "invalid_dimensions",
        ),
        (
            "/v1/embeddings",
            json!({ "input": "a", "dimensions": 33 }).to_string().into(),
            StatusCode::BAD_REQUEST,
            "invalid_dimensions",
        ),
        (
            "/embed",
            json!({ "inputs": "a", "prompt_name": "nope" })
                .to_string()
                .into(),
            StatusCode::BAD_REQUEST,
            "validation",
        ),
        (
            "/v1/embeddings",
            json!({ "input": vec!["a"; 5] }).to_string().into(),
            StatusCode::PAYLOAD_TOO_LARGE,
            "too_many_inputs",
        ),
        (
            "/embed",
            json!({ "inputs": "a".repeat(2000) }).to_string().into(),
            StatusCode::PAYLOAD_TOO_LARGE,
            "validation",
        ),
        (
            "/v1/embeddings",
            json!({ "input": long }).to_string().into(),
            StatusCode::BAD_REQUEST,
            "input_too_long",
        ),
        (
            "/embed",
            json!({ "inputs": long, "truncate": false })
                .to_string()
                .into(),
            StatusCode::UNPROCESSABLE_ENTITY,
            "validation",
        ),
        (
            "/tokenize",
            json!({ "inputs": long }).to_string().into(),
            StatusCode::UNPROCESSABLE_ENTITY,
            "validation",
        ),
    ];
    for (path, body, status, code) in cases {
        let r = send(&router, "POST", path, body).await;
        assert_eq!(error_code(&r, status), code, "{path}: {}", r.body);
    }
    assert_eq!(
        gw.loads()[0].batches,
        0,
        "no refused request reached the engine"
    );

    // Truncation on: over-limit input is cut to the model's limit, keeping its special tokens, from either side.
    let right = post(
        &router,
        "/tokenize",
        json!({ "inputs": format!("{long} b"), "truncate": true }),
    )
    .await;
    let left = post(
        &router,
        "/tokenize",
        json!({ "inputs": format!("{long} b"), "truncate": true, "truncation_direction": "Left" }),
    )
    .await;
    let (right, left) = (token_ids(&right.body[0]), token_ids(&left.body[0]));
    assert_eq!(right.len(), 48);
    assert_eq!(left.len(), 48);
    assert_eq!((right[0], right[47]), (left[0], left[47]));
    assert_ne!(right, left, "the left cut keeps the tail (`b`)");
    // Regression: the left cut was made by hand (first id + last 47), assuming one special token at each end;
    // it is now the tokenizer's own left truncation.
    let own_left = engine::tokenizer::load(
        &dir.path().join("tokenizer.json"),
        engine::tokenizer::TokenizerKind::Hf,
        Some(engine::tokenizer::Truncation {
            max_length: 48,
            side: engine::tokenizer::TruncationSide::Left,
        }),
        true,
    )
    .unwrap();
    let mut ids = Vec::new();
    own_left.encode(&format!("{long} b"), &mut ids).unwrap();
    assert_eq!(left, ids);
    let embedded = post(
        &router,
        "/embed",
        json!({ "inputs": long, "truncate": true }),
    )
    .await;
    assert_eq!(embedded.status, StatusCode::OK);
}

/// Regression: a client's token ids over the limit were cut keeping their first and last ids, as if every
/// tokenizer put one special token at each end: a decoder's (Qwen3's end of text after the text, Llama's begin of
/// text before it) then kept a text token in a special token's place. They are now cut as the tokenizer cuts the
/// text itself: its own special tokens kept, from either side.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn client_ids_over_the_limit_are_cut_as_the_tokenizer_cuts_the_text() {
    let fixtures = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures");
    let tiny = model_dir();
    let text =
        "the quick brown fox jumps over the lazy dog again and again, until the end of it all";
    // Each at 9 tokens, and at its special tokens alone (the text's ids all cut).
    for (dir, max) in [
        (tiny.path().to_owned(), 9),
        (tiny.path().to_owned(), 2),
        (fixtures.join("qwen3_causal"), 9),
        (fixtures.join("qwen3_causal"), 1),
        (fixtures.join("llama_last"), 9),
        (fixtures.join("llama_last"), 2),
    ] {
        let config = EngineConfig {
            threads: 1,
            max_seq_length: Some(max),
            ..Default::default()
        };
        let gw = Gateway::new(
            vec![Engine::load(&dir, config).unwrap()],
            GatewayConfig::default(),
        )
        .unwrap();
        let router = gw.router();
        let tokenizer = engine::tokenizer::load(
            &dir.join("tokenizer.json"),
            engine::tokenizer::TokenizerKind::Hf,
            None,
            true,
        )
        .unwrap();
        let mut ids = Vec::new();
        tokenizer.encode(text, &mut ids).unwrap();
        assert!(ids.len() > 12, "{}: {} ids", dir.display(), ids.len());
        for direction in ["Right", "Left"] {
            let embed = |inputs: Value| {
                post(
                    &router,
                    "/embed",
                    json!({ "inputs": inputs, "truncate": true, "truncation_direction": direction }),
                )
            };
            let (by_ids, by_text) = (embed(json!([ids])).await, embed(json!(text)).await);
            assert_eq!(by_ids.status, StatusCode::OK, "{}", by_ids.body);
            assert_eq!(
                floats(&by_ids.body[0]),
                floats(&by_text.body[0]),
                "{} cut to {max} from the {direction}",
                dir.display()
            );
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn api_key_and_shutting_down() {
    let dir = model_dir();
    let gw = gateway(
        &dir,
        1,
        GatewayConfig {
            api_key: Some("sesame".into()),
            ..Default::default()
        },
    );
    let router = gw.router();
    let body = json!({ "input": "a" }).to_string();
    let req = || Request::builder().method("POST").uri("/v1/embeddings");
    let none = send_with(&router, req(), body.clone()).await;
    assert_eq!(
        error_code(&none, StatusCode::UNAUTHORIZED),
        "invalid_api_key"
    );
    let wrong = send_with(
        &router,
        req().header("authorization", "Bearer sesamf"),
        body.clone(),
    )
    .await;
    assert_eq!(
        error_code(&wrong, StatusCode::UNAUTHORIZED),
        "invalid_api_key"
    );
    let right = send_with(
        &router,
        req().header("authorization", "Bearer sesame"),
        body.clone(),
    )
    .await;
    assert_eq!(right.status, StatusCode::OK);
    let metrics = send(&router, "GET", "/metrics", Body::empty()).await;
    assert_eq!(metrics.status, StatusCode::UNAUTHORIZED);
    assert_eq!(
        send(&router, "GET", "/health", Body::empty()).await.status,
        StatusCode::OK
    );

    gw.begin_shutdown();
    let late = send_with(
        &router,
        req().header("authorization", "Bearer sesame"),
        body,
    )
    .await;
    assert_eq!(
        error_code(&late, StatusCode::SERVICE_UNAVAILABLE),
        "shutting_down"
    );
    let health = send(&router, "GET", "/health", Body::empty()).await;
    assert_eq!(
        error_code(&health, StatusCode::SERVICE_UNAVAILABLE),
        "unhealthy"
    );
}
