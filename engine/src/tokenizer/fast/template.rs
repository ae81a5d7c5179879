//! The post-processor (`TemplateProcessing`, RoBERTa's and BERT's processors, a `Sequence` of them): the special
//! ids before and after a single text's, and how a pair of texts is joined and typed.

use serde_json::Value;

use super::{bad, str_field};
use crate::error::Result;

/// A piece of a pair's template: special ids, or one of the two texts.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(super) enum Part {
    Ids(Vec<u32>),
    A,
    B,
}

/// The post-processor: special ids before and after a single sequence, and the pieces a pair is joined from, each
/// with its token type (or why a pair template is not read: it matters to pairs alone, so it does not refuse the
/// tokenizer).
pub(super) struct Template {
    pub(super) prefix: Vec<u32>,
    pub(super) suffix: Vec<u32>,
    pub(super) pair: std::result::Result<Vec<(Part, u32)>, String>,
}

impl Default for Template {
    /// No post-processor: a pair is its two texts' ids, the second's of type 1 (the crate's default).
    fn default() -> Self {
        Template {
            prefix: Vec::new(),
            suffix: Vec::new(),
            pair: Ok(vec![(Part::A, 0), (Part::B, 1)]),
        }
    }
}

impl Template {
    pub(super) fn parse(json: &Value) -> Result<Self> {
        let mut t = Template::default();
        match json.get("type").and_then(Value::as_str) {
            None if json.is_null() => {}
            // It trims offsets, which we do not keep; the ids are untouched.
            Some("ByteLevel") => {}
            Some("TemplateProcessing") => {
                t.template(json)?;
                t.pair = pair_template(json).map_err(|e| e.to_string());
            }
            // RoBERTa's and BERT's own processors: `cls` before a single sequence, `sep` after it (their other
            // fields trim offsets, which we do not keep); a pair as `cls A sep sep B sep`, all of type 0
            // (RoBERTa's), or `cls A sep` of type 0 and `B sep` of type 1 (BERT's).
            Some(kind @ ("RobertaProcessing" | "BertProcessing")) => {
                let special = |key: &str| {
                    json.get(key)
                        .and_then(|pair| pair.get(1))
                        .and_then(Value::as_u64)
                        .and_then(|id| u32::try_from(id).ok())
                        .ok_or_else(|| bad(format!("{kind}: `{key}` is not a [token, id] pair")))
                };
                let (cls, sep) = (special("cls")?, special("sep")?);
                t.prefix.push(cls);
                t.suffix.push(sep);
                let ids = |id| Part::Ids(vec![id]);
                t.pair = Ok(match kind {
                    "RobertaProcessing" => vec![
                        (ids(cls), 0),
                        (Part::A, 0),
                        (Part::Ids(vec![sep, sep]), 0),
                        (Part::B, 0),
                        (ids(sep), 0),
                    ],
                    _ => vec![
                        (ids(cls), 0),
                        (Part::A, 0),
                        (ids(sep), 0),
                        (Part::B, 1),
                        (ids(sep), 1),
                    ],
                });
            }
            // One step that adds ids among steps that add none (Llama 3's ByteLevel then TemplateProcessing): the
            // crate hands a later step the pieces of a template's output, not one sequence, so a second step that
            // adds ids does not wrap the first's (RoBERTa's processor then numbers the pieces as a pair's).
            Some("Sequence") => {
                for step in json
                    .get("processors")
                    .and_then(Value::as_array)
                    .ok_or_else(|| bad("post_processor Sequence: missing `processors`"))?
                {
                    let inner = Template::parse(step)?;
                    if inner.len() > 0 && t.len() > 0 {
                        return Err(bad(
                            "post_processor Sequence: more than one step adds special tokens",
                        ));
                    }
                    if inner.len() > 0 {
                        t.pair = inner.pair;
                    }
                    t.prefix.extend(inner.prefix);
                    t.suffix.extend(inner.suffix);
                }
            }
            other => return Err(bad(format!("post_processor {other:?} is not supported"))),
        }
        Ok(t)
    }

    /// `TemplateProcessing`'s `single`.
    fn template(&mut self, json: &Value) -> Result<()> {
        let single = json
            .get("single")
            .and_then(Value::as_array)
            .ok_or_else(|| bad("TemplateProcessing: missing `single`"))?;
        let mut seen_a = false;
        for piece in single {
            if let Some(seq) = piece.get("Sequence") {
                if seen_a || seq.get("id").and_then(Value::as_str) != Some("A") {
                    return Err(bad(
                        "TemplateProcessing: `single` must hold sequence A once",
                    ));
                }
                seen_a = true;
            } else if let Some(special) = piece.get("SpecialToken") {
                let name = str_field(special, "id", "TemplateProcessing")?;
                let out = if seen_a {
                    &mut self.suffix
                } else {
                    &mut self.prefix
                };
                out.extend(special_ids(json, name)?);
            } else {
                return Err(bad("TemplateProcessing: unknown piece in `single`"));
            }
        }
        if !seen_a {
            return Err(bad("TemplateProcessing: `single` lacks sequence A"));
        }
        Ok(())
    }

    pub(super) fn len(&self) -> usize {
        self.prefix.len() + self.suffix.len()
    }

    /// The pair's pieces, or why there are none.
    fn pair(&self) -> Result<&[(Part, u32)]> {
        self.pair
            .as_deref()
            .map_err(|why| bad(format!("pairs of texts: {why}")))
    }

    /// The special ids a pair's template adds.
    pub(super) fn pair_len(&self) -> Result<usize> {
        Ok(self
            .pair()?
            .iter()
            .map(|(part, _)| match part {
                Part::Ids(ids) => ids.len(),
                Part::A | Part::B => 0,
            })
            .sum())
    }

    /// Writes the pair `a`, `b` (already truncated) into `ids` as the template joins them, and returns where its
    /// tokens of type 1 start (`None` where all are of type 0). Fails for a template whose types are not type 0
    /// then type 1 (which one boundary cannot say).
    pub(super) fn join_pair(
        &self,
        a: &[u32],
        b: &[u32],
        ids: &mut Vec<u32>,
    ) -> Result<Option<u32>> {
        ids.clear();
        let mut type1_from = None;
        for (part, type_id) in self.pair()? {
            let piece = match part {
                Part::Ids(special) => special.as_slice(),
                Part::A => a,
                Part::B => b,
            };
            match (*type_id, type1_from) {
                (0, None) => {}
                (1, None) => type1_from = Some(u32::try_from(ids.len()).unwrap_or(u32::MAX)),
                (1, Some(_)) => {}
                _ => {
                    return Err(bad(
                        "the pair template's token types are not type 0 then type 1",
                    ))
                }
            }
            ids.extend_from_slice(piece);
        }
        Ok(type1_from)
    }
}

/// `TemplateProcessing`'s `pair`: special tokens and the sequences A and B (each once, A first), with their
/// `type_id`s.
fn pair_template(json: &Value) -> Result<Vec<(Part, u32)>> {
    let Some(pieces) = json.get("pair").and_then(Value::as_array) else {
        return Ok(vec![(Part::A, 0), (Part::B, 1)]);
    };
    let mut pair = Vec::with_capacity(pieces.len());
    for piece in pieces {
        let (inner, part) = if let Some(seq) = piece.get("Sequence") {
            let part = match seq.get("id").and_then(Value::as_str) {
                Some("A") => Part::A,
                Some("B") => Part::B,
                _ => {
                    return Err(bad(
                        "TemplateProcessing: `pair` names a sequence other than A and B",
                    ))
                }
            };
            (seq, part)
        } else if let Some(special) = piece.get("SpecialToken") {
            let name = str_field(special, "id", "TemplateProcessing")?;
            (special, Part::Ids(special_ids(json, name)?))
        } else {
            return Err(bad("TemplateProcessing: unknown piece in `pair`"));
        };
        let type_id = inner
            .get("type_id")
            .and_then(Value::as_u64)
            .and_then(|t| u32::try_from(t).ok())
            .unwrap_or(0);
        pair.push((part, type_id));
    }
    let at = |want: &Part| pair.iter().filter(|(p, _)| p == want).count();
    let first = pair
        .iter()
        .position(|(p, _)| matches!(p, Part::A | Part::B));
    if at(&Part::A) != 1 || at(&Part::B) != 1 || first.is_some_and(|i| pair[i].0 != Part::A) {
        return Err(bad(
            "TemplateProcessing: `pair` must hold sequence A, then sequence B, once each",
        ));
    }
    Ok(pair)
}

/// The ids of special token `name` in a `TemplateProcessing`'s `special_tokens`.
fn special_ids(json: &Value, name: &str) -> Result<Vec<u32>> {
    json.get("special_tokens")
        .and_then(|s| s.get(name))
        .and_then(|s| s.get("ids"))
        .and_then(Value::as_array)
        .ok_or_else(|| bad(format!("TemplateProcessing: no ids for {name:?}")))?
        .iter()
        .map(|id| {
            id.as_u64()
                .and_then(|id| u32::try_from(id).ok())
                .ok_or_else(|| bad(format!("TemplateProcessing: bad id for {name:?}")))
        })
        .collect()
}
