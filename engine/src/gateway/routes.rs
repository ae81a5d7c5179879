//! The HTTP routes: request and response shapes of the OpenAI and TEI APIs, authentication, timing headers.

use std::borrow::Cow;
use std::time::Instant;

use axum::body::Bytes;
use axum::extract::rejection::BytesRejection;
use axum::extract::{DefaultBodyLimit, Request, State};
use axum::http::{header, HeaderMap, HeaderName, HeaderValue, StatusCode};
use axum::middleware::{self, Next};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use axum::{Json, Router};
use base64::Engine as _;
use serde::de::DeserializeOwned;
use serde::{Deserialize, Serialize};
use subtle::ConstantTimeEq;

use super::{ApiError, Direction, Embedded, Gateway, Inputs, Options, Times};
use crate::scheduler::Priority;
use crate::Row;

pub(super) fn router(gateway: Gateway) -> Router {
    let limit = gateway.config().max_payload_bytes;
    let protected = Router::new()
        .route("/v1/embeddings", post(openai_embeddings))
        .route("/embed", post(tei_embed))
        .route("/tokenize", post(tokenize))
        .route("/info", get(info))
        .route("/metrics", get(metrics))
        .route_layer(middleware::from_fn_with_state(gateway.clone(), authorize));
    Router::new()
        .route("/health", get(health))
        .merge(protected)
        .layer(DefaultBodyLimit::max(limit))
        .with_state(gateway)
}

/// Checks the API key, if one is set, in constant time.
async fn authorize(State(gw): State<Gateway>, request: Request, next: Next) -> Response {
    let Some(key) = gw.config().api_key.as_deref() else {
        return next.run(request).await;
    };
    let given = request
        .headers()
        .get(header::AUTHORIZATION)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.strip_prefix("Bearer "))
        .unwrap_or("");
    if bool::from(given.as_bytes().ct_eq(key.as_bytes())) {
        next.run(request).await
    } else {
        gw.metrics().count("any", "unauthorized");
        ApiError::unauthorized().into_response()
    }
}

/// Parses a JSON body: a body over the size limit is 413, bad UTF-8 or bad JSON 400, a JSON value of the wrong
/// shape 400.
fn parse<T: DeserializeOwned>(body: Result<Bytes, BytesRejection>) -> Result<T, ApiError> {
    let body = body.map_err(|e| match e.status() {
        StatusCode::PAYLOAD_TOO_LARGE => ApiError::too_large("payload_too_large", e.body_text()),
        _ => ApiError::bad_request("invalid_body", e.body_text()),
    })?;
    if let Err(e) = std::str::from_utf8(&body) {
        return Err(ApiError::bad_request(
            "invalid_utf8",
            format!("the body is not valid UTF-8: {e}"),
        ));
    }
    serde_json::from_slice(&body).map_err(|e| {
        let code = match e.classify() {
            serde_json::error::Category::Data => "invalid_type",
            _ => "invalid_json",
        };
        ApiError::bad_request(code, format!("invalid request body: {e}"))
    })
}

/// The header naming a request's priority (`online`, the default, or `batch`).
pub const PRIORITY_HEADER: &str = "x-priority";

/// A request's priority: its body's `priority` field (our extension of both APIs), else the `x-priority` header,
/// else online.
fn priority(headers: &HeaderMap, field: Option<Priority>) -> Result<Priority, ApiError> {
    if let Some(p) = field {
        return Ok(p);
    }
    let Some(value) = headers.get(PRIORITY_HEADER) else {
        return Ok(Priority::default());
    };
    value
        .to_str()
        .map_err(|e| e.to_string())
        .and_then(str::parse)
        .map_err(|e| ApiError::bad_request("invalid_priority", format!("{PRIORITY_HEADER}: {e}")))
}

/// Counts the outcome and, on success, records the stage times and sends them as headers (milliseconds).
fn respond(
    gw: &Gateway,
    route: &'static str,
    result: Result<(Times, Response), ApiError>,
) -> Response {
    match result {
        Ok((times, mut response)) => {
            gw.metrics().count(route, "ok");
            gw.metrics().record_times(&times);
            for (stage, d) in times.stages() {
                let name = HeaderName::try_from(format!("x-{stage}-time"));
                let value = HeaderValue::from_str(&format!("{:.3}", d.as_secs_f64() * 1e3));
                if let (Ok(name), Ok(value)) = (name, value) {
                    response.headers_mut().insert(name, value);
                }
            }
            response
        }
        Err(e) => {
            gw.metrics().count(route, e.outcome());
            e.into_response()
        }
    }
}

/// Checks a requested Matryoshka size before any work is done.
fn check_dims(dims: Option<usize>, full: usize) -> Result<Option<usize>, ApiError> {
    match dims {
        Some(d) if d == 0 || d > full => Err(ApiError::bad_request(
            "invalid_dimensions",
            format!("dimensions must be between 1 and the model's {full}, not {d}"),
        )),
        _ => Ok(dims),
    }
}

/// The vectors a response carries: each row as the engine wrote it, or, only when asked to change it, a copy cut
/// to its first `dims` components (Matryoshka truncation) and re-normalized if `normalize`, or normalized whole
/// when `normalize_whole` (a model without a Normalize module, asked for unit vectors).
fn shape(
    rows: &[Row],
    dims: Option<usize>,
    normalize: bool,
    normalize_whole: bool,
) -> Vec<Cow<'_, [f32]>> {
    let normalized = |mut v: Vec<f32>| {
        crate::backend::l2_normalize(&mut v);
        v
    };
    rows.iter()
        .map(|row| match dims {
            Some(d) if normalize => Cow::Owned(normalized(row[..d].to_vec())),
            Some(d) => Cow::Borrowed(&row[..d]),
            None if normalize_whole => Cow::Owned(normalized(row.to_vec())),
            None => Cow::Borrowed(row.as_slice()),
        })
        .collect()
}

#[derive(Deserialize)]
#[serde(untagged)]
enum OpenAiInput {
    Text(String),
    Texts(Vec<String>),
    Ids(Vec<u32>),
    IdLists(Vec<Vec<u32>>),
}

#[derive(Deserialize, Default, Clone, Copy, PartialEq, Eq)]
#[serde(rename_all = "lowercase")]
enum EncodingFormat {
    #[default]
    Float,
    Base64,
}

/// OpenAI's embeddings request; fields it defines that change nothing here (`user`) are accepted and ignored.
#[derive(Deserialize)]
struct OpenAiRequest {
    input: OpenAiInput,
    #[serde(default)]
    encoding_format: EncodingFormat,
    dimensions: Option<usize>,
    /// Not OpenAI's: a prompt of the model's `config_sentence_transformers.json`.
    prompt_name: Option<String>,
    /// Not OpenAI's: `online` or `batch` (as the `x-priority` header).
    priority: Option<Priority>,
}

#[derive(Serialize)]
#[serde(untagged)]
enum Vector<'a> {
    Float(Cow<'a, [f32]>),
    Base64(String),
}

/// OpenAI's response, serialized straight from the rows.
#[derive(Serialize)]
struct OpenAiResponse<'a> {
    object: &'static str,
    data: Vec<OpenAiEmbedding<'a>>,
    model: &'a str,
    usage: Usage,
}

#[derive(Serialize)]
struct OpenAiEmbedding<'a> {
    object: &'static str,
    index: usize,
    embedding: Vector<'a>,
}

#[derive(Serialize)]
struct Usage {
    prompt_tokens: usize,
    total_tokens: usize,
}

async fn openai_embeddings(
    State(gw): State<Gateway>,
    headers: HeaderMap,
    body: Result<Bytes, BytesRejection>,
) -> Response {
    let result = async {
        let req: OpenAiRequest = parse(body)?;
        let dims = check_dims(req.dimensions, gw.engine().dim())?;
        let inputs = match req.input {
            OpenAiInput::Text(t) => Inputs::Texts(vec![t]),
            OpenAiInput::Texts(t) => Inputs::Texts(t),
            OpenAiInput::Ids(ids) => Inputs::Ids(vec![ids]),
            OpenAiInput::IdLists(ids) => Inputs::Ids(ids),
        };
        let options = Options {
            prompt_name: req.prompt_name,
            truncate: gw.config().auto_truncate,
            direction: Direction::Right,
            priority: priority(&headers, req.priority)?,
        };
        let Embedded {
            vectors,
            tokens,
            times,
        } = gw.embed(inputs, options).await?;
        let data = shape(&vectors, dims, true, false)
            .into_iter()
            .enumerate()
            .map(|(index, v)| OpenAiEmbedding {
                object: "embedding",
                index,
                embedding: match req.encoding_format {
                    EncodingFormat::Float => Vector::Float(v),
                    EncodingFormat::Base64 => {
                        let bytes: Vec<u8> = v.iter().flat_map(|x| x.to_le_bytes()).collect();
                        Vector::Base64(base64::engine::general_purpose::STANDARD.encode(bytes))
                    }
                },
            })
            .collect();
        let body = OpenAiResponse {
            object: "list",
            data,
            model: &gw.config().model_name,
            usage: Usage {
                prompt_tokens: tokens,
                total_tokens: tokens,
            },
        };
        Ok((times, Json(body).into_response()))
    }
    .await;
    respond(&gw, "openai", result)
}

#[derive(Deserialize)]
#[serde(untagged)]
enum TeiInput {
    One(String),
    Many(Vec<String>),
}

impl From<TeiInput> for Inputs {
    fn from(i: TeiInput) -> Self {
        match i {
            TeiInput::One(t) => Inputs::Texts(vec![t]),
            TeiInput::Many(t) => Inputs::Texts(t),
        }
    }
}

fn yes() -> bool {
    true
}

/// TEI's `/embed` request.
#[derive(Deserialize)]
struct TeiRequest {
    inputs: TeiInput,
    /// The model's output is already normalized when it has a Normalize module; then `false` changes nothing.
    #[serde(default = "yes")]
    normalize: bool,
    truncate: Option<bool>,
    #[serde(default)]
    truncation_direction: Direction,
    prompt_name: Option<String>,
    dimensions: Option<usize>,
    /// Not TEI's: `online` or `batch` (as the `x-priority` header).
    priority: Option<Priority>,
}

/// A TEI `/embed` body parsed and checked as the route does, up to tokenization (the options take
/// `auto_truncate` when the body does not say): what the harness's instruction-count gate measures.
pub fn parse_embed_body(body: &[u8], auto_truncate: bool) -> Result<(Inputs, Options), ApiError> {
    let req: TeiRequest = parse(Ok(Bytes::copy_from_slice(body)))?;
    let options = Options {
        prompt_name: req.prompt_name,
        truncate: req.truncate.unwrap_or(auto_truncate),
        direction: req.truncation_direction,
        priority: req.priority.unwrap_or_default(),
    };
    Ok((req.inputs.into(), options))
}

async fn tei_embed(
    State(gw): State<Gateway>,
    headers: HeaderMap,
    body: Result<Bytes, BytesRejection>,
) -> Response {
    let result = async {
        let req: TeiRequest = parse(body)?;
        let dims = check_dims(req.dimensions, gw.engine().dim())?;
        let options = Options {
            prompt_name: req.prompt_name,
            truncate: req.truncate.unwrap_or(gw.config().auto_truncate),
            direction: req.truncation_direction,
            priority: priority(&headers, req.priority)?,
        };
        let Embedded { vectors, times, .. } = gw.embed(req.inputs.into(), options).await?;
        // The model's output is already unit length when it has a Normalize module.
        let whole = req.normalize && !gw.engine().info().normalize;
        let vectors = shape(&vectors, dims, req.normalize, whole);
        Ok((times, Json(vectors).into_response()))
    }
    .await;
    respond(&gw, "embed", result)
}

/// `/tokenize`: the ids the model would run for each input, after templating and truncation.
#[derive(Deserialize)]
struct TokenizeRequest {
    inputs: TeiInput,
    prompt_name: Option<String>,
    truncate: Option<bool>,
    #[serde(default)]
    truncation_direction: Direction,
}

async fn tokenize(State(gw): State<Gateway>, body: Result<Bytes, BytesRejection>) -> Response {
    let start = Instant::now();
    let result = async {
        let req: TokenizeRequest = parse(body)?;
        let options = Options {
            prompt_name: req.prompt_name,
            truncate: req.truncate.unwrap_or(gw.config().auto_truncate),
            direction: req.truncation_direction,
            ..Options::default()
        };
        let (ids, tokenization) = gw.tokenize(req.inputs.into(), options).await?;
        let times = Times {
            tokenization,
            total: start.elapsed(),
            ..Default::default()
        };
        Ok((times, Json(ids).into_response()))
    }
    .await;
    respond(&gw, "tokenize", result)
}

async fn health(State(gw): State<Gateway>) -> Response {
    if gw.is_draining() {
        return ApiError::shutting_down().into_response();
    }
    Json(serde_json::json!({ "status": "ok" })).into_response()
}

async fn info(State(gw): State<Gateway>) -> Response {
    let engine = gw.engine();
    Json(serde_json::json!({
        "model_id": gw.config().model_name,
        "version": env!("CARGO_PKG_VERSION"),
        "model": engine.info(),
        "backend": engine.backend().info(),
        "engine": engine.config(),
        "replicas": gw.loads().len(),
        "max_input_length": gw.inner.tokenization.max_len(),
        "gateway": gw.config(),
        "api_key": gw.config().api_key.is_some(),
    }))
    .into_response()
}

async fn metrics(State(gw): State<Gateway>) -> Response {
    let text = gw.metrics().render(&gw.loads());
    ([(header::CONTENT_TYPE, "text/plain; version=0.0.4")], text).into_response()
}
