//! Output formats (`encoding_format` on OpenAI's and TEI's routes) and the routes beyond embedding: TEI's `POST /`,
//! `/embed_all`, `/similarity`, `/decode`, and OpenAI's `/v1/models`, with their refusals.

use super::*;

fn b64(v: &Value) -> Vec<u8> {
    base64::engine::general_purpose::STANDARD
        .decode(v.as_str().unwrap())
        .unwrap()
}

fn ints(v: &Value) -> Vec<i64> {
    v.as_array()
        .unwrap()
        .iter()
        .map(|x| x.as_i64().unwrap())
        .collect()
}

fn cosine(a: &[f32], b: &[f32]) -> f32 {
    let dot: f32 = a.iter().zip(b).map(|(x, y)| x * y).sum();
    let n = |v: &[f32]| v.iter().map(|x| x * x).sum::<f32>().sqrt();
    dot / (n(a) * n(b))
}

/// Each format against the float vectors it is made of, on both surfaces, `dimensions` applied first.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_format_encodes_the_float_vector_after_dimensions() {
    let dir = model_dir();
    let router = gateway(&dir, 1, GatewayConfig::default()).router();
    let dims = 20;
    let openai =
        |format: &str| json!({ "input": TEXTS, "encoding_format": format, "dimensions": dims });
    let float = vectors(&post(&router, "/v1/embeddings", openai("float")).await.body);
    let pooled = post(
        &router,
        "/embed",
        json!({ "inputs": TEXTS, "normalize": false, "dimensions": dims }),
    )
    .await;
    let pooled: Vec<Vec<f32>> = pooled.body.as_array().unwrap().iter().map(floats).collect();

    let int8 = post(&router, "/v1/embeddings", openai("int8")).await;
    assert_eq!(int8.status, StatusCode::OK, "{}", int8.body);
    for (d, p) in int8.body["data"].as_array().unwrap().iter().zip(&pooled) {
        // pplx-embed's int8: of the pooled vector, before Normalize.
        let want: Vec<i64> = p
            .iter()
            .map(|x| (127.0 * x.tanh()).round_ties_even() as i64)
            .collect();
        assert_eq!(ints(&d["embedding"]), want);
        assert!(d.get("scale").is_none());
    }

    let scaled = post(&router, "/v1/embeddings", openai("int8_scaled")).await;
    for (d, f) in scaled.body["data"].as_array().unwrap().iter().zip(&float) {
        let scale = d["scale"].as_f64().unwrap() as f32;
        let max = f.iter().fold(0.0f32, |m, x| m.max(x.abs()));
        assert!((scale - max / 127.0).abs() < 1e-7);
        let q = ints(&d["embedding"]);
        assert_eq!(q.len(), dims);
        assert!(q.iter().any(|x| x.abs() == 127));
        for (q, x) in q.iter().zip(f) {
            assert!((*q as f32 * scale - x).abs() <= scale / 2.0 + 1e-6);
        }
    }

    // Sign bits, most significant first; 20 dimensions take 3 bytes, the last half padding.
    let bits = |f: &[f32]| -> Vec<u8> {
        f.chunks(8)
            .map(|c| {
                c.iter()
                    .enumerate()
                    .fold(0, |b, (i, &x)| b | (u8::from(x > 0.0) << (7 - i)))
            })
            .collect()
    };
    let ubinary = post(&router, "/v1/embeddings", openai("ubinary")).await;
    let binary = post(&router, "/v1/embeddings", openai("binary")).await;
    for (i, f) in float.iter().enumerate() {
        let want = bits(f);
        assert_eq!(want.len(), 3);
        let u = ints(&ubinary.body["data"][i]["embedding"]);
        assert_eq!(u, want.iter().map(|&b| b as i64).collect::<Vec<_>>());
        let s = ints(&binary.body["data"][i]["embedding"]);
        assert_eq!(s, want.iter().map(|&b| b as i64 - 128).collect::<Vec<_>>());
    }

    // `_base64`: the same values' little-endian bytes.
    for (format, json_format) in [
        ("int8_base64", "int8"),
        ("binary_base64", "binary"),
        ("ubinary_base64", "ubinary"),
        ("int8_scaled_base64", "int8_scaled"),
    ] {
        let raw = post(&router, "/v1/embeddings", openai(format)).await;
        let numbers = post(&router, "/v1/embeddings", openai(json_format)).await;
        for (r, n) in raw.body["data"]
            .as_array()
            .unwrap()
            .iter()
            .zip(numbers.body["data"].as_array().unwrap())
        {
            let want: Vec<u8> = ints(&n["embedding"]).iter().map(|&x| x as u8).collect();
            assert_eq!(b64(&r["embedding"]), want, "{format}");
            assert_eq!(r.get("scale"), n.get("scale"), "{format}");
        }
    }

    // TEI's /embed takes the same names; int8_scaled answers objects, as a bare vector has no room for a scale.
    let tei = post(
        &router,
        "/embed",
        json!({ "inputs": TEXTS, "encoding_format": "ubinary", "dimensions": dims }),
    )
    .await;
    assert_eq!(tei.body[1], ubinary.body["data"][1]["embedding"]);
    let tei = post(
        &router,
        "/embed",
        json!({ "inputs": TEXTS, "encoding_format": "int8_scaled_base64", "dimensions": dims }),
    )
    .await;
    let raw = post(&router, "/v1/embeddings", openai("int8_scaled_base64")).await;
    assert_eq!(tei.body[2]["embedding"], raw.body["data"][2]["embedding"]);
    assert_eq!(tei.body[2]["scale"], raw.body["data"][2]["scale"]);
    let tei = post(
        &router,
        "/embed",
        json!({ "inputs": TEXTS, "encoding_format": "base64" }),
    )
    .await;
    let full = vectors(
        &post(&router, "/v1/embeddings", json!({ "input": TEXTS }))
            .await
            .body,
    );
    let got: Vec<f32> = b64(&tei.body[0])
        .chunks_exact(4)
        .map(|c| f32::from_le_bytes(c.try_into().unwrap()))
        .collect();
    assert_eq!(got, full[0]);

    for (path, body, code) in [
        (
            "/v1/embeddings",
            json!({ "input": "a", "encoding_format": "int4" }),
            "invalid_type",
        ),
        (
            "/embed",
            json!({ "inputs": "a", "encoding_format": "Float" }),
            "validation",
        ),
    ] {
        let r = post(&router, path, body).await;
        assert_eq!(error_code(&r, StatusCode::BAD_REQUEST), code);
        assert!(r.body.to_string().contains("int8_scaled"), "{}", r.body);
    }
}

/// `/embed_all`: one vector per token (special tokens included), unnormalized, whose mean is `/embed`'s
/// `normalize: false` vector (the tiny model mean-pools).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn embed_all_answers_every_tokens_state() {
    let dir = model_dir();
    let e = engine(&dir, EngineConfig::default());
    let router = gateway(&dir, 1, GatewayConfig::default()).router();
    let all = post(&router, "/embed_all", json!({ "inputs": TEXTS })).await;
    assert_eq!(all.status, StatusCode::OK, "{}", all.body);
    let pooled = post(
        &router,
        "/embed",
        json!({ "inputs": TEXTS, "normalize": false }),
    )
    .await;
    for (i, text) in TEXTS.iter().enumerate() {
        let tokens: Vec<Vec<f32>> = all.body[i].as_array().unwrap().iter().map(floats).collect();
        assert_eq!(tokens.len(), e.tokenize(text).unwrap().len());
        assert!(tokens.iter().all(|t| t.len() == e.dim()));
        let mean: Vec<f32> = (0..e.dim())
            .map(|j| tokens.iter().map(|t| t[j]).sum::<f32>() / tokens.len() as f32)
            .collect();
        let want = floats(&pooled.body[i]);
        for (a, b) in mean.iter().zip(&want) {
            assert!((a - b).abs() < 1e-5, "input {i}: {a} vs {b}");
        }
    }
    let ids = e.tokenize(TEXTS[0]).unwrap();
    let by_ids = post(&router, "/embed_all", json!({ "inputs": [ids] })).await;
    assert_eq!(by_ids.body[0], all.body[0]);
    let long = "a ".repeat(100);
    let r = post(&router, "/embed_all", json!({ "inputs": long })).await;
    assert_eq!(
        error_code(&r, StatusCode::UNPROCESSABLE_ENTITY),
        "validation"
    );
    let cut = post(
        &router,
        "/embed_all",
        json!({ "inputs": long, "truncate": true }),
    )
    .await;
    assert_eq!(cut.body[0].as_array().unwrap().len(), 48);
    let r = post(&router, "/embed_all", json!({ "inputs": [] })).await;
    assert_eq!(error_code(&r, StatusCode::BAD_REQUEST), "empty");
}

/// `/similarity` and `POST /`, which answers both an embedding request and a similarity one (what
/// `InferenceClient.feature_extraction` and `.sentence_similarity` send to the server's URL).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn similarity_and_the_root_route() {
    let dir = model_dir();
    let router = gateway(&dir, 1, GatewayConfig::default()).router();
    let embedded = post(&router, "/embed", json!({ "inputs": TEXTS })).await;
    let v: Vec<Vec<f32>> = embedded
        .body
        .as_array()
        .unwrap()
        .iter()
        .map(floats)
        .collect();
    let body = json!({
        "inputs": { "source_sentence": TEXTS[0], "sentences": [TEXTS[1], TEXTS[2]] },
        "parameters": {}
    });
    let sim = post(&router, "/similarity", body.clone()).await;
    assert_eq!(sim.status, StatusCode::OK, "{}", sim.body);
    let got = floats(&sim.body);
    assert_eq!(got.len(), 2);
    for (g, other) in got.iter().zip(&v[1..]) {
        assert!((g - cosine(&v[0], other)).abs() < 1e-5);
    }
    let root = post(&router, "/", body).await;
    assert_eq!(root.body, sim.body);
    let root = post(&router, "/", json!({ "inputs": TEXTS, "normalize": true })).await;
    assert_eq!(root.body, embedded.body);
    let health = send(&router, "GET", "/", Body::empty()).await;
    assert_eq!(health.status, StatusCode::OK);

    let cases = [
        (
            json!({ "inputs": { "source_sentence": "a", "sentences": [] } }),
            StatusCode::BAD_REQUEST,
            "empty",
        ),
        (
            json!({ "inputs": { "source_sentence": "", "sentences": ["a"] } }),
            StatusCode::BAD_REQUEST,
            "empty",
        ),
        (
            json!({ "inputs": { "source_sentence": "a" } }),
            StatusCode::BAD_REQUEST,
            "validation",
        ),
        (
            json!({ "inputs": { "source_sentence": "a", "sentences": ["b"], "more": 1 } }),
            StatusCode::BAD_REQUEST,
            "validation",
        ),
        (
            json!({ "inputs": { "source_sentence": "a ".repeat(100), "sentences": ["b"] } }),
            StatusCode::UNPROCESSABLE_ENTITY,
            "validation",
        ),
    ];
    for (body, status, code) in cases {
        for path in ["/similarity", "/"] {
            let r = post(&router, path, body.clone()).await;
            assert_eq!(error_code(&r, status), code, "{path} {body}");
        }
    }
    let r = post(&router, "/", json!({ "inputs": 3 })).await;
    assert_eq!(error_code(&r, StatusCode::BAD_REQUEST), "validation");
    let r = send(&router, "POST", "/", "{not json").await;
    assert_eq!(error_code(&r, StatusCode::BAD_REQUEST), "validation");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn decode_gives_the_text_of_ids() {
    let dir = model_dir();
    let e = engine(&dir, EngineConfig::default());
    let router = gateway(&dir, 1, GatewayConfig::default()).router();
    let ids = e.tokenize(TEXTS[0]).unwrap();
    let one = post(&router, "/decode", json!({ "ids": ids })).await;
    assert_eq!(one.status, StatusCode::OK, "{}", one.body);
    assert_eq!(one.body, json!([TEXTS[0]]));
    let both = post(
        &router,
        "/decode",
        json!({ "ids": [ids, e.tokenize(TEXTS[1]).unwrap()], "skip_special_tokens": false }),
    )
    .await;
    let first = both.body[0].as_str().unwrap();
    assert!(
        first.starts_with("[CLS]") && first.contains(TEXTS[0]),
        "{first}"
    );
    assert_eq!(both.body.as_array().unwrap().len(), 2);
    for (body, code) in [
        (json!({ "ids": [2, 999999] }), "validation"),
        (json!({ "ids": [] }), "empty"),
        (json!({ "ids": "text" }), "validation"),
        (json!({ "tokens": [1] }), "validation"),
    ] {
        let r = post(&router, "/decode", body.clone()).await;
        assert_eq!(error_code(&r, StatusCode::BAD_REQUEST), code, "{body}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn models_lists_the_served_names() {
    let dir = model_dir();
    let router = gateway(
        &dir,
        1,
        GatewayConfig {
            model_name: "served".into(),
            model_aliases: vec!["org/alias".into()],
            ..Default::default()
        },
    )
    .router();
    let list = send(&router, "GET", "/v1/models", Body::empty()).await;
    assert_eq!(list.status, StatusCode::OK);
    assert_eq!(list.body["object"], "list");
    let data = list.body["data"].as_array().unwrap();
    let ids: Vec<&str> = data.iter().map(|m| m["id"].as_str().unwrap()).collect();
    assert_eq!(ids, ["served", "org/alias"]);
    for m in data {
        assert_eq!(m["object"], "model");
        assert!(m["created"].as_u64().unwrap() > 1_600_000_000, "{m}");
        assert!(m["owned_by"].is_string());
    }
    let one = send(&router, "GET", "/v1/models/org/alias", Body::empty()).await;
    assert_eq!(one.status, StatusCode::OK);
    assert_eq!(one.body, data[1]);
    let unknown = send(&router, "GET", "/v1/models/gpt-4", Body::empty()).await;
    assert_eq!(
        error_code(&unknown, StatusCode::NOT_FOUND),
        "model_not_found"
    );
    let wrong = send(&router, "POST", "/v1/models", Body::empty()).await;
    assert_eq!(
        error_code(&wrong, StatusCode::METHOD_NOT_ALLOWED),
        "method_not_allowed"
    );
}

/// A model with sentence-transformers Dense modules after pooling (the fixture with EmbeddingGemma's head: 64 to
/// 256 to 48, then Normalize): embeddings at the last Dense module's width, normalized, the pooled-and-projected
/// vector back with `normalize: false`; its token states are refused with a 422, not answered in the wrong space.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn dense_models_embed_at_their_width_and_refuse_token_states() {
    let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests/fixtures/distilbert_dense_mean");
    let config = EngineConfig {
        threads: 1,
        ..EngineConfig::default()
    };
    let e = Engine::load(&dir, config).unwrap();
    assert_eq!(e.dim(), 48);
    let router = Gateway::new(vec![e], GatewayConfig::default())
        .unwrap()
        .router();
    let unit = post(&router, "/embed", json!({ "inputs": TEXTS })).await;
    assert_eq!(unit.status, StatusCode::OK, "{}", unit.body);
    let raw = post(
        &router,
        "/embed",
        json!({ "inputs": TEXTS, "normalize": false }),
    )
    .await;
    for i in 0..TEXTS.len() {
        let (u, r) = (floats(&unit.body[i]), floats(&raw.body[i]));
        assert_eq!((u.len(), r.len()), (48, 48));
        let norm = r.iter().map(|x| x * x).sum::<f32>().sqrt();
        assert!((u.iter().map(|x| x * x).sum::<f32>() - 1.0).abs() < 1e-5);
        assert!(
            (norm - 1.0).abs() > 1e-3,
            "the raw vector is the Dense output, not normalized"
        );
        for (a, b) in u.iter().zip(&r) {
            assert!(
                (a - b / norm).abs() < 1e-6,
                "input {i}: {a} vs {}",
                b / norm
            );
        }
    }
    let all = post(&router, "/embed_all", json!({ "inputs": TEXTS })).await;
    assert_eq!(
        error_code(&all, StatusCode::UNPROCESSABLE_ENTITY),
        "validation"
    );
}

/// A WordEmbeddings model (GloVe's kind: a word list, no tokenizer.json) embeds over HTTP as the engine does (TEI's
/// `normalize: false`: the model has no Normalize); the routes that need a tokenizer.json (`/tokenize`, `/decode`)
/// answer 422 in the one error shape, not 500.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_word_list_model_embeds_and_refuses_tokenize_and_decode() {
    let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/glove_mean");
    let config = EngineConfig {
        threads: 1,
        ..EngineConfig::default()
    };
    let e = Engine::load(&dir, config).unwrap();
    let want = embed(&e, &["a great film, the American people"]);
    let router = Gateway::new(vec![e], GatewayConfig::default())
        .unwrap()
        .router();
    let got = post(
        &router,
        "/embed",
        json!({ "inputs": "a great film, the American people", "normalize": false }),
    )
    .await;
    assert_eq!(got.status, StatusCode::OK, "{}", got.body);
    assert_eq!(floats(&got.body[0]), want[0]);
    for (path, body) in [
        ("/tokenize", json!({ "inputs": "the cat" })),
        ("/decode", json!({ "ids": [0, 1] })),
    ] {
        let reply = post(&router, path, body).await;
        // TEI's error type for a 422.
        assert_eq!(
            error_code(&reply, StatusCode::UNPROCESSABLE_ENTITY),
            "validation",
            "{path}"
        );
        let message = reply.body["error"].as_str().unwrap_or_default();
        assert!(message.contains("WhitespaceTokenizer"), "{path}: {message}");
    }
}
