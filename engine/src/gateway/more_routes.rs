//! The routes beyond embedding and tokenizing: TEI's `POST /` (what Hugging Face's `InferenceClient` calls given
//! the server's URL), `/embed_all`, `/similarity` and `/decode`, and OpenAI's `GET /v1/models`.

use std::time::{Instant, UNIX_EPOCH};

use axum::body::Bytes;
use axum::extract::rejection::BytesRejection;
use axum::extract::{Path, State};
use axum::http::HeaderMap;
use axum::response::{IntoResponse, Response};
use axum::Json;
use serde::Serialize;

use super::requests::{from_value, parse, DecodeRequest, EmbedAllRequest, SimilarityRequest};
use super::routes::{check_model, embed_tei, priority, respond, tokenizer_answer};
use super::{scores, sparse};
use super::{Api, ApiError, Embedded, Gateway, Inputs, Options, Times};
use crate::Readout;

/// `POST /`: TEI routes it to `/embed` for an embedding model (or to `/similarity` when started for the
/// `sentence-similarity` task), to `/predict` or `/rerank` for a cross-encoder. Here the model and the body decide:
/// for an embedding model, `inputs` holding `source_sentence` and `sentences` is a similarity request, anything else
/// an embedding one, so `InferenceClient`'s `feature_extraction` and `sentence_similarity` both work against the
/// one URL; for a cross-encoder, a body with a `query` is a rerank request, anything else a prediction
/// (`InferenceClient`'s `text_classification`); a sparse model's is `/embed_sparse`, as TEI routes it.
pub(super) async fn root(
    State(gw): State<Gateway>,
    headers: HeaderMap,
    body: Result<Bytes, BytesRejection>,
) -> Response {
    let result = async {
        let value: serde_json::Value = parse(&headers, body)?;
        if gw.front().info().classifier.is_some() {
            if value.get("query").is_some() {
                Ok((
                    "rerank",
                    scores::rerank_of(&gw, &headers, from_value(value)?).await,
                ))
            } else {
                Ok((
                    "predict",
                    scores::predict_of(&gw, &headers, from_value(value)?).await,
                ))
            }
        } else if gw.front().info().sparse {
            Ok((
                "embed_sparse",
                sparse::embed_sparse_of(&gw, &headers, from_value(value)?).await,
            ))
        } else if value["inputs"].is_object() {
            Ok((
                "similarity",
                similarity_of(&gw, &headers, from_value(value)?).await,
            ))
        } else {
            Ok(("embed", embed_tei(&gw, &headers, from_value(value)?).await))
        }
    }
    .await;
    match result {
        Ok((route, result)) => respond(&gw, route, Api::Tei, result),
        Err(e) => respond(&gw, "embed", Api::Tei, Err(e)),
    }
}

/// TEI's `/embed_all`: every token's last hidden state (the model's output before pooling and normalization),
/// one list of vectors per input, special tokens included.
pub(super) async fn embed_all(
    State(gw): State<Gateway>,
    headers: HeaderMap,
    body: Result<Bytes, BytesRejection>,
) -> Response {
    let result = async {
        let req: EmbedAllRequest = parse(&headers, body)?;
        scores::embedder(&gw)?;
        if !gw.front().info().token_states {
            return Err(ApiError::unprocessable(
                "unsupported",
                "this model's embedding is not in its token states' space (Dense modules after pooling, or several \
                 pooling modes concatenated): its token states are not served",
            ));
        }
        let tei = Options::tei(
            req.truncate,
            gw.config().auto_truncate,
            req.truncation_direction,
            priority(&headers, req.priority)?,
        );
        let options = Options {
            prompt_name: req.prompt_name,
            readout: Readout::Tokens,
            ..tei
        };
        let Embedded { vectors, times, .. } = gw.embed(req.inputs.0, options).await?;
        let tokens: Vec<Vec<&[f32]>> = vectors.iter().map(|r| r.vectors().collect()).collect();
        Ok((times, Json(tokens).into_response()))
    }
    .await;
    respond(&gw, "embed_all", Api::Tei, result)
}

pub(super) async fn similarity(
    State(gw): State<Gateway>,
    headers: HeaderMap,
    body: Result<Bytes, BytesRejection>,
) -> Response {
    let result = async { similarity_of(&gw, &headers, parse(&headers, body)?).await }.await;
    respond(&gw, "similarity", Api::Tei, result)
}

/// TEI's `/similarity`: the cosine of `source_sentence`'s embedding with each of `sentences`', in order.
async fn similarity_of(
    gw: &Gateway,
    headers: &HeaderMap,
    req: SimilarityRequest,
) -> Result<(Times, Response), ApiError> {
    scores::embedder(gw)?;
    let SimilarityRequest { inputs, parameters } = req;
    if inputs.sentences.is_empty() {
        return Err(ApiError::bad_request(
            "empty_input",
            "`inputs.sentences` is empty",
        ));
    }
    let parameters = parameters.unwrap_or_default();
    let tei = Options::tei(
        parameters.truncate,
        gw.config().auto_truncate,
        parameters.truncation_direction,
        priority(headers, None)?,
    );
    let options = Options {
        prompt_name: parameters.prompt_name,
        ..tei
    };
    let mut texts = vec![inputs.source_sentence];
    texts.extend(inputs.sentences);
    let Embedded { vectors, times, .. } = gw.embed(Inputs::Texts(texts), options).await?;
    let (source, others) = vectors.split_first().ok_or_else(|| {
        ApiError::internal("the engine answered no embedding for the source sentence")
    })?;
    let scores: Vec<f32> = others.iter().map(|v| cosine(source, v)).collect();
    Ok((times, Json(scores).into_response()))
}

/// Cosine similarity, 0 when either vector is zero.
fn cosine(a: &[f32], b: &[f32]) -> f32 {
    let dot: f32 = a.iter().zip(b).map(|(x, y)| x * y).sum();
    let norm = |v: &[f32]| v.iter().map(|x| x * x).sum::<f32>().sqrt();
    let denominator = norm(a) * norm(b);
    if denominator > 0.0 {
        dot / denominator
    } else {
        0.0
    }
}

/// TEI's `/decode`: the text of each list of ids.
pub(super) async fn decode(
    State(gw): State<Gateway>,
    headers: HeaderMap,
    body: Result<Bytes, BytesRejection>,
) -> Response {
    let start = Instant::now();
    let result = async {
        let req: DecodeRequest = parse(&headers, body)?;
        let skip = req.skip_special_tokens;
        tokenizer_answer(&gw, start, req.ids.0, move |t, _, inputs| match inputs {
            Inputs::Ids(seqs) => t.decode(seqs, skip),
            Inputs::Texts(texts) if texts.is_empty() => {
                Err(ApiError::bad_request("empty_input", "`ids` is empty"))
            }
            Inputs::Texts(_) | Inputs::Pairs(_) => Err(ApiError::bad_request(
                "invalid_type",
                "`ids` must be a list of token ids or a list of such lists, not text",
            )),
        })
        .await
    }
    .await;
    respond(&gw, "decode", Api::Tei, result)
}

/// One model as OpenAI's `/v1/models` lists it.
#[derive(Serialize)]
struct Model<'a> {
    id: &'a str,
    object: &'static str,
    /// When the model directory was written (its tokenizer, which every model has), in Unix seconds.
    created: u64,
    owned_by: &'static str,
}

fn model<'a>(gw: &Gateway, id: &'a str) -> Model<'a> {
    let created = std::fs::metadata(&gw.front().info().tokenizer_path)
        .and_then(|m| m.modified())
        .ok()
        .and_then(|t| t.duration_since(UNIX_EPOCH).ok())
        .map_or(0, |d| d.as_secs());
    Model {
        id,
        object: "model",
        created,
        owned_by: "embedding-workbench",
    }
}

/// OpenAI's `GET /v1/models`: the names the model is served as (`--served-model-name`), the first the one
/// responses carry.
pub(super) async fn models(State(gw): State<Gateway>) -> Response {
    let config = gw.config();
    let names = std::iter::once(&config.model_name).chain(&config.model_aliases);
    let data: Vec<Model> = names.map(|name| model(&gw, name)).collect();
    gw.metrics().count("models", "ok");
    Json(serde_json::json!({ "object": "list", "data": data })).into_response()
}

/// OpenAI's `GET /v1/models/{model}`: one served name, or 404 `model_not_found`. The name may hold slashes
/// (`org/model`), as Hugging Face names do.
pub(super) async fn retrieve_model(State(gw): State<Gateway>, Path(id): Path<String>) -> Response {
    // Counted, but not timed: nothing here is a stage of embedding.
    match check_model(&gw, Some(&id)) {
        Ok(()) => {
            gw.metrics().count("models", "ok");
            Json(model(&gw, &id)).into_response()
        }
        Err(e) => {
            gw.metrics().count("models", e.outcome());
            e.response(Api::OpenAi)
        }
    }
}
