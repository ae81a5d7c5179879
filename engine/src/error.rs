use std::path::PathBuf;

/// Everything the engine can refuse or fail at, each naming what it was looking at.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    #[error("{}: {source}", path.display())]
    Io {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("{}: invalid JSON: {source}", path.display())]
    Json {
        path: PathBuf,
        source: serde_json::Error,
    },
    /// A model file is missing, malformed, or holds something this engine does not support.
    #[error("{}: {message}", path.display())]
    Model { path: PathBuf, message: String },
    #[error("tokenizer: {0}")]
    Tokenizer(String),
    #[error("invalid setting `{name}`: {message}")]
    Config { name: &'static str, message: String },
    /// A configuration file that does not parse, or names a setting that does not exist.
    #[error("{}: {message}", path.display())]
    ConfigFile { path: PathBuf, message: String },
    #[error("could not fetch the default model: {0}")]
    Fetch(String),
    #[error("invalid batch: {0}")]
    Batch(String),
    /// A backend refused an operation it was given (a shape it cannot run, memory it cannot get).
    #[error("device: {0}")]
    Device(String),
    #[error("cannot start {what}: {message}")]
    Spawn { what: String, message: String },
    /// A remote replica answered with an error of its own, or with something that is not an answer.
    #[error("replica {addr}: {message}")]
    Replica { addr: String, message: String },
    #[error("the engine has stopped")]
    Stopped,
    #[error(transparent)]
    Scheduler(#[from] crate::scheduler::Error),
}

pub type Result<T> = std::result::Result<T, Error>;

impl Error {
    pub fn model(path: impl Into<PathBuf>, message: impl Into<String>) -> Self {
        Error::Model {
            path: path.into(),
            message: message.into(),
        }
    }

    pub(crate) fn io(path: impl Into<PathBuf>) -> impl FnOnce(std::io::Error) -> Self {
        let path = path.into();
        move |source| Error::Io { path, source }
    }
}
