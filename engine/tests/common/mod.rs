//! What the reference tests share: reading fixture files of texts, reference ids and embeddings, and cosine.

use base64::Engine as _;

pub mod http;
pub mod models;

pub struct Fixture {
    pub text: String,
    pub ids: Vec<u32>,
    pub embedding: Vec<f32>,
    /// The whole record, for fields only one fixture set has. Each test crate compiles this module on its own,
    /// and not every one reads it.
    #[allow(dead_code)]
    pub record: serde_json::Value,
}

/// One fixture per JSON line of `path`, the embedding read from `embedding_key` (base64 of little-endian f32).
pub fn read(path: &std::path::Path, embedding_key: &str) -> Vec<Fixture> {
    std::fs::read_to_string(path)
        .expect("fixture file")
        .lines()
        .map(|l| {
            let record: serde_json::Value = serde_json::from_str(l).expect("fixture JSON");
            let bytes = base64::engine::general_purpose::STANDARD
                .decode(record[embedding_key].as_str().expect("embedding"))
                .expect("base64");
            Fixture {
                text: record["text"].as_str().expect("text").to_owned(),
                ids: record["ids"]
                    .as_array()
                    .expect("ids")
                    .iter()
                    .map(|i| i.as_u64().expect("id") as u32)
                    .collect(),
                embedding: bytes
                    .chunks_exact(4)
                    .map(|b| f32::from_le_bytes([b[0], b[1], b[2], b[3]]))
                    .collect(),
                record,
            }
        })
        .collect()
}

pub fn cosine(a: &[f32], b: &[f32]) -> f64 {
    let dot: f64 = a.iter().zip(b).map(|(x, y)| *x as f64 * *y as f64).sum();
    let na: f64 = a.iter().map(|x| (*x as f64).powi(2)).sum::<f64>().sqrt();
    let nb: f64 = b.iter().map(|x| (*x as f64).powi(2)).sum::<f64>().sqrt();
    dot / (na * nb)
}
