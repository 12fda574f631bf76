//! Dataset configs: samples (name, files, tree, label, weight) and the schema that reads them.

use std::path::{Path, PathBuf};
use std::sync::Arc;

use gnn4c_events::Label;
use serde::{Deserialize, Serialize};

use gnn4c_features::{Inputs, InputsSpec};

use crate::root::EntryRange;
use crate::{DataError, SchemaSpec};

/// The names of the built-in input declarations, in the order `inspect` tries them.
pub const BUILTIN_DECLARATIONS: [&str; 5] = ["delphes", "delphes_flat", "nanoaod", "hzz", "vector"];

/// The built-in input declarations (`configs/inputs/<name>.yaml`, built into the binary): what
/// `schema: <name>` and `inputs: <name>` read.
const BUILTIN_INPUTS: [(&str, &str); 5] = [
    (
        "delphes",
        include_str!("../../../configs/inputs/delphes.yaml"),
    ),
    (
        "delphes_flat",
        include_str!("../../../configs/inputs/delphes_flat.yaml"),
    ),
    (
        "nanoaod",
        include_str!("../../../configs/inputs/nanoaod.yaml"),
    ),
    ("hzz", include_str!("../../../configs/inputs/hzz.yaml")),
    (
        "vector",
        include_str!("../../../configs/inputs/vector.yaml"),
    ),
];

/// The built-in declaration `name` (`nanoaod`, …), or `None`.
pub fn builtin_inputs(name: &str) -> Option<Result<InputsSpec, DataError>> {
    BUILTIN_INPUTS
        .iter()
        .find(|(n, _)| *n == name)
        .map(|(n, text)| {
            serde_yaml::from_str(text).map_err(|e| {
                DataError::Config(format!(
                    "the built-in declaration configs/inputs/{n}.yaml: {e}"
                ))
            })
        })
}

/// An input declaration in a config: a built-in's name, or one written out.
#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(untagged)]
pub enum InputsRef {
    /// `delphes`, `delphes_flat`, `nanoaod`, `hzz` or `vector` (`configs/inputs/<name>.yaml`).
    Builtin(String),
    /// A declaration written out in the config.
    Custom(Box<InputsSpec>),
}

/// A schema in a config: a built-in's name, or one written out.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(untagged)]
pub enum SchemaRef {
    /// `delphes`, `delphes_flat`, `nanoaod`, `hzz` or `vector`.
    Builtin(String),
    /// A schema written out in the config.
    Custom(Box<SchemaSpec>),
}

impl<'de> Deserialize<'de> for InputsRef {
    /// A name, or a declaration whose own errors (an unknown key, a wrong type) are reported
    /// as they are, not as "no variant matched".
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        match serde_json::Value::deserialize(d)? {
            serde_json::Value::String(name) => Ok(InputsRef::Builtin(name)),
            other => serde_json::from_value(other)
                .map(|spec| InputsRef::Custom(Box::new(spec)))
                .map_err(|e| serde::de::Error::custom(format!("inputs: {e}"))),
        }
    }
}

/// A sample's label: a class index, or a 0/1 vector for multilabel tasks.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(untagged)]
pub enum LabelSpec {
    /// Class index.
    Class(u32),
    /// Multilabel 0/1 vector.
    Multi(Vec<u8>),
}

impl From<&LabelSpec> for Label {
    fn from(l: &LabelSpec) -> Label {
        match l {
            LabelSpec::Class(c) => Label::Class(*c),
            LabelSpec::Multi(v) => Label::Multi(v.clone()),
        }
    }
}

/// One sample (process) of a dataset.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct SampleConfig {
    /// Sample name (`ttH`, `ttbar`, …); events carry it in their identity.
    pub name: String,
    /// Files or glob patterns, relative to the config's folder unless absolute, and URLs
    /// (`https://`, `http://`: read with byte-range requests, never copied).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub files: Vec<String>,
    /// A text file listing more files, one path or URL a line (`#` starts a comment): how DAS
    /// and Rucio listings arrive. Relative to the config's folder; relative paths in it are
    /// relative to its own folder.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub files_from: Option<String>,
    /// Tree name; the dataset's `tree` when absent.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tree: Option<String>,
    /// Label of every event in the sample.
    pub label: LabelSpec,
    /// Weight branch; the schema's default when absent, none (weight = scale) when `""`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub weight: Option<String>,
    /// Multiplies the weight (cross-section × luminosity / generated events, say).
    #[serde(default = "one")]
    pub scale: f64,
    /// First entry read in every file (uproot's `entry_start`).
    #[serde(default)]
    pub entry_start: u64,
    /// Entry to stop at in every file, exclusive (uproot's `entry_stop`); all when absent.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub entry_stop: Option<u64>,
}

fn one() -> f64 {
    1.0
}

fn default_step_size() -> usize {
    10_000
}

/// A dataset: samples read with one schema.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct DatasetConfig {
    /// Dataset name.
    pub name: String,
    /// Default tree name of the samples.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tree: Option<String>,
    /// Schema: a built-in name (shorthand for its input declaration) or a written-out schema;
    /// give this or `inputs`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub schema: Option<SchemaRef>,
    /// The input declaration: objects, node, global and pair features (`docs/inputs.md`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub inputs: Option<InputsRef>,
    /// Class names by label index (for reports and per-class outputs).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub classes: Vec<String>,
    /// Entries decoded per chunk: bounds memory while reading.
    #[serde(default = "default_step_size")]
    pub step_size: usize,
    /// The samples.
    pub samples: Vec<SampleConfig>,
    /// What `preprocess` does with an input file it cannot read (missing, refused, corrupt, a
    /// server gone): `fail` (the default) stops with the error; `skip` leaves the file out,
    /// names it in the report and the manifest, and a rerun reads it again.
    #[serde(default, skip_serializing_if = "OnBadFile::is_fail")]
    pub on_bad_file: OnBadFile,
    /// The file the config was read from (for error messages; not part of the config).
    #[serde(skip)]
    pub source: Option<PathBuf>,
}

/// What `preprocess` does with an input file it cannot read.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum OnBadFile {
    /// Stop with the error.
    #[default]
    Fail,
    /// Leave the file out, name it, read it again on the next run.
    Skip,
}

impl OnBadFile {
    fn is_fail(&self) -> bool {
        *self == OnBadFile::Fail
    }
}

/// What the events of one sample get from its config entry.
#[derive(Debug, Clone, PartialEq)]
pub struct SampleMeta {
    /// Sample name.
    pub name: Arc<str>,
    /// Label of every event of the sample.
    pub label: Label,
    /// Weight branch (overrides the declaration's); `None` uses the declaration's, if any.
    pub weight_branch: Option<String>,
    /// Multiplies the weight branch (1.0 when there is none: weight = scale).
    pub scale: f64,
}

/// How one sample is read: its tree, metadata, entry range and files.
#[derive(Debug, Clone)]
pub struct SamplePlan {
    /// The tree in every file.
    pub tree: String,
    /// Name, label, weight branch and scale.
    pub meta: SampleMeta,
    /// The entries read of every file, and the chunk size.
    pub range: EntryRange,
    /// The files, globs expanded.
    pub files: Vec<PathBuf>,
}

impl DatasetConfig {
    /// The input declaration as written: `inputs`, or `schema`'s (a built-in name is the
    /// shipped declaration of that name; a written-out schema is translated).
    pub fn inputs_spec(&self) -> Result<InputsSpec, DataError> {
        let builtin = |name: &str| {
            builtin_inputs(name).unwrap_or_else(|| {
                Err(DataError::Config(format!(
                    "unknown schema '{name}'; built-in declarations: {}",
                    BUILTIN_DECLARATIONS.join(", ")
                )))
            })
        };
        match (&self.inputs, &self.schema) {
            (Some(_), Some(_)) => Err(DataError::Config(format!(
                "dataset '{}' gives both `schema` and `inputs`: keep one (`schema: nanoaod` is short for the built-in declaration)",
                self.name
            ))),
            (None, None) => Err(DataError::Config(format!(
                "dataset '{}' gives neither `inputs` nor `schema`: declare its inputs (docs/inputs.md) or name a built-in (`schema: nanoaod`)",
                self.name
            ))),
            (Some(InputsRef::Builtin(name)), None) | (None, Some(SchemaRef::Builtin(name))) => {
                builtin(name)
            }
            (Some(InputsRef::Custom(spec)), None) => Ok(spec.as_ref().clone()),
            (None, Some(SchemaRef::Custom(spec))) => {
                spec.validate()?;
                Ok(spec.to_inputs())
            }
        }
    }

    /// The input declaration, checked and parsed; errors name the config file.
    pub fn inputs(&self) -> Result<Inputs, DataError> {
        let spec = self.inputs_spec()?;
        Inputs::new(&spec).map_err(|e| DataError::Config(format!("{}{e}", self.source_prefix())))
    }

    /// `<config file>: ` for messages, or nothing.
    pub fn source_prefix(&self) -> String {
        self.source
            .as_ref()
            .map(|p| format!("{}: ", p.display()))
            .unwrap_or_default()
    }

    /// Checks names, labels and the input declaration before any file is opened.
    pub fn validate(&self) -> Result<(), DataError> {
        self.inputs()?;
        if self.samples.is_empty() {
            return Err(DataError::Config(format!(
                "dataset '{}' has no samples",
                self.name
            )));
        }
        if self.step_size == 0 {
            return Err(DataError::Config("step_size must be at least 1".into()));
        }
        let mut names = std::collections::BTreeSet::new();
        for s in &self.samples {
            if !names.insert(s.name.as_str()) {
                return Err(DataError::Config(format!(
                    "sample '{}' appears twice",
                    s.name
                )));
            }
            if s.files.is_empty() && s.files_from.is_none() {
                return Err(DataError::Config(format!(
                    "sample '{}' lists no files (`files:` or `files_from:`)",
                    s.name
                )));
            }
            if s.tree.is_none() && self.tree.is_none() {
                return Err(DataError::Config(format!(
                    "sample '{}' has no tree, and the dataset sets no default `tree`",
                    s.name
                )));
            }
            if !s.scale.is_finite() {
                return Err(DataError::Config(format!(
                    "sample '{}': scale must be finite",
                    s.name
                )));
            }
            if let LabelSpec::Multi(v) = &s.label
                && v.iter().any(|x| *x > 1)
            {
                return Err(DataError::Config(format!(
                    "sample '{}': a multilabel label holds only 0 and 1",
                    s.name
                )));
            }
        }
        Ok(())
    }

    /// The files of `sample`, globs expanded (sorted) relative to `base_dir`, then those its
    /// `files_from` list names; URLs as written.
    pub fn sample_files(
        &self,
        sample: &SampleConfig,
        base_dir: &Path,
    ) -> Result<Vec<PathBuf>, DataError> {
        let skip = self.on_bad_file == OnBadFile::Skip;
        let mut out = expand_files(sample, &sample.files, base_dir, skip)?;
        if let Some(list) = &sample.files_from {
            let list = base_dir.join(list);
            let text = std::fs::read_to_string(&list).map_err(|source| DataError::Io {
                path: list.clone(),
                source,
            })?;
            let lines: Vec<String> = text
                .lines()
                .map(|l| l.split('#').next().unwrap_or_default().trim().to_owned())
                .filter(|l| !l.is_empty())
                .collect();
            if lines.is_empty() {
                return Err(DataError::Config(format!(
                    "sample '{}': {} lists no files",
                    sample.name,
                    list.display()
                )));
            }
            let list_dir = list.parent().unwrap_or(Path::new("."));
            out.extend(expand_files(sample, &lines, list_dir, skip)?);
        }
        Ok(out)
    }

    /// The tree `sample` reads: its own, else the dataset's.
    pub fn tree_of<'a>(&'a self, sample: &'a SampleConfig) -> &'a str {
        sample
            .tree
            .as_deref()
            .or(self.tree.as_deref())
            .unwrap_or_default()
    }

    /// How `sample` is read: its resolved schema, tree, metadata, entry range and files.
    pub fn sample_plan(
        &self,
        sample: &SampleConfig,
        base_dir: &Path,
    ) -> Result<SamplePlan, DataError> {
        Ok(SamplePlan {
            tree: self.tree_of(sample).to_owned(),
            meta: SampleMeta {
                name: Arc::from(sample.name.as_str()),
                label: Label::from(&sample.label),
                weight_branch: sample.weight.clone(),
                scale: sample.scale,
            },
            range: EntryRange {
                entry_start: sample.entry_start,
                entry_stop: sample.entry_stop.unwrap_or(u64::MAX),
                step_size: self.step_size,
                threads: 0,
            },
            files: self.sample_files(sample, base_dir)?,
        })
    }
}

/// `patterns` (paths, globs relative to `base_dir`, URLs) as the files they name.
fn expand_files(
    sample: &SampleConfig,
    patterns: &[String],
    base_dir: &Path,
    keep_missing: bool,
) -> Result<Vec<PathBuf>, DataError> {
    let mut out = Vec::new();
    for pattern in patterns {
        if gnn4c_rootio::is_url(Path::new(pattern)) {
            out.push(PathBuf::from(pattern));
            continue;
        }
        let full = if Path::new(pattern).is_absolute() {
            PathBuf::from(pattern)
        } else {
            base_dir.join(pattern)
        };
        let is_glob = pattern.contains(['*', '?', '[']);
        if !is_glob {
            // A missing file is an error here, unless bad files are skipped: then it is
            // skipped when read, and named.
            if !full.is_file() && !keep_missing {
                return Err(DataError::FileNotFound { path: full });
            }
            out.push(full);
            continue;
        }
        let text = full.to_string_lossy().into_owned();
        let paths = glob::glob(&text).map_err(|e| {
            DataError::Config(format!(
                "sample '{}': bad glob '{pattern}': {e}",
                sample.name
            ))
        })?;
        let mut matched: Vec<PathBuf> = paths
            .filter_map(Result::ok)
            .filter(|p| p.is_file())
            .collect();
        if matched.is_empty() {
            return Err(DataError::NoFileMatches {
                sample: sample.name.clone(),
                pattern: text,
            });
        }
        matched.sort();
        out.extend(matched);
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_built_in_name_is_a_declaration_that_parses() {
        let names: Vec<&str> = BUILTIN_INPUTS.iter().map(|(n, _)| *n).collect();
        assert_eq!(names, BUILTIN_DECLARATIONS);
        for name in BUILTIN_DECLARATIONS {
            let spec = builtin_inputs(name).expect("listed").expect("parses");
            Inputs::new(&spec).expect("valid");
        }
        assert!(builtin_inputs("nope").is_none());
    }
}
