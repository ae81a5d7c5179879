//! Sparse (SPLADE) models against sentence-transformers' SparseEncoder, on the tiny random-weight checkpoints
//! `scripts/make_sparse_fixtures.py` made: BertForMaskedLM with its decoder tied to the word embeddings (which
//! the checkpoint does not hold) and modules.json in sentence-transformers 5's names; DistilBertForMaskedLM with an
//! untied vocab projector and SpladePooling's `log1p_relu`; XLMRobertaForMaskedLM (RobertaLMHead). Each embedding is
//! one weight per vocabulary entry, the max over the tokens of log(1 + ReLU) of the MLM logits. mpnet_splade and
//! modernbert_splade read MPNetLMHead and ModernBertForMaskedLM's head (ModernBertPredictionHead with the config's
//! biases and activation, the decoder tied to the token embeddings with a bias of its own).
//! distilbert_router_splade is an inference-free SPLADE model: a Router whose document route (the default) is such
//! a model and whose query route a SparseStaticEmbedding, a weight per distinct token of the query.

mod common;

const MODELS: [&str; 6] = [
    "bert_splade",
    "distilbert_splade_log1p",
    "xlmr_splade",
    "mpnet_splade",
    "modernbert_splade",
    "distilbert_router_splade",
];

common::models::fixture_tests!(MODELS);

use common::http::{get, post, with_gateway};
use common::models::{copied, dir, edit_json, fixtures, load};
use engine::gateway::{Gateway, GatewayConfig};
use engine::tokenizer::TruncationSide;
use engine::{CaptureMode, Dtype, Engine, EngineConfig};
use serde_json::{json, Value};

/// The engine's embeddings of `texts`, off the runtime's threads.
fn embed(engine: &Engine, texts: &[String]) -> Vec<Vec<f32>> {
    std::thread::scope(|s| {
        s.spawn(|| {
            let texts: Vec<&str> = texts.iter().map(String::as_str).collect();
            engine.embed(&texts).expect("embed")
        })
        .join()
        .expect("join")
    })
}

/// An `/embed_sparse` answer's entries as (index, value) pairs.
fn entries(answer: &Value) -> Vec<(usize, f32)> {
    answer
        .as_array()
        .expect("entries")
        .iter()
        .map(|e| {
            let index = e["index"].as_u64().expect("index") as usize;
            (index, e["value"].as_f64().expect("value") as f32)
        })
        .collect()
}

/// `/embed_sparse` answers each input's entries that are not 0, by index, exactly the engine's; those are the
/// reference's (sentence-transformers') non-zero entries, but for values within float rounding of 0; a single
/// input gets a list of one, as TEI answers; `POST /` is `/embed_sparse` for a sparse model; `/info` says
/// `splade`; `/embed` with `normalize: false` gives the whole vector.
#[test]
fn embed_sparse_answers_the_engines_nonzero_entries() {
    for name in MODELS {
        // A server refuses an empty text (TEI's `empty` error), which sentence-transformers embeds.
        let mut fx = fixtures(name);
        fx.retain(|f| !f.text.is_empty());
        let texts: Vec<String> = fx.iter().map(|f| f.text.clone()).collect();
        with_gateway(name, async |router, engine| {
            let want = embed(&engine, &texts);
            let (status, got) = post(
                &router,
                "/embed_sparse",
                json!({ "inputs": texts, "truncate": true }),
            )
            .await;
            assert_eq!(status, 200, "{name}: {got}");
            let got = got.as_array().expect("one list per input");
            assert_eq!(got.len(), texts.len());
            for ((answer, dense), f) in got.iter().zip(&want).zip(&fx) {
                let nonzero: Vec<(usize, f32)> = dense
                    .iter()
                    .copied()
                    .enumerate()
                    .filter(|&(_, v)| v != 0.0)
                    .collect();
                let got = entries(answer);
                assert_eq!(got, nonzero, "{name}: {:?}", f.text);
                assert!(got.len() < dense.len(), "{name}: nothing is 0");
                for (i, (&mine, &theirs)) in dense.iter().zip(&f.embedding).enumerate() {
                    assert!(
                        (mine == 0.0) == (theirs == 0.0) || mine.abs().max(theirs.abs()) < 1e-5,
                        "{name} {:?}: entry {i} is {mine} here, {theirs} in sentence-transformers",
                        f.text
                    );
                }
            }
            let (status, one) = post(
                &router,
                "/embed_sparse",
                json!({ "inputs": texts[0], "truncate": true }),
            )
            .await;
            assert_eq!(status, 200, "{one}");
            assert_eq!(entries(&one[0]), entries(&got[0]), "{name}: a single input");
            let (status, root) = post(
                &router,
                "/",
                json!({ "inputs": [texts[1]], "truncate": true }),
            )
            .await;
            assert_eq!(status, 200, "{root}");
            assert_eq!(entries(&root[0]), entries(&got[1]), "{name}: POST /");
            let (status, info) = get(&router, "/info").await;
            assert_eq!(status, 200);
            assert_eq!(
                info["model_type"],
                json!({ "embedding": { "pooling": "splade" } })
            );
            let (status, whole) = post(
                &router,
                "/embed",
                json!({ "inputs": [texts[2]], "normalize": false, "truncate": true }),
            )
            .await;
            assert_eq!(status, 200, "{whole}");
            let whole: Vec<f32> = whole[0]
                .as_array()
                .expect("a vector")
                .iter()
                .map(|v| v.as_f64().expect("a number") as f32)
                .collect();
            assert_eq!(whole, want[2], "{name}: /embed with normalize false");
        });
    }
}

/// A sparse model has no dense embedding: OpenAI's route, TEI's `/embed` normalizing (its default),
/// `/embed_all` and `/similarity` refuse it in their error shapes; a dense model and a cross-encoder refuse
/// `/embed_sparse`.
#[test]
fn dense_routes_refuse_a_sparse_model_and_embed_sparse_a_dense_one() {
    with_gateway("bert_splade", async |router, _| {
        for (path, body) in [
            ("/v1/embeddings", json!({ "input": "a text" })),
            ("/embed", json!({ "inputs": "a text" })),
            ("/embed_all", json!({ "inputs": "a text" })),
            (
                "/similarity",
                json!({ "inputs": { "source_sentence": "a", "sentences": ["b"] } }),
            ),
        ] {
            let (status, body) = post(&router, path, body).await;
            assert_eq!(status, 422, "{path}: {body}");
            let (code, message) = match path {
                "/v1/embeddings" => (&body["error"]["code"], &body["error"]["message"]),
                _ => (&json!("wrong_model_type"), &body["error"]),
            };
            assert_eq!(code, "wrong_model_type", "{path}: {body}");
            let message = message.as_str().expect("a message");
            assert!(message.contains("sparse (SPLADE) model"), "{path}: {body}");
        }
    });
    for name in ["bert_max", "bert_cross_encoder"] {
        with_gateway(name, async |router, _| {
            let (status, body) = post(&router, "/embed_sparse", json!({ "inputs": "a" })).await;
            assert_eq!(status, 422, "{name}: {body}");
            let message = body["error"].as_str().expect("a message");
            assert!(
                message.contains("/embed_sparse needs a sparse model"),
                "{name}: {body}"
            );
            let (_, info) = get(&router, "/info").await;
            assert_ne!(info["model_type"]["embedding"]["pooling"], "splade");
        });
    }
}

/// What the engine does not run is refused at load, naming it: SpladePooling's sum, an activation it does not
/// know, a module after SpladePooling, and an MLM head it does not read.
#[test]
fn a_sparse_encoder_it_cannot_run_is_refused_naming_why() {
    let edits: [(&str, &str, Value, &str); 4] = [
        (
            "1_SpladePooling/config.json",
            "",
            json!({ "pooling_strategy": "sum", "activation_function": "relu" }),
            "pooling_strategy \"sum\"",
        ),
        (
            "1_SpladePooling/config.json",
            "",
            json!({ "pooling_strategy": "max", "activation_function": "gelu" }),
            "activation_function \"gelu\"",
        ),
        (
            "modules.json",
            "",
            json!([
                { "idx": 0, "name": "0", "path": "", "type": "sentence_transformers.sparse_encoder.models.MLMTransformer" },
                { "idx": 1, "name": "1", "path": "1_SpladePooling", "type": "sentence_transformers.sparse_encoder.models.SpladePooling" },
                { "idx": 2, "name": "2", "path": "2_Normalize", "type": "sentence_transformers.models.Normalize" }
            ]),
            "\"Normalize\" after SpladePooling",
        ),
        (
            "config.json",
            "model_type",
            json!("electra"),
            "SparseEncoder over Electra",
        ),
    ];
    for (file, key, value, says) in edits {
        let tmp = copied("bert_splade");
        edit_json(&tmp.path().join(file), |config| match key {
            "" => *config = value,
            key => {
                config[key] = value;
                config["architectures"] = json!([]);
            }
        });
        let Err(e) = Engine::load(tmp.path(), Default::default()) else {
            panic!("{file} edited to {says:?}: loaded");
        };
        assert!(e.to_string().contains(says), "{says}: {e}");
    }
    // The fixture itself loads: the refusals are the edits'.
    load("bert_splade", Dtype::F32, CaptureMode::Off);
    assert!(dir("bert_splade").join("1_SpladePooling").is_dir());
}

/// A sparse model's FLOPs per token count its head, which runs over every token: the transform (hidden²) and the
/// vocabulary projection (hidden × vocabulary), a multiply-add each.
#[test]
fn a_sparse_models_flops_count_its_head_over_every_token() {
    let engine = load("bert_splade", Dtype::F32, CaptureMode::Off);
    let info = engine.info();
    let head = info.flops_per_token(16) - info.config.flops_per_token(16);
    assert_eq!(head, 2.0 * 64.0 * (64.0 + 4200.0));
    let dense = load("bert_max", Dtype::F32, CaptureMode::Off);
    let info = dense.info();
    assert_eq!(info.flops_per_token(16), info.config.flops_per_token(16));
}

/// `max_active_dims` in `config_sentence_transformers.json` keeps each embedding's largest weights, as
/// sentence-transformers' SparseEncoder applies it by default (`select_max_active_dims`: the top k by magnitude);
/// `--max-active-dims` replaces the file's; `/embed_sparse` answers at most that many entries; 0 is refused, and so
/// is the flag for a dense model.
#[test]
fn max_active_dims_keeps_each_embeddings_largest_weights() {
    let tmp = copied("bert_splade");
    let st_path = tmp.path().join("config_sentence_transformers.json");
    let set_file = |k: Value| edit_json(&st_path, |st| st["max_active_dims"] = k);
    let fx: Vec<_> = fixtures("bert_splade")
        .into_iter()
        .filter(|f| !f.text.is_empty())
        .collect();
    let texts: Vec<String> = fx.iter().map(|f| f.text.clone()).collect();
    let config = |k: Option<usize>| EngineConfig {
        threads: 2,
        max_active_dims: k,
        ..Default::default()
    };
    for (file, flag, k) in [(5, None, 5), (5, Some(9), 9)] {
        set_file(json!(file));
        let engine = Engine::load(tmp.path(), config(flag)).expect("load");
        assert_eq!(engine.info().max_active_dims, Some(k));
        let got = embed(&engine, &texts);
        let mut pruned = 0;
        for (row, f) in got.iter().zip(&fx) {
            // The reference's k largest weights (sentence-transformers' rule), the rest 0.
            let mut order: Vec<usize> = (0..f.embedding.len()).collect();
            order.sort_by(|&a, &b| f.embedding[b].abs().total_cmp(&f.embedding[a].abs()));
            let active = f.embedding.iter().filter(|v| **v != 0.0).count();
            pruned += usize::from(active > k);
            let kept: std::collections::BTreeSet<usize> =
                order[..k.min(active)].iter().copied().collect();
            for (i, (&mine, &theirs)) in row.iter().zip(&f.embedding).enumerate() {
                let want = if kept.contains(&i) { theirs } else { 0.0 };
                assert!(
                    (mine - want).abs() <= 1e-5,
                    "k {k}, {:?}, entry {i}: {mine} vs {want}",
                    f.text
                );
            }
            assert!(row.iter().filter(|v| **v != 0.0).count() <= k);
        }
        assert!(pruned > 0, "k {k}: no text had more active dims than k");
        let served = Engine::load(tmp.path(), config(flag)).expect("load");
        let runtime = tokio::runtime::Runtime::new().expect("runtime");
        runtime.block_on(async {
            let gateway = Gateway::new(vec![served], GatewayConfig::default()).expect("gateway");
            let (status, got) = post(
                &gateway.router(),
                "/embed_sparse",
                json!({ "inputs": texts, "truncate": true }),
            )
            .await;
            assert_eq!(status, 200, "{got}");
            for answer in got.as_array().expect("lists") {
                assert!(entries(answer).len() <= k, "{answer}");
            }
        });
    }
    set_file(json!(0));
    let Err(e) = Engine::load(tmp.path(), config(None)) else {
        panic!("max_active_dims 0 loaded");
    };
    assert!(e.to_string().contains("max_active_dims 0"), "{e}");
    let Err(e) = Engine::load(dir("bert_max"), config(Some(4))) else {
        panic!("a dense model took --max-active-dims");
    };
    assert!(e.to_string().contains("only a sparse model"), "{e}");
    let Err(e) = Engine::load(dir("bert_splade"), config(Some(0))) else {
        panic!("--max-active-dims 0 loaded");
    };
    assert!(e.to_string().contains("max_active_dims"), "{e}");
}

/// The query route's reference (sentence-transformers' `encode_query`).
fn query_fixtures() -> Vec<common::Fixture> {
    common::read(
        &dir("distilbert_router_splade").join("query_reference.jsonl"),
        "embedding",
    )
}

/// A Router model's query route, named as the request's `prompt_name` (as `encode_query` names the task and the
/// prompt), answers each distinct token's weight, exactly sentence-transformers' `encode_query`, from the route's
/// own tokenizer (no special tokens); naming the document route, or none, is the engine's forward pass
/// (`encode_document`); token ids are looked up as they are; a text of whitespace alone is all 0; a query over the
/// route's limit is refused unless `truncate`, and cut from the side asked.
#[test]
fn a_routers_query_route_is_looked_up_and_its_document_route_run() {
    let name = "distilbert_router_splade";
    let fx = query_fixtures();
    let docs = fixtures(name);
    with_gateway(name, async |router, engine| {
        assert_eq!(engine.info().routes, ["document", "query"]);
        let lookup = engine
            .front()
            .lookup(Some("query"))
            .expect("a lookup route");
        for f in &fx {
            let (ids, _) = lookup
                .encode(&f.text, TruncationSide::Right)
                .expect("encode");
            assert_eq!(ids, f.ids, "{:?}", f.text);
            assert_eq!(lookup.embed(&ids), f.embedding, "{:?}", f.text);
        }
        let texts: Vec<&str> = fx
            .iter()
            .map(|f| f.text.as_str())
            .filter(|t| !t.is_empty())
            .collect();
        let body = |route: Option<&str>| json!({ "inputs": texts, "truncate": true, "prompt_name": route });
        let (status, queries) = post(&router, "/embed_sparse", body(Some("query"))).await;
        assert_eq!(status, 200, "{queries}");
        let (status, default) = post(&router, "/embed_sparse", body(None)).await;
        assert_eq!(status, 200, "{default}");
        let (status, documents) = post(&router, "/embed_sparse", body(Some("document"))).await;
        assert_eq!(status, 200, "{documents}");
        assert_eq!(documents, default, "the document route is the default");
        for (i, text) in texts.iter().enumerate() {
            let want = |fx: &[common::Fixture]| -> Vec<(usize, f32)> {
                let f = fx.iter().find(|f| f.text == *text).expect("a reference");
                f.embedding
                    .iter()
                    .copied()
                    .enumerate()
                    .filter(|&(_, v)| v != 0.0)
                    .collect()
            };
            assert_eq!(entries(&queries[i]), want(&fx), "query {text:?}");
            let got = entries(&documents[i]);
            let doc = want(&docs);
            assert_eq!(got.len(), doc.len(), "document {text:?}");
            for ((gi, gv), (wi, wv)) in got.iter().zip(&doc) {
                assert!(
                    gi == wi && (gv - wv).abs() <= 1e-5,
                    "document {text:?}: {gi} {gv} vs {wi} {wv}"
                );
            }
        }
        // Ids as they are; whitespace alone (no tokens without special ones) all 0.
        let ids = &fx.iter().find(|f| f.ids.len() > 3).expect("a query").ids;
        let (status, by_ids) = post(
            &router,
            "/embed_sparse",
            json!({ "inputs": [ids], "prompt_name": "query" }),
        )
        .await;
        assert_eq!(status, 200, "{by_ids}");
        let f = fx.iter().find(|f| &f.ids == ids).expect("its text");
        let nonzero = f.embedding.iter().filter(|v| **v != 0.0).count();
        assert_eq!(entries(&by_ids[0]).len(), nonzero);
        let (status, blank) = post(
            &router,
            "/embed_sparse",
            json!({ "inputs": "   ", "prompt_name": "query" }),
        )
        .await;
        assert_eq!((status, blank), (axum::http::StatusCode::OK, json!([[]])));
        // Over the limit (48 tokens): refused, or cut from the side asked.
        // One token repeated, then other tokens: each side's cut keeps other weights.
        let long = format!("{}{}", "a ".repeat(50), fx[0].text);
        let ask = |extra: Value| {
            let mut body = json!({ "inputs": [long], "prompt_name": "query" });
            body.as_object_mut()
                .expect("object")
                .extend(extra.as_object().expect("object").clone());
            body
        };
        let (status, refused) =
            post(&router, "/embed_sparse", ask(json!({ "truncate": false }))).await;
        assert_eq!(status, 422, "{refused}");
        assert!(
            refused["error"]
                .as_str()
                .expect("message")
                .contains("limit of 48"),
            "{refused}"
        );
        let (_, right) = post(&router, "/embed_sparse", ask(json!({ "truncate": true }))).await;
        let (_, left) = post(
            &router,
            "/embed_sparse",
            ask(json!({ "truncate": true, "truncation_direction": "Left" })),
        )
        .await;
        // The route's tokenizer uncut: the ids each side's cut keeps 48 of.
        let uncut = engine::tokenizer::load(
            &dir(name).join("query_0_SparseStaticEmbedding/tokenizer.json"),
            engine::tokenizer::TokenizerKind::Hf,
            None,
            false,
        )
        .expect("tokenizer");
        let mut full = Vec::new();
        uncut.encode(&long, &mut full).expect("encode");
        assert!(full.len() > 48);
        for (answer, kept) in [(&right, &full[..48]), (&left, &full[full.len() - 48..])] {
            let want: Vec<(usize, f32)> = lookup
                .embed(kept)
                .into_iter()
                .enumerate()
                .filter(|&(_, v)| v != 0.0)
                .collect();
            assert_eq!(entries(&answer[0]), want);
        }
        assert_ne!(right, left);
    });
}

/// What a Router model is served as is read from its files or refused naming why: route_mappings, a default route
/// that is not the Transformer's, a route of other modules, a module after the Router, a table of the wrong size.
#[test]
fn a_router_it_cannot_serve_is_refused_naming_why() {
    let name = "distilbert_router_splade";
    // A file, its edit, and what the refusal says.
    type Case = (&'static str, fn(&mut Value), &'static str);
    let cases: [Case; 4] = [
        (
            "router_config.json",
            |v| v["parameters"]["route_mappings"] = json!({ "('query', None)": "query" }),
            "route_mappings",
        ),
        (
            "router_config.json",
            |v| v["parameters"]["default_route"] = json!("query"),
            "default route \"query\"",
        ),
        (
            "router_config.json",
            |v| v["structure"]["query"] = json!(["document_1_SpladePooling"]),
            "unsupported route \"query\"",
        ),
        (
            "modules.json",
            |v| {
                v.as_array_mut().expect("list").push(json!({
                    "idx": 1, "name": "1", "path": "1_Normalize",
                    "type": "sentence_transformers.models.Normalize"
                }))
            },
            "\"Normalize\" after a Router",
        ),
    ];
    for (file, change, says) in cases {
        let tmp = copied(name);
        edit_json(&tmp.path().join(file), change);
        let Err(e) = Engine::load(tmp.path(), Default::default()) else {
            panic!("{file} edited ({says}): loaded");
        };
        assert!(e.to_string().contains(says), "{says}: {e}");
    }
    let tmp = copied(name);
    let table = tmp
        .path()
        .join("query_0_SparseStaticEmbedding/model.safetensors");
    let short = safetensors::serialize(
        [(
            "weight",
            safetensors::tensor::TensorView::new(safetensors::Dtype::F32, vec![3], &[0u8; 12])
                .expect("view"),
        )],
        None,
    )
    .expect("serialize");
    std::fs::write(table, short).expect("write");
    let Err(e) = Engine::load(tmp.path(), Default::default()) else {
        panic!("a table of 3 weights loaded");
    };
    assert!(e.to_string().contains("has shape Some([3])"), "{e}");
    // No default route, the query route first in the file: that one would be the default, which is refused.
    let tmp = copied(name);
    std::fs::write(
        tmp.path().join("router_config.json"),
        router_config(&["query", "document"]),
    )
    .expect("write");
    let Err(e) = Engine::load(tmp.path(), Default::default()) else {
        panic!("the query route as the default loaded");
    };
    assert!(e.to_string().contains("default route \"query\""), "{e}");
}

/// The fixture's `router_config.json` with its routes in `order` and no default route.
fn router_config(order: &[&str]) -> String {
    let modules = |route: &str| match route {
        "query" => r#"["query_0_SparseStaticEmbedding"]"#,
        _ => r#"["document_0_Transformer", "document_1_SpladePooling"]"#,
    };
    let structure: Vec<String> = order
        .iter()
        .map(|r| format!("\"{r}\": {}", modules(r)))
        .collect();
    format!(
        r#"{{"types": {{
            "query_0_SparseStaticEmbedding": "sentence_transformers.sparse_encoder.modules.sparse_static_embedding.SparseStaticEmbedding",
            "document_0_Transformer": "sentence_transformers.base.modules.transformer.Transformer",
            "document_1_SpladePooling": "sentence_transformers.sparse_encoder.modules.splade_pooling.SpladePooling"}},
          "structure": {{{}}},
          "parameters": {{"default_route": null, "allow_empty_key": true}}}}"#,
        structure.join(", ")
    )
}

/// A Router's routes as sentence-transformers' SparseEncoder resolves them: a route named takes no default prompt
/// (a SparseEncoder always has prompts `query` and `document`, of no text, which `encode_query` and
/// `encode_document` name), while a request naming none gets the server's default; a Router without a
/// `default_route` takes its first route; `max_active_dims` prunes the looked-up vectors too.
#[test]
fn a_routers_routes_resolve_as_sentence_transformers_does() {
    let name = "distilbert_router_splade";
    let tmp = copied(name);
    edit_json(&tmp.path().join("config_sentence_transformers.json"), |c| {
        c["prompts"] = json!({ "hint": "passage: " });
        c["default_prompt_name"] = json!("hint");
        c["max_active_dims"] = json!(3);
    });
    // No default route: the file's first, written here as text (a JSON map re-serialized loses its order).
    std::fs::write(
        tmp.path().join("router_config.json"),
        router_config(&["document", "query"]),
    )
    .expect("write");
    let queries = query_fixtures();
    let docs = fixtures(name);
    let text = &queries
        .iter()
        .find(|f| f.ids.len() > 5)
        .expect("a query")
        .text;
    let top = |f: &[common::Fixture], k: usize| -> Vec<(usize, f32)> {
        let row = &f
            .iter()
            .find(|f| &f.text == text)
            .expect("reference")
            .embedding;
        let mut order: Vec<usize> = (0..row.len()).filter(|&i| row[i] != 0.0).collect();
        order.sort_by(|&a, &b| row[b].abs().total_cmp(&row[a].abs()));
        order.truncate(k);
        order.sort();
        order.into_iter().map(|i| (i, row[i])).collect()
    };
    let runtime = tokio::runtime::Runtime::new().expect("runtime");
    runtime.block_on(async {
        let served = Engine::load(tmp.path(), Default::default()).expect("load");
        assert_eq!(served.info().routes, ["document", "query"]);
        let gateway = Gateway::new(vec![served], GatewayConfig::default()).expect("gateway");
        let router = gateway.router();
        let ask = |route: Option<&str>| json!({ "inputs": [text], "prompt_name": route });
        let (status, query) = post(&router, "/embed_sparse", ask(Some("query"))).await;
        assert_eq!(status, 200, "{query}");
        assert_eq!(entries(&query[0]), top(&queries, 3));
        let (_, document) = post(&router, "/embed_sparse", ask(Some("document"))).await;
        let got = entries(&document[0]);
        let want = top(&docs, 3);
        assert_eq!(got.len(), 3);
        for ((gi, gv), (wi, wv)) in got.iter().zip(&want) {
            assert!(gi == wi && (gv - wv).abs() <= 1e-5, "{got:?} vs {want:?}");
        }
        // No route named: the default route, with the default prompt before the text.
        let (_, default) = post(&router, "/embed_sparse", ask(None)).await;
        assert_ne!(
            default, document,
            "the default prompt was put before the text"
        );
        let (_, hinted) = post(
            &router,
            "/embed_sparse",
            json!({ "inputs": [format!("passage: {text}")], "prompt_name": "document" }),
        )
        .await;
        assert_eq!(default, hinted);
    });
}
