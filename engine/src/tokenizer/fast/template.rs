//! The post-processor of a single sequence (`TemplateProcessing`, RoBERTa's and BERT's processors, a `Sequence`
//! of them): the special ids before and after the text's.

use serde_json::Value;

use super::{bad, str_field};
use crate::error::Result;

/// The post-processor for a single sequence: special ids before and after it.
#[derive(Default)]
pub(super) struct Template {
    pub(super) prefix: Vec<u32>,
    pub(super) suffix: Vec<u32>,
}

impl Template {
    pub(super) fn parse(json: &Value) -> Result<Self> {
        let mut t = Template {
            prefix: Vec::new(),
            suffix: Vec::new(),
        };
        match json.get("type").and_then(Value::as_str) {
            None if json.is_null() => {}
            // It trims offsets, which we do not keep; the ids are untouched.
            Some("ByteLevel") => {}
            Some("TemplateProcessing") => t.template(json)?,
            // RoBERTa's and BERT's own processors: `cls` before a single sequence, `sep` after it (their other
            // fields trim offsets, which we do not keep).
            Some(kind @ ("RobertaProcessing" | "BertProcessing")) => {
                let special = |key: &str| {
                    json.get(key)
                        .and_then(|pair| pair.get(1))
                        .and_then(Value::as_u64)
                        .and_then(|id| u32::try_from(id).ok())
                        .ok_or_else(|| bad(format!("{kind}: `{key}` is not a [token, id] pair")))
                };
                t.prefix.push(special("cls")?);
                t.suffix.push(special("sep")?);
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
                let ids = json
                    .get("special_tokens")
                    .and_then(|s| s.get(name))
                    .and_then(|s| s.get("ids"))
                    .and_then(Value::as_array)
                    .ok_or_else(|| bad(format!("TemplateProcessing: no ids for {name:?}")))?;
                let out = if seen_a {
                    &mut self.suffix
                } else {
                    &mut self.prefix
                };
                for id in ids {
                    let id = id
                        .as_u64()
                        .and_then(|id| u32::try_from(id).ok())
                        .ok_or_else(|| bad(format!("TemplateProcessing: bad id for {name:?}")))?;
                    out.push(id);
                }
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
}
