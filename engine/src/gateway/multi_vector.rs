//! A multi-vector (ColBERT) model's route, `/embed_multi`: each input's vectors, one per token the model keeps, in
//! `/embed_all`'s shape. The request names the task as its `prompt_name` (`query`, `document`), as
//! sentence-transformers' `encode_query` and `encode_document` name both the task and the prompt. The dense routes
//! refuse such a model; the rerank routes rank by its MaxSim ([`max_sim`]).

use axum::body::Bytes;
use axum::extract::rejection::BytesRejection;
use axum::extract::State;
use axum::http::HeaderMap;
use axum::response::{IntoResponse, Response};
use axum::Json;

use super::input::Direction;
use super::requests::{parse, EmbedAllRequest};
use super::routes::{priority, respond};
use super::{Api, ApiError, Embedded, Gateway, Inputs, Options, Times};
use crate::multi_vector::Task;

/// Each task has its own limit, and a query's expansion follows its text: a multi-vector model's inputs are cut
/// from the right only, as sentence-transformers cuts them.
fn right_cut(direction: Direction) -> Result<(), ApiError> {
    match direction {
        Direction::Right => Ok(()),
        Direction::Left => Err(ApiError::unprocessable(
            "unsupported",
            "a multi-vector model's inputs are cut from the right only (truncation_direction: right)",
        )),
    }
}

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
        right_cut(req.truncation_direction)?;
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
        let embedded = gw.embed(req.inputs.0, options).await?;
        let answer: Vec<Vec<&[f32]>> = (0..embedded.vectors.len())
            .map(|i| kept(&embedded, i).collect())
            .collect();
        Ok((embedded.times, Json(answer).into_response()))
    }
    .await;
    respond(&gw, "embed_multi", Api::Tei, result)
}

/// Each passage's relevance to `query` by the model's MaxSim: the query embedded as a query and the passages as
/// documents (their tasks' prompts, limits and the query's expansion), both requests in the queues at once; the
/// tokens of both, and the stages' times (tokenization added, queue and inference the longer of the two).
pub(super) async fn max_sim(
    gw: &Gateway,
    query: &str,
    passages: Vec<String>,
    options: Options,
) -> Result<(Vec<f32>, usize, Times), ApiError> {
    right_cut(options.direction)?;
    let start = std::time::Instant::now();
    let mv = gw
        .front()
        .multi_vector()
        .ok_or_else(|| ApiError::internal("MaxSim of a model that is not multi-vector"))?;
    let as_task = |name: &str| Options {
        prompt_name: Some(name.into()),
        readout: mv.readout(Task::named(Some(name))),
        ..options.clone()
    };
    let (q, d) = tokio::try_join!(
        gw.embed(Inputs::Texts(vec![query.to_owned()]), as_task("query")),
        gw.embed(Inputs::Texts(passages), as_task("document")),
    )?;
    let query: Vec<&[f32]> = kept(&q, 0).collect();
    let relevance = (0..d.vectors.len())
        .map(|i| mv.max_sim(query.iter().copied(), &kept(&d, i).collect::<Vec<_>>()))
        .collect();
    let times = Times {
        tokenization: q.times.tokenization + d.times.tokenization,
        queue: q.times.queue.max(d.times.queue),
        inference: q.times.inference.max(d.times.inference),
        total: start.elapsed(),
        tokens: Some(q.tokens + d.tokens),
    };
    Ok((relevance, q.tokens + d.tokens, times))
}

/// Input `i`'s vectors that the model keeps.
fn kept(e: &Embedded, i: usize) -> impl Iterator<Item = &[f32]> {
    let keep = e.kept.get(i).map_or(&[][..], Vec::as_slice);
    let vectors = e.vectors.get(i).into_iter().flat_map(|r| r.vectors());
    vectors.zip(keep).filter(|(_, k)| **k).map(|(v, _)| v)
}
