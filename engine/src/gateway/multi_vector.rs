//! A multi-vector (ColBERT) model's route, `/embed_multi`: each input's vectors, one per token the model keeps, in
//! `/embed_all`'s shape. The request names the task as its `prompt_name` (`query`, `document`), as
//! sentence-transformers' `encode_query` and `encode_document` name both the task and the prompt. The dense routes
//! refuse such a model.

use axum::body::Bytes;
use axum::extract::rejection::BytesRejection;
use axum::extract::State;
use axum::http::HeaderMap;
use axum::response::{IntoResponse, Response};
use axum::Json;

use super::input::Direction;
use super::requests::{parse, EmbedAllRequest};
use super::routes::{priority, respond};
use super::{Api, ApiError, Embedded, Gateway, Options};
use crate::multi_vector::Task;

pub(super) async fn embed_multi(
    State(gw): State<Gateway>,
    headers: HeaderMap,
    body: Result<Bytes, BytesRejection>,
) -> Response {
    let result = async {
        let req: EmbedAllRequest = parse(&headers, body)?;
        let Some(mv) = gw.front().multi_vector() else {
            return Err(ApiError::unprocessable(
                "wrong_model_type",
                "this model gives one vector per input; /embed_multi needs a multi-vector (ColBERT) model (a \
                 MultiVectorEncoder, or a PyLate save)",
            ));
        };
        // Each task has its own limit, and a query's expansion follows its text: cut from the right only, as
        // sentence-transformers cuts.
        if req.truncation_direction == Direction::Left {
            return Err(ApiError::unprocessable(
                "unsupported",
                "a multi-vector model's inputs are cut from the right only (truncation_direction: right)",
            ));
        }
        let tei = Options::tei(
            req.truncate,
            gw.config().auto_truncate,
            req.truncation_direction,
            priority(&headers, req.priority)?,
        );
        let readout = mv.readout(Task::named(req.prompt_name.as_deref()));
        let options = Options {
            prompt_name: req.prompt_name,
            readout,
            ..tei
        };
        let Embedded {
            vectors,
            kept,
            times,
            ..
        } = gw.embed(req.inputs.0, options).await?;
        let answer: Vec<Vec<&[f32]>> = vectors
            .iter()
            .zip(&kept)
            .map(|(row, kept)| {
                let tokens = row.vectors().zip(kept);
                tokens.filter(|(_, k)| **k).map(|(v, _)| v).collect()
            })
            .collect();
        Ok((times, Json(answer).into_response()))
    }
    .await;
    respond(&gw, "embed_multi", Api::Tei, result)
}
