//! sentence-transformers' Router: a module that sends each input down one of several module lists (routes) by the
//! task it is encoded for (`encode_query`, `encode_document`). The one shape served is the inference-free SPLADE
//! model's (opensearch-neural-sparse-encoding-doc-*): a route of a Transformer and SpladePooling, the one the engine
//! runs (documents, the default), and a route of a SparseStaticEmbedding (queries), which needs no forward pass:
//! each distinct token of the query gets its weight in a table of one per vocabulary entry (IDF weights).

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use serde::Deserialize;

use super::{limits, require, Module};
use crate::error::{Error, Result};
use crate::model::read_json;

/// A Router's routes by name: the one the engine runs, and the one answered by lookup if there is one.
#[derive(Clone, Debug, PartialEq)]
pub struct Routes {
    /// The route of the Transformer (and SpladePooling) modules, which is also the default: a request naming no
    /// route takes it.
    pub model: String,
    pub lookup: Option<LookupRoute>,
}

impl Routes {
    /// The routes' names, the one the engine runs first.
    pub fn names(&self) -> Vec<String> {
        std::iter::once(self.model.clone())
            .chain(self.lookup.iter().map(|l| l.name.clone()))
            .collect()
    }
}

/// A SparseStaticEmbedding route: its tokenizer (run without special tokens, cut at its `model_max_length`) and
/// its table of one weight per vocabulary entry.
#[derive(Clone, Debug, PartialEq)]
pub struct LookupRoute {
    pub name: String,
    pub tokenizer_path: PathBuf,
    pub weights_path: PathBuf,
    /// The tokenizer's `model_max_length`, where it has one.
    pub max_seq_length: Option<usize>,
}

/// The table's tensor name, as sentence-transformers saves it.
pub const LOOKUP_TABLE: &str = "weight";

/// `router_config.json` (an older save named it `config.json`).
#[derive(Deserialize)]
struct RouterFile {
    types: BTreeMap<String, String>,
    structure: Structure,
    #[serde(default)]
    parameters: Parameters,
}

#[derive(Deserialize)]
struct Parameters {
    default_route: Option<String>,
    /// Whether a Router without a default route takes its first (sentence-transformers' default).
    #[serde(default = "yes")]
    allow_empty_key: bool,
    #[serde(default)]
    route_mappings: BTreeMap<String, String>,
}

impl Default for Parameters {
    fn default() -> Self {
        Parameters {
            default_route: None,
            allow_empty_key: true,
            route_mappings: BTreeMap::new(),
        }
    }
}

fn yes() -> bool {
    true
}

/// `structure`, each route's module ids, in the file's order: a Router without a default route takes the first.
struct Structure(Vec<(String, Vec<String>)>);

impl<'de> Deserialize<'de> for Structure {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> std::result::Result<Self, D::Error> {
        struct InOrder;
        impl<'de> serde::de::Visitor<'de> for InOrder {
            type Value = Structure;
            fn expecting(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
                f.write_str("a map of route names to lists of module ids")
            }
            fn visit_map<A: serde::de::MapAccess<'de>>(
                self,
                mut map: A,
            ) -> std::result::Result<Structure, A::Error> {
                let mut routes = Vec::new();
                while let Some(route) = map.next_entry()? {
                    routes.push(route);
                }
                Ok(Structure(routes))
            }
        }
        d.deserialize_map(InOrder)
    }
}

/// A SparseStaticEmbedding's `config.json`.
#[derive(Deserialize, Default)]
struct LookupFile {
    /// An IDF file to read the table from instead (`SparseStaticEmbedding.from_json`'s): not read here.
    path: Option<String>,
}

/// The Router in `folder` (at `path` in modules.json): the modules of the route the engine runs, with their paths
/// from the model's root, and its routes.
pub(super) fn read(folder: &Path, path: &str) -> Result<(Vec<Module>, Routes)> {
    let mut config_path = folder.join("router_config.json");
    if !config_path.is_file() {
        config_path = require(
            folder.join("config.json"),
            "the Router's router_config.json",
        )?;
    }
    let file: RouterFile = read_json(&config_path)?;
    let refuse = |why: String| Err(Error::model(&config_path, why));
    if !file.parameters.route_mappings.is_empty() {
        return refuse("unsupported: route_mappings (routes by task and modality)".into());
    }
    // As sentence-transformers: the route named, else (allow_empty_key) the first.
    let first = file.structure.0.first().map(|(name, _)| name.clone());
    let default = match (&file.parameters.default_route, file.parameters.allow_empty_key) {
        (Some(name), _) => name.clone(),
        (None, true) => first.unwrap_or_default(),
        (None, false) => {
            return refuse(
                "unsupported: a Router without a default route (allow_empty_key false), whose inputs must \
                 each name one"
                    .into(),
            )
        }
    };
    let module = |id: &String| -> Result<Module> {
        let kind = file.types.get(id).ok_or_else(|| {
            Error::model(&config_path, format!("module {id:?} has no entry in types"))
        })?;
        Ok(Module {
            path: Path::new(path).join(id).to_string_lossy().into_owned(),
            kind: kind.clone(),
        })
    };
    let mut model = None;
    let mut lookup = None;
    for (name, ids) in &file.structure.0 {
        let modules = ids.iter().map(module).collect::<Result<Vec<_>>>()?;
        let classes: Vec<&str> = modules.iter().map(Module::class).collect();
        match classes.as_slice() {
            ["Transformer" | "MLMTransformer", ..] if model.is_none() => {
                model = Some((name.clone(), modules));
            }
            ["SparseStaticEmbedding"] if lookup.is_none() => {
                lookup = Some(lookup_route(name, &folder.join(&ids[0]))?);
            }
            other => {
                return refuse(format!(
                "unsupported route {name:?} of {other:?}: a Router is served with one route of a \
                     Transformer (and SpladePooling) and at most one of a SparseStaticEmbedding"
            ))
            }
        }
    }
    let Some((model, modules)) = model else {
        return refuse("unsupported: no route runs a Transformer".into());
    };
    if default != model {
        return refuse(format!(
            "unsupported: the default route {default:?} is not the Transformer's ({model:?})"
        ));
    }
    Ok((modules, Routes { model, lookup }))
}

fn lookup_route(name: &str, folder: &Path) -> Result<LookupRoute> {
    let config_path = folder.join("config.json");
    let config: LookupFile = match config_path.is_file() {
        true => read_json(&config_path)?,
        false => LookupFile::default(),
    };
    if let Some(path) = config.path.filter(|p| p.ends_with(".json")) {
        return Err(Error::model(
            &config_path,
            format!("unsupported: the table as an IDF file ({path:?}); model.safetensors is read"),
        ));
    }
    Ok(LookupRoute {
        name: name.to_owned(),
        tokenizer_path: require(folder.join("tokenizer.json"), "the route's tokenizer.json")?,
        weights_path: require(
            folder.join("model.safetensors"),
            "the route's table as model.safetensors",
        )?,
        max_seq_length: limits::tokenizer_max_length(folder)?,
    })
}
