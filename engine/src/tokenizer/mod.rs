//! Tokenizers behind one interface, chosen by [`TokenizerKind`]. `hf` wraps the Hugging Face `tokenizers` crate:
//! the reference every other implementation is checked against, id for id. `fast` is ours (see [`fast`]): the same
//! `tokenizer.json`, the same ids, several times faster and without heap allocations once its [`Scratch`] is warm.
//! A sentence-transformers `WordEmbeddings` model has no `tokenizer.json` but a word list, which
//! [`WhitespaceTokenizer`] reads whatever the kind.

mod chat;
pub mod fast;
mod hf;
mod special;
mod whitespace;

use std::cell::RefCell;
use std::path::Path;

use serde::{Deserialize, Serialize};

pub use chat::ChatPairs;
pub use fast::FastTokenizer;
pub use hf::{HfTokenizer, TokenDetail};
pub use special::{named_tokens, special_tokens};
pub use whitespace::WhitespaceTokenizer;

/// The file of sentence-transformers' `WhitespaceTokenizer` (a `WordEmbeddings` model's tokenizer).
pub const WHITESPACE_CONFIG: &str = "whitespacetokenizer_config.json";

/// Whether the tokenizer file at `path` is a WordEmbeddings model's word list ([`WHITESPACE_CONFIG`]) rather than
/// a `tokenizer.json`.
pub fn is_word_list(path: &Path) -> bool {
    path.file_name().is_some_and(|n| n == WHITESPACE_CONFIG)
}

use crate::error::Result;

/// Which implementation reads the `tokenizer.json`.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize, clap::ValueEnum)]
#[serde(rename_all = "lowercase")]
pub enum TokenizerKind {
    /// The Hugging Face `tokenizers` crate.
    Hf,
    /// The in-house WordPiece, Unigram and BPE (byte-level, SentencePiece) tokenizer; a `tokenizer.json` it cannot
    /// reproduce exactly is an error.
    Fast,
    /// The in-house tokenizer where it reproduces the file exactly, else (a pipeline it refuses: other split
    /// patterns or normalisers, `single_word` added tokens) the crate's, with a warning naming why.
    #[default]
    Auto,
}

/// Which end of a too-long sequence is cut.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum TruncationSide {
    #[default]
    Right,
    Left,
}

/// Truncation to a maximum length that counts the special tokens, which are always kept.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Truncation {
    pub max_length: usize,
    pub side: TruncationSide,
}

impl Truncation {
    pub fn right(max_length: usize) -> Self {
        Truncation {
            max_length,
            side: TruncationSide::Right,
        }
    }
}

/// Reusable working memory of an encode: buffers that grow to the longest input seen and are then reused, so a
/// caller that keeps one per thread encodes without heap allocations. Opaque; only `fast` uses it.
#[derive(Default)]
pub struct Scratch {
    pub(crate) a: String,
    pub(crate) b: String,
    /// The text between two raw-text added tokens, normalised, while its pieces are encoded.
    pub(crate) gap: String,
    pub(crate) marks: Vec<(u8, char)>,
    pub(crate) held: Vec<char>,
    pub(crate) best: Vec<fast::unigram::Best>,
    pub(crate) path: Vec<(u32, u32, u32)>,
    pub(crate) bpe: fast::bpe::Work,
}

impl Scratch {
    /// Beyond this many bytes of text and merge buffers, a thread's scratch is let go after the encode instead of
    /// kept: one huge input should not pin its memory on every thread that ever tokenized it.
    const KEEP_BYTES: usize = 1 << 20;

    fn oversized(&self) -> bool {
        self.a.capacity() + self.b.capacity() + self.gap.capacity() + self.bpe.bytes()
            > Self::KEEP_BYTES
    }
}

thread_local! {
    static THREAD_SCRATCH: RefCell<Scratch> = RefCell::default();
}

/// Runs `f` with this thread's own [`Scratch`], kept warm between calls, so a serving thread encodes without
/// heap allocations as a caller holding its own scratch does. A nested call gets a fresh one.
pub fn with_thread_scratch<R>(f: impl FnOnce(&mut Scratch) -> R) -> R {
    THREAD_SCRATCH.with(|cell| match cell.try_borrow_mut() {
        Ok(mut scratch) => {
            let out = f(&mut scratch);
            if scratch.oversized() {
                *scratch = Scratch::default();
            }
            out
        }
        Err(_) => f(&mut Scratch::default()),
    })
}

/// Text to model input ids: normalisation, pre-tokenisation, the model's sub-word algorithm, special tokens, and
/// truncation to the configured maximum length (special tokens kept).
pub trait Tokenizer: Send + Sync {
    /// Writes the ids of `text` into `ids` (cleared first), with this thread's scratch
    /// ([`with_thread_scratch`]).
    fn encode(&self, text: &str, ids: &mut Vec<u32>) -> Result<()> {
        with_thread_scratch(|scratch| self.encode_with(text, scratch, ids))
    }

    /// [`Tokenizer::encode`] with caller-owned working memory, reused across calls.
    fn encode_with(&self, text: &str, scratch: &mut Scratch, ids: &mut Vec<u32>) -> Result<()> {
        self.encode_cut(text, scratch, ids).map(drop)
    }

    /// [`Tokenizer::encode_with`] that also says whether truncation cut the input (`true`: it had more ids than
    /// the limit, and `ids` holds the limit's worth), so an input at the limit is told from one over it in one
    /// encode.
    fn encode_cut(&self, text: &str, scratch: &mut Scratch, ids: &mut Vec<u32>) -> Result<bool>;

    /// Encodes each text into the matching entry of `out` (resized to `texts.len()`), reusing its vectors.
    fn encode_batch(
        &self,
        texts: &[&str],
        scratch: &mut Scratch,
        out: &mut Vec<Vec<u32>>,
    ) -> Result<()> {
        out.resize_with(texts.len(), Vec::new);
        for (text, ids) in texts.iter().zip(out.iter_mut()) {
            self.encode_with(text, scratch, ids)?;
        }
        Ok(())
    }

    /// Writes the ids of the pair `a`, `b` (a cross-encoder's query and passage) into `ids` as the post-processor's
    /// pair template joins them, the two texts truncated longest first to the maximum length (transformers'
    /// `truncation=True`), and returns where its tokens of type 1 start and whether truncation cut either text.
    fn encode_pair(
        &self,
        a: &str,
        b: &str,
        scratch: &mut Scratch,
        ids: &mut Vec<u32>,
    ) -> Result<PairEncoding>;

    fn vocab_size(&self) -> usize;
    /// The id of a token's text, as the crate's `token_to_id` gives it: an added token's, else the model's.
    fn token_id(&self, token: &str) -> Option<u32>;
    /// One past the largest id an encode can give (model, added and special tokens): the rows a model's
    /// embedding needs, which the token count understates where ids leave gaps.
    fn id_bound(&self) -> usize;
    /// The truncation length, special tokens included (`usize::MAX` when not truncating).
    fn max_length(&self) -> usize;
    /// How many special ids an encode puts before a sequence's own and after them (BERT's `[CLS]` and `[SEP]`:
    /// one each; Qwen3's end of text: none and one; none where the special tokens are left out).
    fn specials_around(&self) -> (usize, usize);
}

/// What [`Tokenizer::encode_pair`] tells beyond a pair's ids.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct PairEncoding {
    /// Where the tokens of type 1 start (`None` where all are of type 0).
    pub type1_from: Option<u32>,
    /// Whether truncation cut either text (the pair was over the limit).
    pub cut: bool,
}

/// How many ids of a pair of texts of `a` and `b` ids each are kept, longest first, to fit `room` (the tokenizers
/// crate's `LongestFirst`): the shorter text whole if the longer can take the rest, else each about half.
pub(crate) fn longest_first(a: usize, b: usize, room: usize) -> (usize, usize) {
    if a + b <= room {
        return (a, b);
    }
    let (short, long) = (a.min(b), a.max(b));
    let (mut n1, mut n2) = (
        short,
        if short > room {
            short
        } else {
            short.max(room - short)
        },
    );
    if n1 + n2 > room {
        n1 = room / 2;
        n2 = n1 + room % 2;
    }
    let (n1, n2) = (n1.min(short), n2.min(long));
    if a > b {
        (n2, n1)
    } else {
        (n1, n2)
    }
}

/// Cuts `ids` to `keep`, at the end `side` names.
pub(crate) fn cut(ids: &mut Vec<u32>, keep: usize, side: TruncationSide) {
    let excess = ids.len().saturating_sub(keep);
    match side {
        TruncationSide::Right => ids.truncate(keep.min(ids.len())),
        TruncationSide::Left => drop(ids.drain(..excess)),
    }
}

/// Reads `tokenizer.json` with the chosen implementation; with `add_special_tokens` false its post-processor's
/// special tokens are left out (the crate's `encode(text, false)`, as sentence-transformers' StaticEmbedding
/// encodes). A [`WHITESPACE_CONFIG`] is read by [`WhitespaceTokenizer`], the one implementation there is.
pub fn load(
    path: &Path,
    kind: TokenizerKind,
    truncation: Option<Truncation>,
    add_special_tokens: bool,
) -> Result<Box<dyn Tokenizer>> {
    load_registered(path, kind, truncation, add_special_tokens, &[])
}

/// [`load`] with `registered` added to the file's tokens as special ones matched on the raw text, each keeping its
/// vocabulary id (transformers' `add_special_tokens` of `AddedToken(t, normalized=False, special=True)`: how
/// sentence-transformers registers a PyLate prefix, `[unused0]`, that the tokenizer knows but splits).
pub fn load_registered(
    path: &Path,
    kind: TokenizerKind,
    truncation: Option<Truncation>,
    add_special_tokens: bool,
    registered: &[String],
) -> Result<Box<dyn Tokenizer>> {
    if is_word_list(path) {
        return Ok(Box::new(WhitespaceTokenizer::open(path, truncation)?));
    }
    // Special tokens first: the truncation need only hold those an encode adds. The choice between the two is
    // made on the pipeline alone: a limit one refuses, the other refuses too.
    let hf = || HfTokenizer::open_registered(path, truncation, add_special_tokens, registered);
    let fast = |t: FastTokenizer| {
        t.with_special_tokens(add_special_tokens)
            .truncated(truncation)
            .map_err(|e| in_file(path, e))
    };
    Ok(match kind {
        TokenizerKind::Hf => Box::new(hf()?),
        TokenizerKind::Fast => Box::new(fast(FastTokenizer::from_file_registered(
            path, None, registered,
        )?)?),
        TokenizerKind::Auto => {
            match FastTokenizer::from_file_registered(path, None, registered) {
                Ok(t) => Box::new(fast(t)?),
                Err(crate::Error::Tokenizer(why)) => {
                    eprintln!("tokenizer: the in-house one refused it ({why}); using the tokenizers crate");
                    Box::new(hf()?)
                }
                Err(e) => return Err(e),
            }
        }
    })
}

/// A tokenizer error of the file at `path`, named in it.
fn in_file(path: &Path, e: crate::Error) -> crate::Error {
    match e {
        crate::Error::Tokenizer(m) => crate::Error::Tokenizer(format!("{}: {m}", path.display())),
        other => other,
    }
}
