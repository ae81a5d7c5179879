//! A sparse (SPLADE) model's route: TEI's `/embed_sparse`, each input's weights per vocabulary entry as the
//! entries that are not 0 (`[{index, value}]`, by index). Its dense routes refuse it, as TEI's do, but for `/embed`
//! with `normalize: false` (the whole vector, a weight per entry). A Router model's lookup route (an inference-free
//! SPLADE model's queries), which a request names as its `prompt_name`, is answered here, without the engine.

use axum::body::Bytes;
use axum::extract::rejection::BytesRejection;
use axum::extract::State;
use axum::http::HeaderMap;
use axum::response::{IntoResponse, Response};
use axum::Json;
use serde::Serialize;

use super::requests::{parse, EmbedSparseRequest};
use super::routes::{priority, respond};
use super::{Api, ApiError, Embedded, Gateway, Inputs, Options, Times};
use crate::backend::Embeddings;
use std::time::Instant;

/// One vocabulary entry's weight (TEI's `SparseValue`).
#[derive(Serialize)]
struct SparseValue {
    index: usize,
    value: f32,
}

/// Refuses `/embed_sparse` for a model that is not sparse.
fn sparse_model(gw: &Gateway) -> Result<(), ApiError> {
    let info = gw.front().info();
    if info.sparse {
        return Ok(());
    }
    let what = match info.classifier {
        Some(_) => {
            "a cross-encoder: it scores texts and pairs of texts (/rerank, /predict, /v1/rerank)"
        }
        None => "a dense embedding model (/v1/embeddings, /embed)",
    };
    Err(ApiError::unprocessable(
        "wrong_model_type",
        format!(
            "this model is {what}; /embed_sparse needs a sparse model (a SparseEncoder with SpladePooling)"
        ),
    ))
}

pub(super) async fn embed_sparse(
    State(gw): State<Gateway>,
    headers: HeaderMap,
    body: Result<Bytes, BytesRejection>,
) -> Response {
    let result = async { embed_sparse_of(&gw, &headers, parse(&headers, body)?).await }.await;
    respond(&gw, "embed_sparse", Api::Tei, result)
}

/// TEI's `/embed_sparse` once its body is read (also `POST /`'s answer for a sparse model).
pub(super) async fn embed_sparse_of(
    gw: &Gateway,
    headers: &HeaderMap,
    req: EmbedSparseRequest,
) -> Result<(Times, Response), ApiError> {
    sparse_model(gw)?;
    let tei = Options::tei(
        req.truncate,
        gw.config().auto_truncate,
        req.truncation_direction,
        priority(headers, req.priority)?,
    );
    let options = Options {
        prompt_name: req.prompt_name,
        ..tei
    };
    let Embedded { vectors, times, .. } = gw.embed(req.inputs.0, options).await?;
    let sparse: Vec<Vec<SparseValue>> = vectors
        .iter()
        .map(|row| {
            let entries = row.as_slice().iter().enumerate();
            entries
                .filter(|&(_, &value)| value != 0.0)
                .map(|(index, &value)| SparseValue { index, value })
                .collect()
        })
        .collect();
    Ok((times, Json(sparse).into_response()))
}

impl Gateway {
    /// A Router model's route, which a request names as its `prompt_name` (sentence-transformers'
    /// `encode_query` and `encode_document` name both the task and the prompt): the lookup route's name where
    /// the request names it, its inputs then answered without the engine ([`Gateway::look_up`]). A route's
    /// name that is no prompt's names the route alone: no prompt is put before the text.
    pub(super) fn route(&self, options: &mut Options) -> Option<String> {
        let front = self.front();
        let routes = &front.info().routes;
        let name = options
            .prompt_name
            .as_ref()
            .filter(|n| routes.contains(n))?
            .clone();
        // sentence-transformers' route by name puts no prompt before the text, not the default one.
        if !front.info().prompts.iter().any(|p| p.name == name) {
            options.prompt_name = Some(String::new());
        }
        front.lookup(Some(&name)).map(|_| name)
    }

    /// `inputs` through the lookup route `route`: no queue and no forward pass, each input's vector made where
    /// it is tokenized.
    pub(super) async fn look_up(
        &self,
        route: String,
        inputs: Inputs,
        options: Options,
    ) -> Result<Embedded, ApiError> {
        let start = Instant::now();
        let n = inputs.len();
        let ((data, tokens), tokenization) = self
            .tokenize_with(inputs, move |t, front, inputs| {
                t.look_up(front, &route, inputs, &options)
            })
            .await?;
        let embeddings = Embeddings::from_parts(data, self.front().dim(), &vec![1; n], Vec::new())
            .ok_or_else(|| ApiError::internal("a lookup gave vectors of another width"))?;
        Ok(Embedded {
            vectors: embeddings.into_rows().collect(),
            kept: Vec::new(),
            tokens,
            times: Times {
                tokenization,
                total: start.elapsed(),
                tokens: Some(tokens),
                ..Times::default()
            },
        })
    }
}
