//! The HTTP routes: request and response shapes of the OpenAI and TEI APIs, authentication, timing headers.

use std::borrow::Cow;
use std::time::Instant;

use axum::body::Bytes;
use axum::extract::rejection::BytesRejection;
use axum::extract::{DefaultBodyLimit, Request, State};
use axum::http::{header, HeaderMap, HeaderName, HeaderValue, StatusCode, Uri};
use axum::middleware::{self, Next};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use axum::{Json, Router};
use serde::Serialize;
use sha2::Digest;
use subtle::ConstantTimeEq;

use super::requests::{parse, OpenAiRequest, TeiRequest, TokenizeRequest};
use super::{more_routes, multi_vector, scores, serve, sparse};
use super::{
    Api, ApiError, Embedded, Encoded, EncodingFormat, Gateway, Inputs, Options, Precision, Times,
    Tokenization,
};
use crate::scheduler::Priority;
use crate::{ModelFront, Row};

pub(super) fn router(gateway: Gateway) -> Router {
    let limit = gateway.config().max_payload_bytes;
    let protected = Router::new()
        .route("/v1/embeddings", post(openai_embeddings))
        .route("/v1/models", get(more_routes::models))
        .route("/v1/models/{*model}", get(more_routes::retrieve_model))
        .route("/", post(more_routes::root))
        .route("/embed", post(tei_embed))
        .route("/embed_all", post(more_routes::embed_all))
        .route("/embed_sparse", post(sparse::embed_sparse))
        .route("/embed_multi", post(multi_vector::embed_multi))
        .route("/similarity", post(more_routes::similarity))
        .route("/tokenize", post(tokenize))
        .route("/decode", post(more_routes::decode))
        .route("/rerank", post(scores::rerank))
        .route("/predict", post(scores::predict))
        .route("/v1/rerank", post(scores::cohere_rerank))
        .route("/v2/rerank", post(scores::cohere_rerank))
        .route("/info", get(info))
        .route("/metrics", get(metrics))
        .route_layer(middleware::from_fn_with_state(gateway.clone(), authorize));
    // TEI answers `GET /` as `/health`.
    Router::new()
        .route("/health", get(health))
        .route("/", get(health))
        .merge(protected)
        .fallback(not_found)
        .method_not_allowed_fallback(method_not_allowed)
        .layer(DefaultBodyLimit::max(limit))
        .layer(middleware::from_fn_with_state(
            gateway.clone(),
            serve::read_body,
        ))
        .layer(middleware::from_fn_with_state(
            gateway.clone(),
            serve::track,
        ))
        .with_state(gateway)
}

async fn not_found(uri: Uri) -> Response {
    ApiError::new(
        StatusCode::NOT_FOUND,
        "not_found",
        format!(
            "no route {}; the routes are POST /v1/embeddings, /, /embed, /embed_all, /similarity, /tokenize, /decode, \
             /rerank, /predict, /v1/rerank, /v2/rerank and GET /v1/models, /health, /info, /metrics",
            uri.path()
        ),
    )
    .response(Api::of_path(uri.path()))
}

async fn method_not_allowed(uri: Uri, method: axum::http::Method) -> Response {
    ApiError::new(
        StatusCode::METHOD_NOT_ALLOWED,
        "method_not_allowed",
        format!("{method} is not allowed on {}", uri.path()),
    )
    .response(Api::of_path(uri.path()))
}

/// Checks the API key, if one is set, in constant time (nor does the time depend on the key's length). The scheme is matched without regard to case, as HTTP
/// says (RFC 9110, 11.1).
async fn authorize(State(gw): State<Gateway>, request: Request, next: Next) -> Response {
    let Some(key) = gw.config().api_key.as_deref() else {
        return next.run(request).await;
    };
    let given = request
        .headers()
        .get(header::AUTHORIZATION)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.trim_start().split_once(' '))
        .filter(|(scheme, _)| scheme.eq_ignore_ascii_case("bearer"))
        .map_or("", |(_, token)| token.trim());
    // `ct_eq` on slices returns at once when the lengths differ, which would tell a prober the key's length:
    // digests have one length.
    let digest = |s: &str| sha2::Sha256::digest(s.as_bytes());
    if bool::from(digest(given).ct_eq(&digest(key))) {
        next.run(request).await
    } else {
        gw.metrics().count("any", "unauthorized");
        ApiError::unauthorized().response(Api::of_path(request.uri().path()))
    }
}

/// Counts the outcome and, on success, records the stage times and sends them as headers (milliseconds).
pub(super) fn respond(
    gw: &Gateway,
    route: &'static str,
    api: Api,
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
            if let Some(tokens) = times.tokens {
                response
                    .headers_mut()
                    .insert("x-compute-tokens", HeaderValue::from(tokens));
            }
            response
        }
        Err(e) => {
            gw.metrics().count(route, e.outcome());
            e.response(api)
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

/// The vectors a response carries: each row as the engine wrote it, or, only when asked to change it, a copy:
/// cut to its first `dims` components (Matryoshka truncation) and re-normalized if `normalize`; normalized whole
/// when `normalize_whole` (a model without a Normalize module, asked for unit vectors); or, not `normalize`, the
/// pooled vector before the model's Normalize module (and the cut of that).
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
        .map(|row| match (normalize, dims) {
            (true, Some(d)) => Cow::Owned(normalized(row[..d].to_vec())),
            (true, None) if normalize_whole => Cow::Owned(normalized(row.to_vec())),
            (true, None) => Cow::Borrowed(row.as_slice()),
            (false, d) => match (row.unnormalized(), d) {
                (v, None) => v,
                (Cow::Borrowed(v), Some(d)) => Cow::Borrowed(&v[..d]),
                (Cow::Owned(mut v), Some(d)) => {
                    v.truncate(d);
                    Cow::Owned(v)
                }
            },
        })
        .collect()
}

/// The rows in `format`: the vectors [`shape`] makes of them (int8 reads the pooled ones, before Normalize).
fn encode(
    rows: &[Row],
    dims: Option<usize>,
    normalize: bool,
    normalize_whole: bool,
    format: EncodingFormat,
) -> Vec<Encoded<'_>> {
    let vectors = if format.reads_pooled() {
        shape(rows, dims, false, false)
    } else {
        shape(rows, dims, normalize, normalize_whole)
    };
    vectors.into_iter().map(|v| format.encode(v)).collect()
}

/// An embedding with its `int8_scaled` scale beside it, when it has one.
#[derive(Serialize)]
struct Scaled<'a> {
    embedding: Encoded<'a>,
    #[serde(skip_serializing_if = "Option::is_none")]
    scale: Option<f32>,
}

impl<'a> From<Encoded<'a>> for Scaled<'a> {
    fn from(embedding: Encoded<'a>) -> Self {
        Scaled {
            scale: embedding.scale(),
            embedding,
        }
    }
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
    #[serde(flatten)]
    embedding: Scaled<'a>,
}

#[derive(Serialize)]
struct Usage {
    prompt_tokens: usize,
    total_tokens: usize,
}

/// Refuses a `model` the server does not serve under that name (OpenAI answers 404 `model_not_found`).
pub(super) fn check_model(gw: &Gateway, model: Option<&str>) -> Result<(), ApiError> {
    let config = gw.config();
    match model {
        Some(m) if m != config.model_name && !config.model_aliases.iter().any(|a| a == m) => {
            let mut names = vec![config.model_name.as_str()];
            names.extend(config.model_aliases.iter().map(String::as_str));
            Err(ApiError::new(
                StatusCode::NOT_FOUND,
                "model_not_found",
                format!(
                    "the model `{m}` is not served here; it is served as: {} (`--served-model-name`)",
                    names.join(", ")
                ),
            ))
        }
        _ => Ok(()),
    }
}

/// The header naming a request's priority (`online`, the default, or `batch`).
pub const PRIORITY_HEADER: &str = "x-priority";

/// A request's priority: its body's `priority` field (our extension of both APIs), else the `x-priority` header,
/// else online.
pub(super) fn priority(headers: &HeaderMap, field: Option<Priority>) -> Result<Priority, ApiError> {
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

async fn openai_embeddings(
    State(gw): State<Gateway>,
    headers: HeaderMap,
    body: Result<Bytes, BytesRejection>,
) -> Response {
    let result = async {
        let req: OpenAiRequest = parse(&headers, body)?;
        check_model(&gw, req.model.as_deref())?;
        scores::embedder(&gw)?;
        let dims = check_dims(req.dimensions, gw.front().dim())?;
        let options = Options {
            prompt_name: req.prompt_name,
            truncate: gw.config().auto_truncate,
            direction: Default::default(),
            api: Api::OpenAi,
            priority: priority(&headers, req.priority)?,
            ..Options::default()
        };
        let Embedded {
            vectors,
            tokens,
            times,
            ..
        } = gw.embed(req.input.0, options).await?;
        let data = encode(&vectors, dims, true, false, req.encoding_format)
            .into_iter()
            .enumerate()
            .map(|(index, e)| OpenAiEmbedding {
                object: "embedding",
                index,
                embedding: e.into(),
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
    respond(&gw, "openai", Api::OpenAi, result)
}

/// A TEI `/embed` body parsed and checked as the route does, up to tokenization (the options take
/// `auto_truncate` when the body does not say): what the harness's instruction-count gate measures.
pub fn parse_embed_body(body: &[u8], auto_truncate: bool) -> Result<(Inputs, Options), ApiError> {
    let req: TeiRequest = parse(&HeaderMap::new(), Ok(Bytes::copy_from_slice(body)))?;
    let tei = Options::tei(
        req.truncate,
        auto_truncate,
        req.truncation_direction,
        req.priority.unwrap_or_default(),
    );
    let options = Options {
        prompt_name: req.prompt_name,
        ..tei
    };
    Ok((req.inputs.0, options))
}

async fn tei_embed(
    State(gw): State<Gateway>,
    headers: HeaderMap,
    body: Result<Bytes, BytesRejection>,
) -> Response {
    let result = async { embed_tei(&gw, &headers, parse(&headers, body)?).await }.await;
    respond(&gw, "embed", Api::Tei, result)
}

/// TEI's `/embed` once its body is read (also `POST /`'s answer to an embedding request).
pub(super) async fn embed_tei(
    gw: &Gateway,
    headers: &HeaderMap,
    req: TeiRequest,
) -> Result<(Times, Response), ApiError> {
    // TEI serves a sparse model's whole vector here, unnormalized only.
    if !gw.front().info().sparse || req.normalize {
        scores::embedder(gw)?;
    }
    let dims = check_dims(req.dimensions, gw.front().dim())?;
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
    // The engine's rows are unit length already when the model has a Normalize module.
    let whole = req.normalize && !gw.front().info().normalize;
    let format = req.encoding_format;
    let encoded = encode(&vectors, dims, req.normalize, whole, format);
    // TEI answers bare vectors; a scale has to ride beside its vector.
    let response = if format.precision == Precision::Int8Scaled {
        let scaled: Vec<Scaled> = encoded.into_iter().map(Scaled::from).collect();
        Json(scaled).into_response()
    } else {
        Json(encoded).into_response()
    };
    Ok((times, response))
}

/// TEI's `/tokenize`: each input's tokens (`id`, `text`, `special`, `start`, `stop`) after templating and
/// truncation, as the model would run them.
async fn tokenize(
    State(gw): State<Gateway>,
    headers: HeaderMap,
    body: Result<Bytes, BytesRejection>,
) -> Response {
    let start = Instant::now();
    let result = async {
        let req: TokenizeRequest = parse(&headers, body)?;
        let tei = Options::tei(
            req.truncate,
            gw.config().auto_truncate,
            req.truncation_direction,
            Default::default(),
        );
        let mut options = Options {
            prompt_name: req.prompt_name,
            ..tei
        };
        // A Router's route name is taken as `/embed_sparse` takes it; the tokens shown are the model route's.
        gw.route(&mut options);
        let special = req.add_special_tokens;
        tokenizer_answer(&gw, start, req.inputs.0, move |t, _, inputs| {
            t.tokens(inputs, &options, special)
        })
        .await
    }
    .await;
    respond(&gw, "tokenize", Api::Tei, result)
}

/// The answer of a route that only runs the tokenizers (`/tokenize`, `/decode`): `work`'s result as JSON, its time
/// counted as tokenization.
pub(super) async fn tokenizer_answer<R: Serialize + Send + 'static>(
    gw: &Gateway,
    start: Instant,
    inputs: Inputs,
    work: impl FnOnce(&Tokenization, &ModelFront, Inputs) -> Result<R, ApiError> + Send + 'static,
) -> Result<(Times, Response), ApiError> {
    let (answer, tokenization) = gw.tokenize_with(inputs, work).await?;
    let times = Times {
        tokenization,
        total: start.elapsed(),
        ..Default::default()
    };
    Ok((times, Json(answer).into_response()))
}

async fn health(State(gw): State<Gateway>) -> Response {
    if gw.is_draining() {
        return ApiError::shutting_down().response(Api::Tei);
    }
    // A gateway with no replica up cannot answer: a load balancer should send elsewhere.
    if !gw.replica_states().iter().any(|(_, up)| *up) {
        return ApiError::no_replica().response(Api::Tei);
    }
    Json(serde_json::json!({ "status": "ok" })).into_response()
}

async fn info(State(gw): State<Gateway>) -> Response {
    let front = gw.front();
    let replicas: Vec<_> = gw
        .replica_states()
        .into_iter()
        .map(|(name, up)| serde_json::json!({ "name": name, "up": up }))
        .collect();
    Json(serde_json::json!({
        "model_id": gw.config().model_name,
        "version": env!("CARGO_PKG_VERSION"),
        "model": front.info(),
        "model_type": scores::model_type(front.info()),
        "backend": gw.local_backend(),
        "engine": front.config(),
        "replicas": replicas.len(),
        "replica_states": replicas,
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
