//! A cross-encoder over HTTP: TEI's `/rerank` and `/predict` and Cohere's `/v1/rerank` answer the engine's own
//! scores ([`engine::Engine::score`], checked against sentence-transformers in `cross_encoders.rs`), ranked, with
//! sigmoid or softmax as TEI applies them; a request's pairs cut at different places (so sub-batches of
//! different type-1 boundaries) are scored as one; what each route refuses, and the embedding routes refusing a
//! cross-encoder (and the scoring routes an embedding model).

mod common;

use axum::http::StatusCode;
use common::http::{get, post, with_gateway};
use common::models::dir;
use engine::tokenizer::Scratch;
use engine::Engine;
use serde_json::{json, Value};

/// A query long enough to be cut against the shorter passages (max length 40), so the pairs' tokens of type 1
/// start at several places.
const QUERY: &str =
    "when was the law allowing women to drive in saudi arabia put into effect, and who signed it?";

/// The fixture's passages, and short ones of a few words.
fn passages(name: &str) -> Vec<String> {
    let reference = std::fs::read_to_string(dir(name).join("reference.jsonl")).expect("reference");
    let mut passages: Vec<String> = reference
        .lines()
        .map(|l| {
            let v: Value = serde_json::from_str(l).expect("JSON");
            v["passage"].as_str().expect("passage").to_owned()
        })
        .collect();
    passages.extend(
        [
            "in 2018",
            "a royal decree",
            "riyadh",
            "women drive cars now",
        ]
        .map(String::from),
    );
    passages
}

/// The engine's logits, off the runtime's threads.
fn score(engine: &Engine, query: &str, passages: &[String]) -> Vec<Vec<f32>> {
    let pairs: Vec<(&str, &str)> = passages.iter().map(|p| (query, p.as_str())).collect();
    std::thread::scope(|s| {
        s.spawn(|| engine.score(&pairs).expect("score"))
            .join()
            .expect("join")
    })
}

fn sigmoid(x: f32) -> f32 {
    1.0 / (1.0 + (-x).exp())
}

fn f(v: &Value) -> f32 {
    v.as_f64().expect("a number") as f32
}

/// Asserts the answers are ranked by `score`, highest first, each within float rounding of `want(index)`, no
/// index twice.
fn assert_ranked(ranks: &[Value], score: &str, want: impl Fn(usize) -> f32) {
    let mut last = f32::INFINITY;
    let mut seen = std::collections::HashSet::new();
    for r in ranks {
        assert!(
            seen.insert(r["index"].to_string()),
            "an index twice: {ranks:?}"
        );
        let (i, got) = (r["index"].as_u64().expect("index") as usize, f(&r[score]));
        assert!(got <= last, "not ranked: {ranks:?}");
        assert!(
            (got - want(i)).abs() < 1e-5,
            "text {i}: {got} against {}",
            want(i)
        );
        last = got;
    }
}

/// Two passages over the limit that differ only in their first words (`tail` long enough): cut from the left they
/// are the same pair (equal scores), from the right they are not.
async fn assert_cut_by_side(router: &axum::Router, tail: &str) {
    let two = [format!("alpha beta {tail}"), format!("gamma delta {tail}")];
    let mut gaps = Vec::new();
    for side in ["left", "right"] {
        let body = json!({ "query": "q", "texts": two, "truncate": true, "raw_scores": true,
                           "truncation_direction": side });
        let (status, ranks) = post(router, "/rerank", body).await;
        assert_eq!(status, StatusCode::OK, "{ranks}");
        let scores: Vec<f32> = ranks
            .as_array()
            .expect("a list")
            .iter()
            .map(|r| f(&r["score"]))
            .collect();
        gaps.push((scores[0] - scores[1]).abs());
    }
    assert!(
        gaps[0] < 1e-6 && gaps[1] > 1e-4,
        "score gaps left, right: {gaps:?}"
    );
}

#[test]
fn rerank_answers_the_engines_scores_ranked() {
    let texts = passages("bert_cross_encoder");
    with_gateway("bert_cross_encoder", async |router, engine| {
        // The pairs' type-1 boundaries differ (the query cut against short passages): several runs, each split.
        let mut boundaries: Vec<Option<u32>> = texts
            .iter()
            .map(|t| {
                let mut ids = Vec::new();
                let pair =
                    engine
                        .tokenizer()
                        .encode_pair(QUERY, t, &mut Scratch::default(), &mut ids);
                pair.expect("pair").type1_from
            })
            .collect();
        boundaries.dedup();
        assert!(boundaries.len() > 3, "{boundaries:?}");
        let logits = score(&engine, QUERY, &texts);

        let body = json!({ "query": QUERY, "texts": texts, "truncate": true, "raw_scores": true });
        let (status, ranks) = post(&router, "/rerank", body).await;
        assert_eq!(status, StatusCode::OK, "{ranks}");
        let ranks = ranks.as_array().expect("a list");
        assert_eq!(ranks.len(), texts.len());
        assert_ranked(ranks, "score", |i| logits[i][0]);
        assert!(ranks.iter().all(|r| r.get("text").is_none()));

        let body = json!({ "query": QUERY, "texts": texts, "truncate": true, "return_text": true });
        let (_, ranks) = post(&router, "/rerank", body).await;
        let ranks = ranks.as_array().expect("a list");
        assert_ranked(ranks, "score", |i| sigmoid(logits[i][0]));
        for r in ranks {
            let i = r["index"].as_u64().expect("index") as usize;
            assert_eq!(r["text"], texts[i].as_str());
        }
        assert_cut_by_side(&router, &texts.concat()).await;

        // `POST /` with a query is a rerank.
        let body = json!({ "query": QUERY, "texts": texts, "truncate": true });
        let (status, ranks) = post(&router, "/", body).await;
        assert_eq!(status, StatusCode::OK, "{ranks}");
        assert_ranked(ranks.as_array().expect("a list"), "score", |i| {
            sigmoid(logits[i][0])
        });

        // Cohere's surface cuts what is too long on its own, and ranks the top_n.
        let documents: Vec<Value> = texts
            .iter()
            .enumerate()
            .map(|(i, t)| {
                if i % 2 == 0 {
                    json!(t)
                } else {
                    json!({ "text": t })
                }
            })
            .collect();
        let body = json!({ "model": "bert_cross_encoder", "query": QUERY, "documents": documents,
                           "top_n": 3, "return_documents": true });
        let (status, answer) = post(&router, "/v1/rerank", body).await;
        assert_eq!(status, StatusCode::OK, "{answer}");
        let results = answer["results"].as_array().expect("results");
        assert_eq!(results.len(), 3);
        assert_ranked(results, "relevance_score", |i| sigmoid(logits[i][0]));
        let best = logits
            .iter()
            .map(|l| l[0])
            .fold(f32::NEG_INFINITY, f32::max);
        assert!((f(&results[0]["relevance_score"]) - sigmoid(best)).abs() < 1e-5);
        for r in results {
            let i = r["index"].as_u64().expect("index") as usize;
            assert_eq!(r["document"]["text"], texts[i].as_str());
        }
        assert!(
            answer["usage"]["total_tokens"].as_u64().expect("tokens") > 20 * texts.len() as u64
        );
        assert_eq!(answer["model"], "bert_cross_encoder");

        let (status, info) = get(&router, "/info").await;
        assert_eq!(status, StatusCode::OK);
        assert_eq!(info["model_type"]["reranker"]["id2label"]["0"], "LABEL_0");
    });
}

#[test]
fn predict_scores_each_label_of_texts_and_pairs() {
    let texts = passages("distilbert_nli");
    with_gateway("distilbert_nli", async |router, engine| {
        let logits = score(&engine, QUERY, &texts[..4]);
        let softmax = |l: &[f32]| {
            let e: Vec<f32> = l.iter().map(|x| x.exp()).collect();
            let sum: f32 = e.iter().sum();
            e.into_iter().map(|x| x / sum).collect::<Vec<_>>()
        };
        let labels = ["contradiction", "entailment", "neutral"];
        let check = |answer: &Value, logits: &[f32], raw: bool| {
            let want = if raw {
                logits.to_vec()
            } else {
                softmax(logits)
            };
            let answer = answer.as_array().expect("a list of labels");
            assert_eq!(answer.len(), 3);
            let mut last = f32::INFINITY;
            for a in answer {
                let label = labels
                    .iter()
                    .position(|l| a["label"] == *l)
                    .expect("a label");
                assert!(
                    (f(&a["score"]) - want[label]).abs() < 1e-5,
                    "{answer:?} against {want:?}"
                );
                assert!(f(&a["score"]) <= last, "not ranked: {answer:?}");
                last = f(&a["score"]);
            }
        };
        // One pair: its list alone.
        let (status, answer) = post(
            &router,
            "/predict",
            json!({ "inputs": [QUERY, texts[0]], "truncate": true }),
        )
        .await;
        assert_eq!(status, StatusCode::OK, "{answer}");
        check(&answer, &logits[0], false);
        // A list of pairs: a list each, raw.
        let pairs: Vec<[&str; 2]> = texts[..4].iter().map(|t| [QUERY, t.as_str()]).collect();
        let body = json!({ "inputs": pairs, "truncate": true, "raw_scores": true });
        let (status, answer) = post(&router, "/predict", body).await;
        assert_eq!(status, StatusCode::OK, "{answer}");
        assert_eq!(answer.as_array().expect("a list").len(), 4);
        for (a, l) in answer.as_array().expect("a list").iter().zip(&logits) {
            check(a, l, true);
        } // Texts alone: the classifier on the text (TEI's `[text]` in a list; a bare list of two texts is a pair).
        let single: Vec<Vec<f32>> = {
            let texts = &texts[..3];
            std::thread::scope(|s| {
                s.spawn(|| engine.embed(texts).expect("embed"))
                    .join()
                    .expect("join")
            })
        };
        let listed: Vec<[&str; 1]> = texts[..3].iter().map(|t| [t.as_str()]).collect();
        let (status, answer) = post(
            &router,
            "/predict",
            json!({ "inputs": listed, "truncate": true }),
        )
        .await;
        assert_eq!(status, StatusCode::OK, "{answer}");
        assert_eq!(answer.as_array().expect("a list").len(), 3);
        for (a, l) in answer.as_array().expect("a list").iter().zip(&single) {
            check(a, l, false);
        }
        // One text, bare or in an array: its list alone.
        for one in [json!(texts[0]), json!([texts[0]])] {
            let (status, answer) = post(
                &router,
                "/predict",
                json!({ "inputs": one, "truncate": true }),
            )
            .await;
            assert_eq!(status, StatusCode::OK, "{answer}");
            check(&answer, &single[0], false);
        }
        // Texts and pairs mixed in one list, each answered in its place.
        let mixed = json!([[texts[0]], [QUERY, texts[0]], [texts[1]]]);
        let (status, answer) = post(
            &router,
            "/predict",
            json!({ "inputs": mixed, "truncate": true }),
        )
        .await;
        assert_eq!(status, StatusCode::OK, "{answer}");
        let answer = answer.as_array().expect("a list");
        assert_eq!(answer.len(), 3);
        check(&answer[0], &single[0], false);
        check(&answer[1], &logits[0], false);
        check(&answer[2], &single[1], false);
        // `POST /` is a prediction (InferenceClient's text_classification).
        let (status, answer) = post(
            &router,
            "/",
            json!({ "inputs": [QUERY, texts[0]], "truncate": true }),
        )
        .await;
        assert_eq!(status, StatusCode::OK, "{answer}");
        check(&answer, &logits[0], false);
        // Three labels rank nothing.
        let (status, e) = post(&router, "/rerank", json!({ "query": "q", "texts": ["p"] })).await;
        assert_eq!(
            (status, e["error_type"].as_str()),
            (StatusCode::UNPROCESSABLE_ENTITY, Some("validation"))
        );
        let (_, info) = get(&router, "/info").await;
        assert_eq!(info["model_type"]["classifier"]["label2id"]["neutral"], 2);
    });
}

/// Each refusal: status, and the surface's one error shape.
#[test]
fn scoring_routes_refuse_what_they_cannot_score() {
    with_gateway("bert_cross_encoder", async |router, _| {
        let long = passages("bert_cross_encoder").concat();
        let cases = [
            (
                "/rerank",
                json!({ "query": "q", "texts": [] }),
                StatusCode::BAD_REQUEST,
            ),
            (
                "/rerank",
                json!({ "query": "q", "texts": ["a", ""] }),
                StatusCode::BAD_REQUEST,
            ),
            (
                "/rerank",
                json!({ "query": "", "texts": ["a"] }),
                StatusCode::BAD_REQUEST,
            ), // Over the limit, not asked to truncate: the passage, or the query.
            (
                "/rerank",
                json!({ "query": long, "texts": ["a"] }),
                StatusCode::UNPROCESSABLE_ENTITY,
            ),
            (
                "/rerank",
                json!({ "query": "q", "texts": [long] }),
                StatusCode::UNPROCESSABLE_ENTITY,
            ),
            (
                "/rerank",
                json!({ "query": "q", "texts": "a" }),
                StatusCode::BAD_REQUEST,
            ),
            (
                "/predict",
                json!({ "inputs": ["a", ["b", "c"]] }),
                StatusCode::BAD_REQUEST,
            ),
            (
                "/predict",
                json!({ "inputs": ["a", "b", "c"] }),
                StatusCode::BAD_REQUEST,
            ),
            (
                "/predict",
                json!({ "inputs": [["a", ""]] }),
                StatusCode::BAD_REQUEST,
            ),
            (
                "/predict",
                json!({ "inputs": [["a", "b", "c"]] }),
                StatusCode::BAD_REQUEST,
            ),
            ("/predict", json!({ "inputs": [] }), StatusCode::BAD_REQUEST),
            (
                "/v1/rerank",
                json!({ "query": "q", "documents": ["a"], "top_n": 0 }),
                StatusCode::BAD_REQUEST,
            ),
            (
                "/v1/rerank",
                json!({ "query": "q", "documents": [] }),
                StatusCode::BAD_REQUEST,
            ),
            (
                "/v1/rerank",
                json!({ "query": "q", "documents": [{ "txt": "a" }] }),
                StatusCode::BAD_REQUEST,
            ),
            (
                "/v2/rerank",
                json!({ "model": "other", "query": "q", "documents": ["a"] }),
                StatusCode::NOT_FOUND,
            ),
            // A cross-encoder gives no embeddings.
            (
                "/embed",
                json!({ "inputs": "a" }),
                StatusCode::UNPROCESSABLE_ENTITY,
            ),
            (
                "/v1/embeddings",
                json!({ "input": "a" }),
                StatusCode::UNPROCESSABLE_ENTITY,
            ),
            (
                "/embed_all",
                json!({ "inputs": "a" }),
                StatusCode::UNPROCESSABLE_ENTITY,
            ),
            (
                "/similarity",
                json!({ "inputs": { "source_sentence": "a", "sentences": ["b"] } }),
                StatusCode::UNPROCESSABLE_ENTITY,
            ),
        ];
        for (path, body, want) in cases {
            let (status, e) = post(&router, path, body.clone()).await;
            assert_eq!(status, want, "{path} {body}: {e}");
            if path.starts_with("/v") {
                assert!(
                    e["error"]["message"]
                        .as_str()
                        .is_some_and(|m| !m.is_empty()),
                    "{e}"
                );
            } else {
                assert!(e["error"].as_str().is_some_and(|m| !m.is_empty()), "{e}");
            }
        }
    });
    // An embedding model scores nothing.
    with_gateway("bert_max", async |router, _| {
        let (status, e) = post(&router, "/rerank", json!({ "query": "q", "texts": ["p"] })).await;
        assert_eq!(status, StatusCode::UNPROCESSABLE_ENTITY, "{e}");
        let (status, e) = post(&router, "/predict", json!({ "inputs": "p" })).await;
        assert_eq!(status, StatusCode::UNPROCESSABLE_ENTITY, "{e}");
        let (_, info) = get(&router, "/info").await;
        assert_eq!(info["model_type"]["embedding"]["pooling"], "max");
    });
}

/// A decoder reranker over HTTP (Qwen3-Reranker's way: a chat template, then LogitScore): `/rerank` answers the
/// CrossEncoder's reference scores, the pairs rendered through the template at the gateway; a pair over the limit
/// is refused unless `truncate`, and cut from the left two passages that differ only in their first words are one
/// pair (the template's tail kept), from the right (the suffix written back) they are not.
#[test]
fn a_decoder_reranker_answers_through_its_chat_template() {
    let name = "qwen3_reranker_logit_score";
    let reference: Vec<(String, String, f32)> =
        std::fs::read_to_string(dir(name).join("reference.jsonl"))
            .expect("reference")
            .lines()
            .map(|l| {
                let v: Value = serde_json::from_str(l).expect("JSON");
                let bytes = base64::Engine::decode(
                    &base64::engine::general_purpose::STANDARD,
                    v["logits"].as_str().expect("logits"),
                )
                .expect("base64");
                let logit = f32::from_le_bytes([bytes[0], bytes[1], bytes[2], bytes[3]]);
                let text = |k: &str| v[k].as_str().expect("text").to_owned();
                (text("query"), text("passage"), logit)
            })
            .collect();
    with_gateway(name, async |router, _engine| {
        let (query, _, _) = &reference[1];
        let same: Vec<&(String, String, f32)> =
            reference.iter().filter(|(q, _, _)| q == query).collect();
        let texts: Vec<&str> = same.iter().map(|(_, p, _)| p.as_str()).collect();
        let body = json!({ "query": query, "texts": texts, "truncate": true, "raw_scores": true });
        let (status, ranks) = post(&router, "/rerank", body).await;
        assert_eq!(status, StatusCode::OK, "{ranks}");
        let ranks = ranks.as_array().expect("a list");
        let spread = reference.iter().fold(0f32, |m, r| m.max(r.2.abs()));
        let mut last = f32::INFINITY;
        for r in ranks {
            let (i, got) = (r["index"].as_u64().expect("index") as usize, f(&r["score"]));
            assert!(
                (got - same[i].2).abs() <= 1e-5 * spread,
                "{got} against {}",
                same[i].2
            );
            assert!(got <= last, "not ranked: {ranks:?}");
            last = got;
        }

        // A text alone is not a pair: sentence-transformers would render it as a user's message.
        let (status, refused) = post(&router, "/predict", json!({ "inputs": "a text" })).await;
        assert_eq!(status, StatusCode::UNPROCESSABLE_ENTITY, "{refused}");

        let tail = texts.concat().repeat(20);
        let body = json!({ "query": "q", "texts": [tail] });
        let (status, refused) = post(&router, "/rerank", body).await;
        assert!(status.is_client_error(), "{status} {refused}");
        assert_cut_by_side(&router, &tail).await;
    });
}
