//! How an embedding is written out: [`EncodingFormat`], one name for OpenAI's and TEI's `encoding_format` and
//! `bench embed --output-format`. Its [`Precision`] says what numbers are written: the floats, int8 (pplx-embed's
//! `round(127·tanh(x))`), int8 with a per-vector scale, or the sign bits packed eight to a byte (`binary`,
//! `ubinary`, as sentence-transformers' `quantize_embeddings` and the vector databases that take bit vectors); and
//! each is written as JSON numbers, or with `_base64` as base64 of its little-endian bytes (`base64` alone is
//! OpenAI's: the floats).
//!
//! Matryoshka `dimensions` is applied first: a format encodes the vector the request would otherwise get.

use std::borrow::Cow;
use std::fmt;

use base64::Engine as _;
use serde::{Deserialize, Deserializer, Serialize, Serializer};

/// What numbers an embedding is written as.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum Precision {
    /// The f32 components.
    #[default]
    Float,
    /// `round(127·tanh(x))` per component of the pooled vector before the model's Normalize module, as
    /// pplx-embed writes its int8 embeddings (whose models have no Normalize module: the tanh is the saturation
    /// its pooled outputs were trained to fit). Compared as they are (cosine of the int8 vectors).
    Int8,
    /// Symmetric per-vector int8: `round(x / s)` with `s = max|x| / 127`, and `s` returned beside the vector, so
    /// `q·s` gives the vector back to within `s/2` per component.
    Int8Scaled,
    /// The sign bits (`x > 0`), packed most significant bit first into bytes (the last padded with zeros),
    /// each byte minus 128 as an int8: sentence-transformers' `binary`.
    Binary,
    /// The same bits as unsigned bytes: sentence-transformers' `ubinary`, what Qdrant and Vespa take.
    Ubinary,
}

impl Precision {
    pub const ALL: [Precision; 5] = [
        Precision::Float,
        Precision::Int8,
        Precision::Int8Scaled,
        Precision::Binary,
        Precision::Ubinary,
    ];

    pub fn name(self) -> &'static str {
        match self {
            Precision::Float => "float",
            Precision::Int8 => "int8",
            Precision::Int8Scaled => "int8_scaled",
            Precision::Binary => "binary",
            Precision::Ubinary => "ubinary",
        }
    }
}

/// The one name of an output format: a [`Precision`], written as JSON numbers or as base64.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct EncodingFormat {
    pub precision: Precision,
    pub base64: bool,
}

impl EncodingFormat {
    /// Every format's name, as requests give it.
    pub fn names() -> Vec<String> {
        Precision::ALL
            .into_iter()
            .flat_map(|p| {
                [false, true].map(|base64| {
                    EncodingFormat {
                        precision: p,
                        base64,
                    }
                    .to_string()
                })
            })
            .collect()
    }

    /// Whether this format reads the pooled vector before the model's Normalize module rather than the vector
    /// the request would otherwise get (int8, as pplx-embed does).
    pub fn reads_pooled(self) -> bool {
        self.precision == Precision::Int8
    }

    /// `v` in this format.
    pub fn encode(self, v: Cow<'_, [f32]>) -> Encoded<'_> {
        let (values, scale) = match self.precision {
            Precision::Float => (Values::Float(v), None),
            Precision::Int8 => (Values::Int8(int8_tanh(&v)), None),
            Precision::Int8Scaled => {
                let (q, scale) = int8_scaled(&v);
                (Values::Int8(q), Some(scale))
            }
            Precision::Binary => (Values::Int8(binary(&v)), None),
            Precision::Ubinary => (Values::Uint8(pack_signs(&v)), None),
        };
        Encoded {
            values,
            scale,
            base64: self.base64,
        }
    }
}

impl fmt::Display for EncodingFormat {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match (self.precision, self.base64) {
            // OpenAI's own name for base64 floats.
            (Precision::Float, true) => f.write_str("base64"),
            (p, false) => f.write_str(p.name()),
            (p, true) => write!(f, "{}_base64", p.name()),
        }
    }
}

impl std::str::FromStr for EncodingFormat {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        EncodingFormat::names()
            .iter()
            .position(|n| n == s)
            .map(|i| EncodingFormat {
                precision: Precision::ALL[i / 2],
                base64: i % 2 == 1,
            })
            .ok_or_else(|| {
                format!(
                    "unknown encoding_format `{s}`; one of: {}",
                    EncodingFormat::names().join(", ")
                )
            })
    }
}

impl<'de> Deserialize<'de> for EncodingFormat {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let name = Cow::<str>::deserialize(d)?;
        name.parse().map_err(serde::de::Error::custom)
    }
}

/// One embedding in an [`EncodingFormat`]: serializes as the vector itself (JSON numbers or a base64 string);
/// [`Encoded::scale`] is what `int8_scaled` returns beside it.
pub struct Encoded<'a> {
    values: Values<'a>,
    scale: Option<f32>,
    base64: bool,
}

enum Values<'a> {
    Float(Cow<'a, [f32]>),
    Int8(Vec<i8>),
    Uint8(Vec<u8>),
}

impl Encoded<'_> {
    /// The per-vector scale (`int8_scaled` only): the vector is `q·scale`.
    pub fn scale(&self) -> Option<f32> {
        self.scale
    }

    /// The values' little-endian bytes.
    pub fn bytes(&self) -> Vec<u8> {
        match &self.values {
            Values::Float(v) => v.iter().flat_map(|x| x.to_le_bytes()).collect(),
            Values::Int8(v) => v.iter().map(|&x| x as u8).collect(),
            Values::Uint8(v) => v.clone(),
        }
    }
}

impl Serialize for Encoded<'_> {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        if self.base64 {
            return s
                .serialize_str(&base64::engine::general_purpose::STANDARD.encode(self.bytes()));
        }
        match &self.values {
            Values::Float(v) => v.serialize(s),
            Values::Int8(v) => v.serialize(s),
            Values::Uint8(v) => v.serialize(s),
        }
    }
}

/// pplx-embed's int8: `round(127·tanh(x))`, ties to even as `torch.round` does.
pub fn int8_tanh(v: &[f32]) -> Vec<i8> {
    v.iter()
        .map(|x| (127.0 * x.tanh()).round_ties_even() as i8)
        .collect()
}

/// Symmetric per-vector int8 and its scale `max|x| / 127` (0 for the zero vector, whose values are all 0).
pub fn int8_scaled(v: &[f32]) -> (Vec<i8>, f32) {
    let max = v.iter().fold(0.0f32, |m, x| m.max(x.abs()));
    let scale = max / 127.0;
    if scale == 0.0 || !scale.is_finite() {
        return (vec![0; v.len()], 0.0);
    }
    // `as i8` saturates, and |x / scale| <= 127 up to rounding anyway.
    let q = v
        .iter()
        .map(|x| (x / scale).round_ties_even() as i8)
        .collect();
    (q, scale)
}

/// The sign bits (`x > 0`) packed most significant bit first, as `numpy.packbits(v > 0)`.
pub fn pack_signs(v: &[f32]) -> Vec<u8> {
    v.chunks(8)
        .map(|c| {
            c.iter()
                .enumerate()
                .fold(0u8, |b, (i, &x)| b | (u8::from(x > 0.0) << (7 - i)))
        })
        .collect()
}

/// sentence-transformers' `binary`: the packed sign bytes minus 128, as int8 (flipping the top bit is exactly
/// that subtraction in two's complement).
pub fn binary(v: &[f32]) -> Vec<i8> {
    pack_signs(v)
        .into_iter()
        .map(|b| (b ^ 0x80) as i8)
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_round_trip_and_base64_alone_is_openais_floats() {
        for name in EncodingFormat::names() {
            let f: EncodingFormat = name.parse().unwrap();
            assert_eq!(f.to_string(), name);
        }
        assert_eq!(
            "base64".parse::<EncodingFormat>().unwrap(),
            EncodingFormat {
                precision: Precision::Float,
                base64: true
            }
        );
        let e = "int4".parse::<EncodingFormat>().unwrap_err();
        assert!(e.contains("ubinary_base64"), "{e}");
    }

    #[test]
    fn int8_is_127_tanh_rounded_to_even() {
        let v = [0.0, 1.0, -1.0, 100.0, -100.0, 0.5, 0.003937];
        let want: Vec<i8> = v
            .iter()
            .map(|x: &f32| (127.0 * x.tanh()).round_ties_even() as i8)
            .collect();
        assert_eq!(int8_tanh(&v), want);
        assert_eq!(int8_tanh(&v)[..5], [0, 97, -97, 127, -127]);
        // 127·tanh(0.003937) = 0.49999…: rounds to 0, not up.
        assert_eq!(int8_tanh(&[0.003937])[0], 0);
    }

    #[test]
    fn int8_scaled_gives_the_vector_back_within_half_a_step() {
        let v = [0.3, -1.27, 0.0, 0.6, 1.0];
        let (q, s) = int8_scaled(&v);
        assert!((s - 0.01).abs() < 1e-7);
        assert_eq!(q[1], -127);
        for (x, q) in v.iter().zip(&q) {
            assert!(
                (x - *q as f32 * s).abs() <= s / 2.0 + 1e-6,
                "{x} vs {q}·{s}"
            );
        }
        assert_eq!(int8_scaled(&[0.0, 0.0]), (vec![0, 0], 0.0));
    }

    #[test]
    fn bits_are_packed_msb_first_like_numpy_packbits() {
        // Bits: 1 0 1 1 0 0 0 1 | 1 (padded with zeros) → 0b1011_0001, 0b1000_0000.
        let v = [0.5, -0.1, 2.0, 1e-9, 0.0, -3.0, -0.0, 7.0, 0.1];
        assert_eq!(pack_signs(&v), vec![0b1011_0001, 0b1000_0000]);
        // sentence-transformers' binary: the same bytes minus 128.
        assert_eq!(
            binary(&v),
            vec![(0b1011_0001 - 128) as i8, (0b1000_0000 - 128) as i8]
        );
    }

    #[test]
    fn base64_is_the_little_endian_bytes_and_scale_rides_beside() {
        let f: EncodingFormat = "int8_scaled_base64".parse().unwrap();
        let e = f.encode(Cow::Borrowed(&[1.27, -0.64]));
        assert_eq!(e.scale(), Some(0.01));
        assert_eq!(e.bytes(), vec![127, (-64i8) as u8]);
        let json = serde_json::to_string(&e).unwrap();
        assert_eq!(json, "\"f8A=\"");
        let floats = EncodingFormat::default().encode(Cow::Borrowed(&[1.5, -2.0]));
        assert_eq!(serde_json::to_string(&floats).unwrap(), "[1.5,-2.0]");
        let b64: EncodingFormat = "base64".parse().unwrap();
        let bytes = b64.encode(Cow::Borrowed(&[1.5])).bytes();
        assert_eq!(bytes, 1.5f32.to_le_bytes());
    }
}
