//! A cross-encoder's routes: TEI's `/rerank` (a query against many texts, ranked) and `/predict` (texts or pairs
//! of texts classified, a score per label), and the rerank route of Cohere's API (`/v1/rerank`, `/v2/rerank`),
//! which Jina's, vLLM's and Infinity's share. The model's logits are what the engine answers; a score is the
//! logit's sigmoid for one label, the logits' softmax for several (`raw_scores`: the logits themselves), as TEI and
//! sentence-transformers' CrossEncoder give them.

use axum::body::Bytes;
use axum::extract::rejection::BytesRejection;
use axum::extract::State;
use axum::http::HeaderMap;
use axum::response::{IntoResponse, Response};
use axum::Json;
use serde::Serialize;

use super::requests::{
    parse, CohereRerankRequest, Listed, PredictInputs, PredictRequest, RerankRequest,
};
use super::routes::{check_model, priority, respond};
use super::{multi_vector, Api, ApiError, Embedded, Gateway, Inputs, Options, Times};
use crate::model::Classifier;
use crate::Row;

/// The model's labels, or the refusal of a route that scores when the model embeds.
fn classifier(gw: &Gateway) -> Result<&Classifier, ApiError> {
    gw.front().info().classifier.as_ref().ok_or_else(|| {
        ApiError::unprocessable(
            "wrong_model_type",
            "this model is an embedding model: it embeds texts (/v1/embeddings, /embed) and scores no pairs; \
             /rerank, /predict and /v1/rerank need a cross-encoder (a *ForSequenceClassification checkpoint)",
        )
    })
}

/// `/info`'s `model_type`, in TEI's shape: `{"embedding": {"pooling": …}}` (`"splade"` for a sparse model,
/// `"multi-vector"` for a ColBERT one), or a cross-encoder's labels as
/// `{"reranker": …}` (one label) or `{"classifier": …}` with `id2label` and `label2id`.
pub(super) fn model_type(info: &crate::ModelInfo) -> serde_json::Value {
    let Some(classifier) = &info.classifier else {
        // TEI names one mode; sentence-transformers may concatenate several.
        let pooling = match info.pooling.modes.as_slice() {
            _ if info.sparse => serde_json::json!("splade"),
            _ if info.multi_vector => serde_json::json!("multi-vector"),
            [one] => serde_json::json!(one),
            many => serde_json::json!(many),
        };
        return serde_json::json!({ "embedding": { "pooling": pooling } });
    };
    let labels = classifier.labels.iter().enumerate();
    let id2label: serde_json::Map<_, _> = labels
        .clone()
        .map(|(i, l)| (i.to_string(), l.as_str().into()))
        .collect();
    let label2id: serde_json::Map<_, _> = labels.map(|(i, l)| (l.clone(), i.into())).collect();
    let kind = if classifier.labels.len() == 1 {
        "reranker"
    } else {
        "classifier"
    };
    serde_json::json!({ kind: { "id2label": id2label, "label2id": label2id } })
}

/// Refuses the dense embedding routes for a cross-encoder, whose output is a score per label, not an embedding,
/// for a sparse model, whose output is a weight per vocabulary entry, and for a multi-vector model, whose output
/// is a vector per token.
pub(super) fn embedder(gw: &Gateway) -> Result<(), ApiError> {
    let info = gw.front().info();
    match info.classifier {
        Some(_) => Err(ApiError::unprocessable(
            "wrong_model_type",
            "this model is a cross-encoder: it scores texts and pairs of texts (/rerank, /predict, /v1/rerank) \
             and gives no embeddings",
        )),
        None if info.sparse => Err(ApiError::unprocessable(
            "wrong_model_type",
            "this model is a sparse (SPLADE) model: /embed_sparse gives its weights per vocabulary entry (TEI's \
             /embed the whole vector with normalize: false); it has no dense embedding",
        )),
        None if info.multi_vector => Err(ApiError::unprocessable(
            "wrong_model_type",
            "this model is a multi-vector (ColBERT) model: /embed_multi gives its vectors per token; it has no \
             single embedding",
        )),
        None => Ok(()),
    }
}

/// A ranker is a cross-encoder of one label, its logit the relevance (TEI serves `/rerank` for those only), or a
/// multi-vector model (its MaxSim).
fn ranker(gw: &Gateway) -> Result<(), ApiError> {
    if gw.front().info().multi_vector {
        return Ok(());
    }
    let labels = &classifier(gw)?.labels;
    if labels.len() != 1 {
        return Err(ApiError::unprocessable(
            "wrong_model_type",
            format!(
                "this cross-encoder classifies into {} labels ({}), so it ranks nothing: /predict scores each \
                 label; reranking needs a model of one label",
                labels.len(),
                labels.join(", ")
            ),
        ));
    }
    Ok(())
}

fn sigmoid(x: f32) -> f32 {
    1.0 / (1.0 + (-x).exp())
}

/// One input's scores from its logits, in label order.
fn scores(logits: &[f32], raw: bool) -> Vec<f32> {
    match logits {
        _ if raw => logits.to_vec(),
        [one] => vec![sigmoid(*one)],
        _ => {
            let max = logits.iter().copied().fold(f32::NEG_INFINITY, f32::max);
            let exp: Vec<f32> = logits.iter().map(|x| (x - max).exp()).collect();
            let sum: f32 = exp.iter().sum();
            exp.into_iter().map(|e| e / sum).collect()
        }
    }
}

/// Each row's logits, checked: one per label, none NaN (a client would read `null` for a score).
fn logits(rows: &[Row], labels: usize) -> Result<impl Iterator<Item = &[f32]>, ApiError> {
    if let Some(row) = rows
        .iter()
        .find(|r| r.len() != labels || r.iter().any(|x| x.is_nan()))
    {
        return Err(ApiError::internal(format!(
            "the model answered {:?} for {labels} labels",
            &row[..]
        )));
    }
    Ok(rows.iter().map(|r| &r[..]))
}

/// Each input's index and relevance, most relevant first; ties keep input order (TEI's come in reverse).
fn ranked(relevance: Vec<f32>) -> Vec<(usize, f32)> {
    let mut ranked: Vec<(usize, f32)> = relevance.into_iter().enumerate().collect();
    ranked.sort_by(|a, b| b.1.total_cmp(&a.1));
    ranked
}

impl Gateway {
    /// Each passage's relevance to `query`, in order, with the tokens run and the stages' times: a cross-encoder's
    /// score of each pair (its one label's: the logit's sigmoid, the logit where `raw`), or a multi-vector model's
    /// MaxSim of the query's vectors over the passage's. What the rerank routes rank.
    pub async fn relevance(
        &self,
        query: &str,
        passages: Vec<String>,
        options: Options,
        raw: bool,
    ) -> Result<(Vec<f32>, usize, Times), ApiError> {
        ranker(self)?;
        if passages.is_empty() {
            return Err(ApiError::bad_request(
                "empty_input",
                "there are no texts to rank",
            ));
        }
        if self.front().info().multi_vector {
            return multi_vector::max_sim(self, query, passages, options).await;
        }
        let Embedded {
            vectors,
            tokens,
            times,
            ..
        } = rank_pairs(self, query, passages, options).await?;
        let relevance = logits(&vectors, 1)?.map(|l| scores(l, raw)[0]).collect();
        Ok((relevance, tokens, times))
    }
}

/// Scores a query against each passage: one sub-batch path with the embeddings, pairs in place of texts.
async fn rank_pairs(
    gw: &Gateway,
    query: &str,
    passages: Vec<String>,
    options: Options,
) -> Result<Embedded, ApiError> {
    let pairs = passages.into_iter().map(|p| (query.to_owned(), Some(p)));
    gw.embed(Inputs::Pairs(pairs.collect()), options).await
}

/// TEI's `/rerank` answer: one per text, most relevant first.
#[derive(Serialize)]
struct Rank<'a> {
    index: usize,
    score: f32,
    #[serde(skip_serializing_if = "Option::is_none")]
    text: Option<&'a str>,
}

/// TEI's `/rerank`: `query` against each of `texts`, ranked by the model's relevance.
pub(super) async fn rerank(
    State(gw): State<Gateway>,
    headers: HeaderMap,
    body: Result<Bytes, BytesRejection>,
) -> Response {
    let result = async { rerank_of(&gw, &headers, parse(&headers, body)?).await }.await;
    respond(&gw, "rerank", Api::Tei, result)
}

/// TEI's `/rerank` once its body is read (also `POST /`'s answer to a rerank request).
pub(super) async fn rerank_of(
    gw: &Gateway,
    headers: &HeaderMap,
    req: RerankRequest,
) -> Result<(Times, Response), ApiError> {
    ranker(gw)?;
    let options = Options::tei(
        req.truncate,
        gw.config().auto_truncate,
        req.truncation_direction,
        priority(headers, req.priority)?,
    );
    let texts = req.return_text.then(|| req.texts.clone());
    let (relevance, _, times) = gw
        .relevance(&req.query, req.texts, options, req.raw_scores)
        .await?;
    let ranks: Vec<Rank> = ranked(relevance)
        .into_iter()
        .map(|(index, score)| Rank {
            index,
            score,
            text: texts.as_ref().map(|t| t[index].as_str()),
        })
        .collect();
    Ok((times, Json(ranks).into_response()))
}

/// One label's score in `/predict`'s answer.
#[derive(Serialize)]
struct Prediction<'a> {
    score: f32,
    label: &'a str,
}

/// TEI's `/predict`: each input (a text, or a pair of texts) classified, its labels' scores highest first; one
/// input is answered with its list alone, a list of inputs with a list each.
pub(super) async fn predict(
    State(gw): State<Gateway>,
    headers: HeaderMap,
    body: Result<Bytes, BytesRejection>,
) -> Response {
    let result = async { predict_of(&gw, &headers, parse(&headers, body)?).await }.await;
    respond(&gw, "predict", Api::Tei, result)
}

/// TEI's `/predict` once its body is read (also `POST /`'s answer to a cross-encoder's request).
pub(super) async fn predict_of(
    gw: &Gateway,
    headers: &HeaderMap,
    req: PredictRequest,
) -> Result<(Times, Response), ApiError> {
    let labels = &classifier(gw)?.labels;
    let (pairs, single): (Vec<_>, _) = match req.inputs {
        PredictInputs::One(s) => (vec![s.into_pair()], true),
        PredictInputs::Many(s) => (s.into_iter().map(Listed::into_pair).collect(), false),
    };
    let options = Options::tei(
        req.truncate,
        gw.config().auto_truncate,
        req.truncation_direction,
        priority(headers, req.priority)?,
    );
    let Embedded { vectors, times, .. } = gw.embed(Inputs::Pairs(pairs), options).await?;
    let mut answers: Vec<Vec<Prediction>> = logits(&vectors, labels.len())?
        .map(|row| {
            let mut labelled: Vec<Prediction> = scores(row, req.raw_scores)
                .into_iter()
                .zip(labels)
                .map(|(score, label)| Prediction { score, label })
                .collect();
            labelled.sort_by(|a, b| b.score.total_cmp(&a.score));
            labelled
        })
        .collect();
    let response = match answers.pop() {
        Some(one) if single => Json(one).into_response(),
        last => {
            answers.extend(last);
            Json(answers).into_response()
        }
    };
    Ok((times, response))
}

/// Cohere's rerank answer (also Jina's and vLLM's).
#[derive(Serialize)]
struct CohereRerankResponse<'a> {
    model: &'a str,
    results: Vec<CohereResult<'a>>,
    usage: CohereUsage,
}

#[derive(Serialize)]
struct CohereResult<'a> {
    index: usize,
    relevance_score: f32,
    #[serde(skip_serializing_if = "Option::is_none")]
    document: Option<CohereDocument<'a>>,
}

#[derive(Serialize)]
struct CohereDocument<'a> {
    text: &'a str,
}

#[derive(Serialize)]
struct CohereUsage {
    total_tokens: usize,
}

/// Cohere's `/v1/rerank` and `/v2/rerank`: `query` against each of `documents` (strings, or objects with a
/// `text`), the `top_n` most relevant first. Pairs over the model's limit are cut, as Cohere cuts them rather
/// than refuse: longest first, from the right.
pub(super) async fn cohere_rerank(
    State(gw): State<Gateway>,
    headers: HeaderMap,
    body: Result<Bytes, BytesRejection>,
) -> Response {
    let result = async {
        let req: CohereRerankRequest = parse(&headers, body)?;
        check_model(&gw, req.model.as_deref())?;
        ranker(&gw)?;
        if req.top_n == Some(0) {
            return Err(ApiError::bad_request(
                "invalid_top_n",
                "`top_n` must be at least 1",
            ));
        }
        let options = Options {
            truncate: true,
            api: Api::OpenAi,
            priority: priority(&headers, req.priority)?,
            ..Options::default()
        };
        let documents: Vec<String> = req.documents.into_iter().map(|d| d.into_text()).collect();
        let kept = req.return_documents.then(|| documents.clone());
        let (relevance, tokens, times) =
            gw.relevance(&req.query, documents, options, false).await?;
        let mut ranks = ranked(relevance);
        ranks.truncate(req.top_n.unwrap_or(usize::MAX));
        let results = ranks
            .into_iter()
            .map(|(index, relevance_score)| CohereResult {
                index,
                relevance_score,
                document: kept.as_ref().map(|d| CohereDocument {
                    text: d[index].as_str(),
                }),
            })
            .collect();
        let response = CohereRerankResponse {
            model: &gw.config().model_name,
            results,
            usage: CohereUsage {
                total_tokens: tokens,
            },
        };
        Ok((times, Json(response).into_response()))
    }
    .await;
    respond(&gw, "cohere_rerank", Api::OpenAi, result)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn one_label_is_its_sigmoid_several_their_softmax() {
        assert_eq!(scores(&[0.0], false), [0.5]);
        assert!((scores(&[2.0], false)[0] - 0.880_797).abs() < 1e-6);
        let soft = scores(&[1.0, 2.0, 3.0], false);
        let want = [0.090_030_57, 0.244_728_47, 0.665_240_94];
        for (s, w) in soft.iter().zip(want) {
            assert!((s - w).abs() < 1e-6, "{soft:?}");
        }
        assert_eq!(scores(&[1.5, -2.0], true), [1.5, -2.0]);
        // Large logits do not overflow the softmax.
        assert_eq!(scores(&[1000.0, 0.0], false), [1.0, 0.0]);
    }
}
