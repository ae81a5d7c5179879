//! The gateway's errors, in one shape per surface: OpenAI's `{"error": {"message", "type", "code"}}` on its routes
//! (under `/v1/`), TEI's `{"error", "error_type"}` on the others, each with the matching HTTP status.

use std::time::Duration;

use axum::http::{header, HeaderValue, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::Json;

use crate::scheduler;

/// An error answered to a client. `code` is stable and machine-readable; `message` says what was wrong.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ApiError {
    pub status: StatusCode,
    pub code: &'static str,
    pub message: String,
    /// Sent as `Retry-After` (whole seconds, at least 1) with a refusal for load.
    pub retry_after: Option<Duration>,
}

impl ApiError {
    pub fn bad_request(code: &'static str, message: impl Into<String>) -> Self {
        Self::new(StatusCode::BAD_REQUEST, code, message)
    }

    pub fn too_large(code: &'static str, message: impl Into<String>) -> Self {
        Self::new(StatusCode::PAYLOAD_TOO_LARGE, code, message)
    }

    pub fn unprocessable(code: &'static str, message: impl Into<String>) -> Self {
        Self::new(StatusCode::UNPROCESSABLE_ENTITY, code, message)
    }

    pub fn unauthorized() -> Self {
        Self::new(
            StatusCode::UNAUTHORIZED,
            "invalid_api_key",
            "missing or wrong API key: send `Authorization: Bearer <key>`",
        )
    }

    /// A refusal while the server drains; `Retry-After` points a client at the server's successor.
    pub fn shutting_down() -> Self {
        ApiError {
            retry_after: Some(Duration::from_secs(1)),
            ..Self::new(
                StatusCode::SERVICE_UNAVAILABLE,
                "shutting_down",
                "the server is shutting down",
            )
        }
    }

    /// No replica is up to take the request (a gateway in front of remote replicas).
    pub fn no_replica() -> Self {
        ApiError {
            retry_after: Some(Duration::from_secs(1)),
            ..Self::new(
                StatusCode::SERVICE_UNAVAILABLE,
                "no_replica",
                "no replica is up to take the request",
            )
        }
    }

    /// A piece of the request was lost with its replica and the gateway's retry budget is spent.
    pub fn retries_spent(reason: &str) -> Self {
        ApiError {
            retry_after: Some(Duration::from_secs(1)),
            ..Self::new(
                StatusCode::SERVICE_UNAVAILABLE,
                "replica_failed",
                format!("{reason}, and the gateway's retry budget is spent"),
            )
        }
    }

    pub fn internal(message: impl Into<String>) -> Self {
        Self::new(StatusCode::INTERNAL_SERVER_ERROR, "internal", message)
    }

    pub(crate) fn new(status: StatusCode, code: &'static str, message: impl Into<String>) -> Self {
        ApiError {
            status,
            code,
            message: message.into(),
            retry_after: None,
        }
    }

    /// OpenAI's `type`, one per status class.
    pub fn kind(&self) -> &'static str {
        match self.status {
            StatusCode::UNAUTHORIZED => "authentication_error",
            StatusCode::TOO_MANY_REQUESTS => "overloaded_error",
            StatusCode::SERVICE_UNAVAILABLE => "unavailable_error",
            s if s.is_client_error() => "invalid_request_error",
            _ => "server_error",
        }
    }

    /// The label of this outcome in the request counters.
    pub fn outcome(&self) -> &'static str {
        match self.status {
            StatusCode::BAD_REQUEST => "bad_request",
            StatusCode::UNAUTHORIZED => "unauthorized",
            StatusCode::PAYLOAD_TOO_LARGE => "too_large",
            StatusCode::UNPROCESSABLE_ENTITY => "unprocessable",
            StatusCode::NOT_FOUND => "not_found",
            StatusCode::UNSUPPORTED_MEDIA_TYPE => "unsupported_media_type",
            StatusCode::TOO_MANY_REQUESTS => "overloaded",
            StatusCode::SERVICE_UNAVAILABLE => "shutting_down",
            _ => "error",
        }
    }
}

impl From<scheduler::Error> for ApiError {
    fn from(e: scheduler::Error) -> Self {
        match e {
            scheduler::Error::Overloaded { retry_after, .. }
            | scheduler::Error::Expired { retry_after, .. } => {
                let code = match e {
                    scheduler::Error::Expired { .. } => "deadline_exceeded",
                    _ => "overloaded",
                };
                ApiError {
                    retry_after: Some(retry_after),
                    ..Self::new(StatusCode::TOO_MANY_REQUESTS, code, e.to_string())
                }
            }
            scheduler::Error::ShuttingDown => Self::shutting_down(),
            scheduler::Error::Batch(_) => Self::internal(e.to_string()),
        }
    }
}

impl ApiError {
    /// TEI's `error_type`: its own names (`validation`, `empty`, `tokenizer`, `overloaded`, `unhealthy`,
    /// `backend`), and `unauthorized`, which TEI answers without a body.
    pub fn tei_type(&self) -> &'static str {
        match (self.status, self.code) {
            (_, "empty_input") => "empty",
            (_, "tokenization_failed") => "tokenizer",
            (StatusCode::UNAUTHORIZED, _) => "unauthorized",
            (StatusCode::TOO_MANY_REQUESTS, _) => "overloaded",
            (StatusCode::SERVICE_UNAVAILABLE, _) => "unhealthy",
            (s, _) if s.is_client_error() => "validation",
            _ => "backend",
        }
    }

    /// The response in the shape of `api`.
    pub fn response(self, api: Api) -> Response {
        let body = match api {
            Api::OpenAi => serde_json::json!({
                "error": { "message": self.message, "type": self.kind(), "code": self.code }
            }),
            Api::Tei => serde_json::json!({ "error": self.message, "error_type": self.tei_type() }),
        };
        let mut response = (self.status, Json(body)).into_response();
        if let Some(after) = self.retry_after {
            // Retry-After takes whole seconds; rounding up keeps a retry from coming back too soon.
            let secs = after.as_secs() + u64::from(after.subsec_nanos() > 0);
            response
                .headers_mut()
                .insert(header::RETRY_AFTER, HeaderValue::from(secs.max(1)));
        }
        response
    }
}

/// The API whose conventions a route follows.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub enum Api {
    #[default]
    OpenAi,
    Tei,
}

impl Api {
    /// OpenAI's routes (and Cohere's rerank) are under `/v1/` and `/v2/`; the others (`/embed`, `/tokenize`,
    /// `/rerank`, `/health`, `/info`, `/metrics`) are TEI's.
    pub fn of_path(path: &str) -> Api {
        if path.starts_with("/v1/") || path.starts_with("/v2/") {
            Api::OpenAi
        } else {
            Api::Tei
        }
    }
}
