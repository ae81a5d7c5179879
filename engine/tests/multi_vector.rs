//! Multi-vector (late-interaction, ColBERT) models against sentence-transformers 6's MultiVectorEncoder, on the
//! tiny random-weight checkpoints `scripts/make_colbert_fixtures.py` made: bert_colbert (a native save: `[Q] ` and
//! `[D] ` prompts, a fixed query expansion of 16 that no token attends to, documents cut at 40, a token-level Dense
//! and Normalize, the punctuation skiplist on documents) and modernbert_colbert_pylate (a PyLate 3 save: its
//! prefixes, lengths and expansion at the top of `config_sentence_transformers.json`, modules Transformer and
//! Dense only, over ModernBERT's global and sliding-window layers). Each task's reference is
//! `encode_query` / `encode_document` of the fixture texts: the ids the encoder ran, the positions whose vectors
//! were kept, and those vectors.

mod common;

use common::models::{dir, load};
use engine::multi_vector::Task;
use engine::{CaptureMode, Dtype, Engine};

const MODELS: [&str; 3] = [
    "bert_colbert",
    "modernbert_colbert_pylate",
    "bert_colbert_unused",
];
const TASKS: [(&str, Task); 2] = [("query", Task::Query), ("document", Task::Document)];

/// One text's reference: the ids the encoder ran, the positions whose vectors were kept, and those vectors.
struct Reference {
    text: String,
    ids: Vec<u32>,
    kept: Vec<usize>,
    vectors: Vec<f32>,
}

/// The reference of `model`'s `task`.
fn reference(model: &str, task: &str) -> Vec<Reference> {
    let path = dir(model).join(format!("{task}_reference.jsonl"));
    common::read(&path, "vectors")
        .into_iter()
        .map(|f| {
            let kept = f.record["kept"].as_array().expect("kept").iter();
            Reference {
                kept: kept.map(|k| k.as_u64().expect("index") as usize).collect(),
                text: f.text,
                ids: f.ids,
                vectors: f.embedding,
            }
        })
        .collect()
}

/// The fixture texts a server takes: all but the empty one (TEI's `empty` error), which sentence-transformers
/// embeds.
fn served_texts(model: &str) -> Vec<String> {
    let texts = reference(model, "document").into_iter().map(|f| f.text);
    texts.filter(|t| !t.is_empty()).collect()
}

/// The engine's vectors of `texts` as `task`, off any runtime.
fn vectors(engine: &Engine, texts: &[String], task: &str) -> Vec<Vec<Vec<f32>>> {
    engine
        .embed_vectors(texts, Some(task))
        .unwrap_or_else(|e| panic!("{task}: {e}"))
}

/// Ids as the engine runs them (the task's prompt, limit and expansion), the kept positions, and each kept vector
/// within float rounding of the reference's in f32 (cosine ≥ 0.999 in bf16).
fn check(model: &str, dtype: Dtype) {
    let engine = load(model, dtype, CaptureMode::Lazy);
    let front = engine.front();
    let mv = front.multi_vector().expect("a multi-vector model");
    for (name, task) in TASKS {
        let fx = reference(model, name);
        let texts: Vec<String> = fx.iter().map(|f| f.text.clone()).collect();
        let got = vectors(&engine, &texts, name);
        let prompt = front
            .prompt_or_default(Some(name), "prompt")
            .expect("prompt");
        let dim = engine.dim();
        for (
            Reference {
                text,
                ids,
                kept,
                vectors: want,
            },
            got,
        ) in fx.iter().zip(&got)
        {
            let mut ours = Vec::new();
            let templated = engine::Prompt::template(prompt, text);
            mv.tokenizer(Some(task), engine.tokenizer())
                .encode(&templated, &mut ours)
                .expect("encode");
            mv.expand(Some(task), &mut ours);
            assert_eq!(&ours, ids, "{model} {name} {text:?}: ids");
            let ours_kept: Vec<usize> = (0..ours.len())
                .zip(mv.kept(Some(task), &ours))
                .filter_map(|(i, k)| k.then_some(i))
                .collect();
            assert_eq!(&ours_kept, kept, "{model} {name} {text:?}: kept positions");
            assert_eq!(got.len(), kept.len(), "{model} {name} {text:?}: vectors");
            for (i, (g, w)) in got.iter().zip(want.chunks_exact(dim)).enumerate() {
                match dtype {
                    Dtype::F32 => {
                        for (a, b) in g.iter().zip(w) {
                            assert!(
                                (a - b).abs() <= 2e-5,
                                "{model} {name} {text:?} vector {i}: {a} vs {b}"
                            );
                        }
                    }
                    Dtype::Bf16 => {
                        let cos = common::cosine(g, w);
                        assert!(
                            cos >= 0.999,
                            "{model} {name} {text:?} vector {i}: cosine {cos}"
                        );
                    }
                }
            }
        }
    }
}

#[test]
fn f32_vectors_match_the_multi_vector_encoder() {
    for model in MODELS {
        check(model, Dtype::F32);
    }
}

#[test]
fn bf16_vectors_reach_0_999() {
    if common::models::bf16_runs(MODELS[0]) {
        for model in MODELS {
            check(model, Dtype::Bf16);
        }
    }
}

/// A query's vectors are the same alone as among others of other lengths (its unattended expansion is its own),
/// and a second run (a replayed plan) gives them bitwise.
#[test]
fn a_querys_vectors_do_not_depend_on_its_batch() {
    for model in MODELS {
        let engine = load(model, Dtype::F32, CaptureMode::Lazy);
        let texts: Vec<String> = reference(model, "query")
            .into_iter()
            .map(|f| f.text)
            .collect();
        let together = vectors(&engine, &texts, "query");
        for _ in 0..2 {
            for (text, want) in texts.iter().zip(&together) {
                let alone = vectors(&engine, std::slice::from_ref(text), "query");
                assert_eq!(&alone[0], want, "{model}: {text:?}");
            }
        }
    }
}

/// `/embed_multi` answers each input's kept vectors, as `Engine::embed_vectors` gives them, for each task (a
/// request of more inputs than the gateway's split size); the dense routes refuse the model; a query over its
/// limit is refused unless `truncate`, and so is a cut from the left; `/info` says what the model is.
#[test]
fn embed_multi_answers_the_engines_vectors() {
    use common::http::{get, post, with_gateway};
    use serde_json::json;
    for model in MODELS {
        let texts = served_texts(model);
        with_gateway(model, async |router, engine| {
            for (task, _) in TASKS {
                let want = std::thread::scope(|s| {
                    s.spawn(|| vectors(&engine, &texts, task))
                        .join()
                        .expect("join")
                });
                let body = json!({ "inputs": texts, "prompt_name": task, "truncate": true });
                let (status, got) = post(&router, "/embed_multi", body).await;
                assert_eq!(status, 200, "{model} {task}: {got}");
                let got: Vec<Vec<Vec<f32>>> = serde_json::from_value(got).expect("vectors");
                assert_eq!(got, want, "{model} {task}");
            }
            let long = texts.iter().max_by_key(|t| t.len()).expect("a text");
            let (status, got) = post(
                &router,
                "/embed_multi",
                json!({ "inputs": long, "prompt_name": "query" }),
            )
            .await;
            assert_eq!(status, 422, "{model}: a long query without truncate: {got}");
            for (route, body) in [
                ("/embed", json!({ "inputs": "a" })),
                ("/v1/embeddings", json!({ "input": "a", "model": model })),
                (
                    "/embed_multi",
                    json!({ "inputs": "a", "truncation_direction": "left" }),
                ),
            ] {
                let (status, got) = post(&router, route, body).await;
                assert_eq!(status, 422, "{model} {route}: {got}");
            }
            let (_, info) = get(&router, "/info").await;
            assert_eq!(
                info["model_type"]["embedding"]["pooling"], "multi-vector",
                "{info}"
            );
        });
    }
}

/// What the engine does not run is refused at load, by name: an unattended expansion past a sliding window (its
/// last positions would see no key), by the token that ends every text or over DeBERTa, `truncate_dim`,
/// Stanford's checkpoint layout, and per-task limits on a model that is not multi-vector.
#[test]
fn what_is_not_run_is_refused_at_load() {
    use common::models::{copied, edit_json};
    let refused = |model: &str, file: &str, edit: &dyn Fn(&mut serde_json::Value), why: &str| {
        let tmp = copied(model);
        edit_json(&tmp.path().join(file), |v| edit(v));
        let config = engine::EngineConfig {
            threads: 1,
            ..Default::default()
        };
        match Engine::load(tmp.path(), config) {
            Ok(_) => panic!("{model}: loaded with {file} edited"),
            Err(e) => assert!(e.to_string().contains(why), "{model}: {e}"),
        }
    };
    let st = "config_sentence_transformers.json";
    // Its window is 4 positions each way; its queries are 12 tokens.
    refused(
        "modernbert_colbert_pylate",
        st,
        &|v| v["attend_to_expansion_tokens"] = false.into(),
        "sliding window",
    );
    refused(
        "bert_colbert",
        st,
        &|v| v["truncate_dim"] = 8.into(),
        "truncate_dim",
    );
    // An unattended expansion by the token the tokenizer ends every text with could not be told from the text.
    refused(
        "bert_colbert",
        "sentence_bert_config.json",
        &|v| v["query_expansion"]["token"] = "[SEP]".into(),
        "puts after every text",
    );
    // Stanford's own checkpoint layout.
    refused(
        "bert_colbert",
        "config.json",
        &|v| v["architectures"] = serde_json::json!(["HF_ColBERT"]),
        "Stanford ColBERT",
    );
    // An unattended expansion over DeBERTa, whose masked tokens transformers zeroes and lets attend to nothing.
    refused(
        "bert_colbert",
        "config.json",
        &|v| {
            v["model_type"] = "deberta-v2".into();
            v["architectures"] = serde_json::json!(["DebertaV2Model"]);
            v["relative_attention"] = true.into();
            v["pos_att_type"] = "p2c|c2p".into();
        },
        "over DeBERTa",
    );
    // Per-task limits on a dense model (sentence-transformers 6 would cut its encode_query texts there).
    refused(
        "bert_max",
        "sentence_bert_config.json",
        &|v| v["query_length"] = 8.into(),
        "not multi-vector",
    );
}

/// A multi-vector model's Normalize acts on what its config names: on the sentence embedding (the default), which
/// such a model has not, it does nothing, as in sentence-transformers; an empty `keep_only_token_ids` keeps every
/// vector; a document of no vectors scores -1e9, below every other.
#[test]
fn normalize_keep_only_and_empty_documents_as_sentence_transformers_reads_them() {
    use common::models::{copied, edit_json};
    let config = || engine::EngineConfig {
        threads: 1,
        ..Default::default()
    };
    let tmp = copied("bert_colbert");
    edit_json(&tmp.path().join("3_Normalize/config.json"), |v| {
        v["module_input_name"] = "sentence_embedding".into();
        v["module_output_name"] = "sentence_embedding".into();
    });
    edit_json(&tmp.path().join("2_MultiVectorMask/config.json"), |v| {
        v["keep_only_token_ids"] = serde_json::json!([]);
    });
    let plain = Engine::load(tmp.path(), config()).expect("load");
    let normalized = Engine::load(dir("bert_colbert"), config()).expect("load");
    let texts = served_texts("bert_colbert");
    let (a, b) = (
        vectors(&plain, &texts, "document"),
        vectors(&normalized, &texts, "document"),
    );
    for (a, b) in a.iter().zip(&b) {
        assert_eq!(a.len(), b.len(), "the same vectors kept");
        for (a, b) in a.iter().zip(b) {
            let norm = a.iter().map(|x| x * x).sum::<f32>().sqrt();
            assert!((norm - 1.0).abs() > 1e-3, "not normalized: {norm}");
            for (x, y) in a.iter().zip(b) {
                assert!((x / norm - y).abs() < 1e-5, "the same direction");
            }
        }
    }
    let mv = normalized.front().multi_vector().expect("multi-vector");
    let q = [1.0f32, 0.0];
    assert_eq!(mv.max_sim([&q[..]].into_iter(), &[]), -1e9);
    assert_eq!(mv.max_sim([&q[..]].into_iter(), &[&[-5.0, 0.0][..]]), -5.0);
}

/// `/rerank` and Cohere's `/v1/rerank` rank passages by the model's MaxSim of the query's vectors (as a query) over
/// each passage's (as documents), the relevance computed from the engine's own vectors; a model without
/// `query` and `document` prompts still has the tasks (sentence-transformers' default prompts, empty).
#[test]
fn rerank_ranks_by_max_sim() {
    use common::http::{post, with_gateway};
    use serde_json::json;
    for model in MODELS {
        let texts = served_texts(model);
        let (query, passages) = (texts[0].clone(), texts[1..9].to_vec());
        with_gateway(model, async |router, engine| {
            let (q, d) = std::thread::scope(|s| {
                s.spawn(|| {
                    let q = vectors(&engine, std::slice::from_ref(&query), "query");
                    (q, vectors(&engine, &passages, "document"))
                })
                .join()
                .expect("join")
            });
            // MaxSim by its definition, in f64.
            let want: Vec<f64> = d
                .iter()
                .map(|doc| {
                    q[0].iter()
                        .map(|qv| {
                            doc.iter()
                                .map(|dv| {
                                    qv.iter().zip(dv).map(|(a, b)| (a * b) as f64).sum::<f64>()
                                })
                                .fold(f64::MIN, f64::max)
                        })
                        .sum()
                })
                .collect();
            let body = json!({ "query": query, "texts": passages, "truncate": true });
            let (status, got) = post(&router, "/rerank", body).await;
            assert_eq!(status, 200, "{model}: {got}");
            let ranks = got.as_array().expect("ranks");
            assert_eq!(ranks.len(), passages.len());
            let mut last = f64::INFINITY;
            for r in ranks {
                let (i, score) = (
                    r["index"].as_u64().expect("index") as usize,
                    r["score"].as_f64().expect("score"),
                );
                assert!(
                    (score - want[i]).abs() < 1e-4,
                    "{model}: passage {i}: {score} vs {}",
                    want[i]
                );
                assert!(score <= last, "{model}: not most relevant first");
                last = score;
            }
            let body = json!({ "query": query, "documents": passages, "top_n": 3, "model": model });
            let (status, got) = post(&router, "/v1/rerank", body).await;
            assert_eq!(status, 200, "{model}: {got}");
            let top: Vec<u64> = got["results"]
                .as_array()
                .expect("results")
                .iter()
                .map(|r| r["index"].as_u64().expect("index"))
                .collect();
            let mut order: Vec<usize> = (0..want.len()).collect();
            order.sort_by(|&a, &b| want[b].total_cmp(&want[a]));
            assert_eq!(
                top,
                order[..3].iter().map(|&i| i as u64).collect::<Vec<_>>(),
                "{model}"
            );
        });
    }
}

/// A save that names no prompts still has the tasks, as sentence-transformers' MultiVectorEncoder's default
/// prompts (empty) give them: a query is expanded to its length, with no prefix before it.
#[test]
fn a_model_without_prompts_still_has_its_tasks() {
    use common::models::{copied, edit_json};
    let tmp = copied("bert_colbert");
    edit_json(&tmp.path().join("config_sentence_transformers.json"), |v| {
        v["prompts"] = serde_json::json!({})
    });
    let config = engine::EngineConfig {
        threads: 1,
        ..Default::default()
    };
    let engine = Engine::load(tmp.path(), config).expect("load");
    let text = ["a short query".to_owned()];
    assert_eq!(
        vectors(&engine, &text, "query")[0].len(),
        16,
        "expanded to 16"
    );
    let ids = engine.tokenize(&text[0]).expect("ids");
    assert_eq!(
        vectors(&engine, &text, "document")[0].len(),
        ids.len(),
        "no prefix"
    );
}

/// A PyLate prefix the tokenizer knows but splits (`[unused0]`, answerai-colbert-small-v1's) is registered as a
/// special token, as sentence-transformers registers it, on both tokenizers: the `tokenizers` crate's ids are the
/// reference's too, and `/tokenize` shows the prefix as one token.
#[test]
fn a_registered_prefix_is_one_token_on_both_tokenizers() {
    let model = "bert_colbert_unused";
    let config = engine::EngineConfig {
        threads: 1,
        tokenizer: engine::tokenizer::TokenizerKind::Hf,
        ..Default::default()
    };
    let engine = Engine::load(dir(model), config).expect("load");
    assert_eq!(engine.info().registered_tokens, ["[unused0]", "[unused1]"]);
    let front = engine.front();
    let mv = front.multi_vector().expect("multi-vector");
    for (name, task) in TASKS {
        let prompt = front
            .prompt_or_default(Some(name), "prompt")
            .expect("prompt");
        for f in reference(model, name) {
            let mut ids = Vec::new();
            let text = engine::Prompt::template(prompt, &f.text);
            mv.tokenizer(Some(task), engine.tokenizer())
                .encode(&text, &mut ids)
                .expect("encode");
            mv.expand(Some(task), &mut ids);
            assert_eq!(ids, f.ids, "{name} {:?}", f.text);
        }
    }
    common::http::with_gateway(model, async |router, _| {
        let body = serde_json::json!({ "inputs": "x", "prompt_name": "query" });
        let (status, got) = common::http::post(&router, "/tokenize", body).await;
        assert_eq!(status, 200, "{got}");
        assert_eq!(got[0][1]["text"], "[unused0]", "{got}");
    });
}
