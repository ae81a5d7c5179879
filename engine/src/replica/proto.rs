//! The Rust code generated from `proto/embedding/v1/replica.proto` by `build.rs`.
#![allow(clippy::all, missing_docs)]

tonic::include_proto!("embedding.v1");
