//! Request bodies of both surfaces and how they are read: content type, size, UTF-8, JSON, and the one input
//! grammar OpenAI's `input` and TEI's `inputs` share, with messages that name the field rather than Rust types.

use std::fmt;

use axum::body::Bytes;
use axum::extract::rejection::BytesRejection;
use axum::http::{header, HeaderMap, StatusCode};
use serde::de::{self, DeserializeOwned, Deserializer, SeqAccess, Visitor};
use serde::Deserialize;

use super::{ApiError, Direction, EncodingFormat, Inputs};
use crate::scheduler::Priority;

/// What a request may embed: a string, an array of strings, an array of token ids (one input), or an array of
/// arrays of token ids. Strings and id lists are not mixed in one request.
pub(super) struct InputField(pub Inputs);

const EXPECTED: &str =
    "a string, an array of strings, an array of token ids or an array of arrays of token ids";

impl<'de> Deserialize<'de> for InputField {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        d.deserialize_any(InputVisitor).map(InputField)
    }
}

struct InputVisitor;

impl<'de> Visitor<'de> for InputVisitor {
    type Value = Inputs;

    fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
        f.write_str(EXPECTED)
    }

    fn visit_str<E: de::Error>(self, s: &str) -> Result<Inputs, E> {
        Ok(Inputs::Texts(vec![s.to_owned()]))
    }

    fn visit_string<E: de::Error>(self, s: String) -> Result<Inputs, E> {
        Ok(Inputs::Texts(vec![s]))
    }

    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<Inputs, A::Error> {
        // The first element decides which of the three array forms this is; the rest must follow it.
        let Some(first) = seq.next_element::<Element>()? else {
            return Ok(Inputs::Texts(Vec::new()));
        };
        let mixed =
            || de::Error::custom(format!("mixes strings and token ids; expected {EXPECTED}"));
        match first {
            Element::Text(t) => {
                let mut texts = vec![t];
                while let Some(e) = seq.next_element::<Element>()? {
                    match e {
                        Element::Text(t) => texts.push(t),
                        _ => return Err(mixed()),
                    }
                }
                Ok(Inputs::Texts(texts))
            }
            Element::Id(id) => {
                let mut ids = vec![id];
                while let Some(e) = seq.next_element::<Element>()? {
                    match e {
                        Element::Id(id) => ids.push(id),
                        _ => return Err(mixed()),
                    }
                }
                Ok(Inputs::Ids(vec![ids]))
            }
            Element::Ids(ids) => {
                let mut lists = vec![ids];
                while let Some(e) = seq.next_element::<Element>()? {
                    match e {
                        Element::Ids(ids) => lists.push(ids),
                        _ => return Err(mixed()),
                    }
                }
                Ok(Inputs::Ids(lists))
            }
        }
    }
}

/// One element of an input array.
enum Element {
    Text(String),
    Id(u32),
    Ids(Vec<u32>),
}

impl<'de> Deserialize<'de> for Element {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct ElementVisitor;
        impl<'de> Visitor<'de> for ElementVisitor {
            type Value = Element;

            fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
                write!(
                    f,
                    "a string, a token id or an array of token ids as an array element (the whole: {EXPECTED})"
                )
            }

            fn visit_str<E: de::Error>(self, s: &str) -> Result<Element, E> {
                Ok(Element::Text(s.to_owned()))
            }

            fn visit_string<E: de::Error>(self, s: String) -> Result<Element, E> {
                Ok(Element::Text(s))
            }

            fn visit_u64<E: de::Error>(self, v: u64) -> Result<Element, E> {
                u32::try_from(v)
                    .map(Element::Id)
                    .map_err(|_| E::custom(format!("token id {v} is out of range")))
            }

            fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<Element, A::Error> {
                let mut ids = Vec::with_capacity(seq.size_hint().unwrap_or(0));
                while let Some(id) = seq.next_element::<u32>()? {
                    ids.push(id);
                }
                Ok(Element::Ids(ids))
            }
        }
        d.deserialize_any(ElementVisitor)
    }
}

/// OpenAI's embeddings request; fields it defines that change nothing here (`user`) are accepted and ignored.
#[derive(Deserialize)]
pub(super) struct OpenAiRequest {
    pub input: InputField,
    /// One of the served names (`--served-model-name`), or absent.
    pub model: Option<String>,
    /// OpenAI's `float` and `base64`, and ours: int8, int8_scaled, binary, ubinary (each also `_base64`).
    #[serde(default)]
    pub encoding_format: EncodingFormat,
    pub dimensions: Option<usize>,
    /// Not OpenAI's: a prompt of the model's `config_sentence_transformers.json`.
    pub prompt_name: Option<String>,
    /// Not OpenAI's: `online` or `batch` (as the `x-priority` header).
    pub priority: Option<Priority>,
}

fn yes() -> bool {
    true
}

/// TEI's `/embed` request.
#[derive(Deserialize)]
pub(super) struct TeiRequest {
    pub inputs: InputField,
    #[serde(default = "yes")]
    pub normalize: bool,
    pub truncate: Option<bool>,
    #[serde(default)]
    pub truncation_direction: Direction,
    pub prompt_name: Option<String>,
    pub dimensions: Option<usize>,
    /// Not TEI's: the output format, named as on OpenAI's route.
    #[serde(default)]
    pub encoding_format: EncodingFormat,
    /// Not TEI's: `online` or `batch` (as the `x-priority` header).
    pub priority: Option<Priority>,
}

/// TEI's `/embed_all` request: every token's last hidden state.
#[derive(Deserialize)]
pub(super) struct EmbedAllRequest {
    pub inputs: InputField,
    pub truncate: Option<bool>,
    #[serde(default)]
    pub truncation_direction: Direction,
    pub prompt_name: Option<String>,
    /// Not TEI's: `online` or `batch` (as the `x-priority` header).
    pub priority: Option<Priority>,
}

/// TEI's `/embed_sparse` request, whose fields are `/embed_all`'s.
pub(super) type EmbedSparseRequest = EmbedAllRequest;

/// TEI's `/similarity` request (and the Inference API's `sentence-similarity` task, which `POST /` takes).
#[derive(Deserialize)]
pub(super) struct SimilarityRequest {
    pub inputs: SimilarityInputs,
    pub parameters: Option<SimilarityParameters>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct SimilarityInputs {
    pub source_sentence: String,
    pub sentences: Vec<String>,
}

#[derive(Deserialize, Default)]
pub(super) struct SimilarityParameters {
    pub truncate: Option<bool>,
    #[serde(default)]
    pub truncation_direction: Direction,
    pub prompt_name: Option<String>,
}

/// TEI's `/decode` request: one list of ids or a list of them.
#[derive(Deserialize)]
pub(super) struct DecodeRequest {
    pub ids: InputField,
    #[serde(default = "yes")]
    pub skip_special_tokens: bool,
}

/// TEI's `/tokenize` request (and our truncation fields, as `/embed` has them).
#[derive(Deserialize)]
pub(super) struct TokenizeRequest {
    pub inputs: InputField,
    #[serde(default = "yes")]
    pub add_special_tokens: bool,
    pub prompt_name: Option<String>,
    pub truncate: Option<bool>,
    #[serde(default)]
    pub truncation_direction: Direction,
}

/// TEI's `/rerank` request: `query` against each of `texts`.
#[derive(Deserialize)]
pub(super) struct RerankRequest {
    pub query: String,
    pub texts: Vec<String>,
    /// The logits, not their sigmoid.
    #[serde(default)]
    pub raw_scores: bool,
    /// Each rank with its text.
    #[serde(default)]
    pub return_text: bool,
    pub truncate: Option<bool>,
    #[serde(default)]
    pub truncation_direction: Direction,
    /// Not TEI's: `online` or `batch` (as the `x-priority` header).
    pub priority: Option<Priority>,
}

/// TEI's `/predict` request.
#[derive(Deserialize)]
pub(super) struct PredictRequest {
    pub inputs: PredictInputs,
    /// The logits, not their sigmoid (one label) or softmax (several).
    #[serde(default)]
    pub raw_scores: bool,
    pub truncate: Option<bool>,
    #[serde(default)]
    pub truncation_direction: Direction,
    /// Not TEI's: `online` or `batch` (as the `x-priority` header).
    pub priority: Option<Priority>,
}

/// `/predict`'s `inputs`, read as TEI reads them: one input is a text, `[text]` or a pair `[a, b]` (so `["a",
/// "b"]` is one pair); a list of inputs is an array of `[text]` and `[a, b]` arrays, which may mix.
#[derive(Deserialize)]
#[serde(
    untagged,
    expecting = "a text, [text], [text, text], or an array of [text] and [text, text] arrays"
)]
pub(super) enum PredictInputs {
    One(Sequence),
    Many(Vec<Listed>),
}

/// One input of `/predict`: a text, or one in an array.
#[derive(Deserialize)]
#[serde(untagged, expecting = "a text, [text] or [text, text]")]
pub(super) enum Sequence {
    Text(String),
    Listed(Listed),
}

/// A text alone or a pair of texts, as an array.
#[derive(Deserialize)]
#[serde(untagged, expecting = "[text] or [text, text]")]
pub(super) enum Listed {
    Text([String; 1]),
    Pair(String, String),
}

impl Sequence {
    /// The text, and the second text of a pair.
    pub fn into_pair(self) -> (String, Option<String>) {
        match self {
            Sequence::Text(a) => (a, None),
            Sequence::Listed(l) => l.into_pair(),
        }
    }
}

impl Listed {
    pub fn into_pair(self) -> (String, Option<String>) {
        match self {
            Listed::Text([a]) => (a, None),
            Listed::Pair(a, b) => (a, Some(b)),
        }
    }
}

/// Cohere's rerank request (`/v1/rerank`, `/v2/rerank`; Jina's and vLLM's are the same). Its other fields are
/// accepted and ignored (`max_tokens_per_doc`: a pair is cut to the model's limit); v1's `rank_fields` over
/// documents of several fields is not read: a document is a string or has a `text`.
#[derive(Deserialize)]
pub(super) struct CohereRerankRequest {
    pub model: Option<String>,
    pub query: String,
    pub documents: Vec<Document>,
    pub top_n: Option<usize>,
    #[serde(default)]
    pub return_documents: bool,
    /// Not Cohere's: `online` or `batch` (as the `x-priority` header).
    pub priority: Option<Priority>,
}

/// A document to rank: a string, or an object with its `text` (Cohere's v1 and Jina's form).
#[derive(Deserialize)]
#[serde(untagged, expecting = "a string, or an object with a string `text`")]
pub(super) enum Document {
    Text(String),
    Object { text: String },
}

impl Document {
    pub fn into_text(self) -> String {
        match self {
            Document::Text(t) | Document::Object { text: t } => t,
        }
    }
}

/// Reads a JSON body: a content type other than JSON is 415 (none at all is read as JSON), a body over the size
/// limit 413, bad UTF-8, bad JSON or a value of the wrong shape 400.
pub(super) fn parse<T: DeserializeOwned>(
    headers: &HeaderMap,
    body: Result<Bytes, BytesRejection>,
) -> Result<T, ApiError> {
    if let Some(kind) = headers.get(header::CONTENT_TYPE) {
        let kind = kind.to_str().unwrap_or("");
        let essence = kind.split(';').next().unwrap_or("").trim();
        let json = essence.eq_ignore_ascii_case("application/json")
            || essence.to_ascii_lowercase().ends_with("+json");
        if !json {
            return Err(ApiError::new(
                StatusCode::UNSUPPORTED_MEDIA_TYPE,
                "unsupported_media_type",
                format!("the body must be JSON, sent with `Content-Type: application/json`, not `{kind}`"),
            ));
        }
    }
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
    serde_json::from_slice(&body).map_err(json_error)
}

/// A request already read as JSON (`POST /` looks at it before it knows which request it is), as [`parse`] would
/// read it.
pub(super) fn from_value<T: DeserializeOwned>(value: serde_json::Value) -> Result<T, ApiError> {
    serde_json::from_value(value).map_err(json_error)
}

fn json_error(e: serde_json::Error) -> ApiError {
    let code = match e.classify() {
        serde_json::error::Category::Data => "invalid_type",
        _ => "invalid_json",
    };
    ApiError::bad_request(code, format!("invalid request body: {e}"))
}

/// Reads `body` as the POST route at `path` does, through the content checks and the request's shape (no
/// tokenization): what the fuzzer drives, since every byte of it comes from a client. An unknown path is a 404.
pub fn parse_body(path: &str, body: &[u8]) -> Result<(), ApiError> {
    let body = Ok(Bytes::copy_from_slice(body));
    let headers = HeaderMap::new();
    match path {
        "/v1/embeddings" => parse::<OpenAiRequest>(&headers, body).map(drop),
        "/embed" => parse::<TeiRequest>(&headers, body).map(drop),
        "/embed_all" => parse::<EmbedAllRequest>(&headers, body).map(drop),
        "/embed_sparse" => parse::<EmbedSparseRequest>(&headers, body).map(drop),
        "/similarity" => parse::<SimilarityRequest>(&headers, body).map(drop),
        "/tokenize" => parse::<TokenizeRequest>(&headers, body).map(drop),
        "/decode" => parse::<DecodeRequest>(&headers, body).map(drop),
        "/rerank" => parse::<RerankRequest>(&headers, body).map(drop),
        "/predict" => parse::<PredictRequest>(&headers, body).map(drop),
        "/v1/rerank" | "/v2/rerank" => parse::<CohereRerankRequest>(&headers, body).map(drop),
        "/" => {
            let value: serde_json::Value = parse(&headers, body)?;
            if value["inputs"].is_object() {
                from_value::<SimilarityRequest>(value).map(drop)
            } else {
                from_value::<TeiRequest>(value).map(drop)
            }
        }
        _ => Err(ApiError::new(
            StatusCode::NOT_FOUND,
            "not_found",
            format!("no POST route {path}"),
        )),
    }
}
