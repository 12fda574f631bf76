//! Run configs composed the Hydra way: a defaults list of config groups, then the file, then `GNN4C_` variables, then `KEY=VALUE`.
//!
//! A primary config (`configs/experiment/*.yaml`, or any run config) may start with
//!
//! ```yaml
//! defaults:
//!   - data: demo_pretrain      # configs/data/demo_pretrain.yaml (a dataset file: `data` is its path)
//!   - model: root_gnn          # configs/model/root_gnn.yaml, merged under `model`
//!   - task: multiclass         # configs/task/multiclass.yaml, under `task`
//!   - trainer: default         # configs/trainer/default.yaml, under `trainer`
//!   - environment: local       # configs/environment/local.yaml, under `environment`
//!   - _self_                   # the file's own keys (last when not listed, as in Hydra ≥ 1.1)
//! ```
//!
//! Layers merge in that order, later keys winning; then every `GNN4C_<SECTION>__<KEY>` environment
//! variable, then the command line: `group=option` replaces the group's entry in the defaults list
//! (or is merged after the file when the list has none), `a.b=value` sets one key (the value is
//! parsed as YAML). Group files are looked up in the config root (the nearest folder above the
//! primary config that holds group folders), then in `./configs`, then among the copies built into
//! the binary (model, task, trainer, environment), so a run config works from any folder.
//! String values may use `${env:NAME}` (an unset variable is an error naming it).
//!
//! Every layer keeps its name, so an unknown key or a wrong type is reported with the layer
//! that set it and the closest valid key.

use std::path::{Path, PathBuf};

use figment::value::{Dict, Map, Value};
use figment::{Figment, Metadata, Profile, Provider};
use serde::de::DeserializeOwned;

use crate::error::ConfigError;

/// The config groups and the run-config key each one fills.
pub const GROUPS: [&str; 5] = ["data", "model", "task", "trainer", "environment"];

/// Group files built into the binary: the repository's own `configs/<group>/<option>.yaml`
/// (the `model` group's come with the families, `crate::family::MODEL_GROUPS`).
const BUILTIN: [(&str, &str, &str); 8] = [
    (
        "task",
        "binary",
        include_str!("../../../configs/task/binary.yaml"),
    ),
    (
        "task",
        "multiclass",
        include_str!("../../../configs/task/multiclass.yaml"),
    ),
    (
        "task",
        "multilabel",
        include_str!("../../../configs/task/multilabel.yaml"),
    ),
    (
        "trainer",
        "default",
        include_str!("../../../configs/trainer/default.yaml"),
    ),
    (
        "trainer",
        "demo_pretrain",
        include_str!("../../../configs/trainer/demo_pretrain.yaml"),
    ),
    (
        "trainer",
        "small_data",
        include_str!("../../../configs/trainer/small_data.yaml"),
    ),
    (
        "environment",
        "local",
        include_str!("../../../configs/environment/local.yaml"),
    ),
    (
        "environment",
        "perlmutter",
        include_str!("../../../configs/environment/perlmutter.yaml"),
    ),
];

/// The text of the built-in group file `<group>/<option>.yaml`.
pub fn builtin(group: &str, option: &str) -> Option<&'static str> {
    builtin_options(group)
        .find(|(o, _)| *o == option)
        .map(|(_, text)| text)
}

/// The built-in options of `group` with their text.
fn builtin_options(group: &str) -> impl Iterator<Item = (&'static str, &'static str)> + '_ {
    let models = crate::family::MODEL_GROUPS
        .iter()
        .map(|(o, t)| ("model", *o, *t));
    BUILTIN
        .iter()
        .copied()
        .chain(models)
        .filter(move |(g, _, _)| *g == group)
        .map(|(_, o, t)| (o, t))
}

fn err<T>(msg: impl Into<String>) -> Result<T, ConfigError> {
    Err(ConfigError(msg.into()))
}

/// One named layer of the composition.
#[derive(Debug, Clone)]
pub struct Layer {
    /// Where it came from, as the user would name it.
    pub label: String,
    dict: Dict,
}

impl Provider for Layer {
    fn metadata(&self) -> Metadata {
        Metadata::named(self.label.clone())
    }

    fn data(&self) -> Result<Map<Profile, Dict>, figment::Error> {
        Ok(Map::from([(Profile::Default, self.dict.clone())]))
    }
}

/// A composed config: its layers in merge order.
#[derive(Debug, Clone)]
pub struct Composed {
    /// The layers, first merged first.
    pub layers: Vec<Layer>,
}

impl Composed {
    /// The layers' labels, in merge order (saved with the resolved config).
    pub fn sources(&self) -> Vec<String> {
        self.layers.iter().map(|l| l.label.clone()).collect()
    }

    /// Deserializes the merged layers; errors name the key, the layer and the closest valid key.
    pub fn extract<T: DeserializeOwned>(&self) -> Result<T, ConfigError> {
        let mut fig = Figment::new();
        for layer in &self.layers {
            fig = fig.merge(layer.clone());
        }
        fig.extract().map_err(|e| ConfigError(self.explain(e)))
    }

    /// The label of the last layer that sets `path`.
    fn setter(&self, path: &[String]) -> Option<&str> {
        self.layers
            .iter()
            .rev()
            .find(|l| lookup(&l.dict, path).is_some())
            .map(|l| l.label.as_str())
    }

    fn explain(&self, e: figment::Error) -> String {
        e.into_iter()
            .map(|e| {
                let mut path = e.path.clone();
                match &e.kind {
                    figment::error::Kind::UnknownField(found, expected) => {
                        // figment's path ends with the unknown key itself.
                        if path.last() != Some(found) {
                            path.push(found.clone());
                        }
                        let parent = path[..path.len() - 1].to_vec();
                        let hint =
                            gnn4c_features::closest_names(found, expected.iter().copied(), 1)
                                .first()
                                .map(|c| {
                                    let mut p = parent.clone();
                                    p.push(c.clone());
                                    format!(" (did you mean `{}`?)", p.join("."))
                                })
                                .unwrap_or_default();
                        format!(
                            "unknown key `{}` in {}{hint}",
                            path.join("."),
                            self.setter(&path).unwrap_or("the config")
                        )
                    }
                    figment::error::Kind::MissingField(field) => {
                        if path.last().map(String::as_str) != Some(field.as_ref()) {
                            path.push(field.to_string());
                        }
                        let key = path.join(".");
                        let group = GROUPS.contains(&key.as_str());
                        format!(
                            "missing key `{key}`{}",
                            if group {
                                format!(": set it, or select a group file with `{key}=NAME`")
                            } else {
                                String::new()
                            }
                        )
                    }
                    kind => {
                        let label = self.setter(&path).map_or_else(
                            || e.metadata.as_ref().map(|m| m.name.to_string()),
                            |l| Some(l.to_owned()),
                        );
                        format!(
                            "`{}`: {kind}{}",
                            path.join("."),
                            label.map(|l| format!(" (in {l})")).unwrap_or_default()
                        )
                    }
                }
            })
            .collect::<Vec<_>>()
            .join("; ")
    }
}

fn lookup<'a>(dict: &'a Dict, path: &[String]) -> Option<&'a Value> {
    let (first, rest) = path.split_first()?;
    let v = dict.get(first)?;
    if rest.is_empty() {
        return Some(v);
    }
    match v {
        Value::Dict(_, d) => lookup(d, rest),
        _ => None,
    }
}

/// The run config a command names: a file, or the name of one in `configs/experiment/`.
pub fn resolve_primary(arg: &Path) -> Result<PathBuf, ConfigError> {
    if arg.is_file() {
        return Ok(arg.to_path_buf());
    }
    let experiments = Path::new("configs/experiment");
    if arg.extension().is_none() && arg.components().count() == 1 {
        let named = experiments.join(arg).with_extension("yaml");
        if named.is_file() {
            return Ok(named);
        }
    }
    let names = options_in(experiments);
    let hint =
        gnn4c_features::closest_names(&arg.to_string_lossy(), names.iter().map(String::as_str), 3);
    err(format!(
        "run config not found: {} (neither a file nor an experiment in {}{})",
        arg.display(),
        experiments.display(),
        if hint.is_empty() {
            String::new()
        } else {
            format!("; closest: {}", hint.join(", "))
        }
    ))
}

/// The `.yaml` stems in `dir`, sorted.
fn options_in(dir: &Path) -> Vec<String> {
    let mut v: Vec<String> = std::fs::read_dir(dir)
        .into_iter()
        .flatten()
        .flatten()
        .filter_map(|e| {
            let p = e.path();
            (p.extension().is_some_and(|x| x == "yaml")).then(|| {
                p.file_stem()
                    .map(|s| s.to_string_lossy().into_owned())
                    .unwrap_or_default()
            })
        })
        .collect();
    v.sort();
    v
}

/// The nearest folder at or above the primary config's folder that holds group folders.
fn config_root(primary: &Path) -> Option<PathBuf> {
    let mut dir = primary.parent().map(Path::to_path_buf);
    while let Some(d) = dir {
        let probe = if d.as_os_str().is_empty() {
            PathBuf::from(".")
        } else {
            d.clone()
        };
        if ["model", "task", "trainer", "environment", "experiment"]
            .iter()
            .any(|g| probe.join(g).is_dir())
        {
            return Some(d);
        }
        if d.as_os_str().is_empty() {
            break;
        }
        dir = d.parent().map(Path::to_path_buf);
    }
    None
}

/// Where a group file is: its path (or `None` for a built-in copy) and its text.
fn find_group_file(
    root: Option<&Path>,
    group: &str,
    option: &str,
) -> Result<(Option<PathBuf>, String), ConfigError> {
    let as_path = Path::new(option);
    if option.contains('/') || as_path.extension().is_some() {
        return std::fs::read_to_string(as_path)
            .map(|t| (Some(as_path.to_path_buf()), t))
            .or_else(|e| err(format!("{group}={option}: cannot read {option}: {e}")));
    }
    let mut dirs: Vec<PathBuf> = root.map(|r| r.join(group)).into_iter().collect();
    let local = Path::new("configs").join(group);
    if !dirs.contains(&local) {
        dirs.push(local);
    }
    for d in &dirs {
        let p = d.join(option).with_extension("yaml");
        if p.is_file() {
            return std::fs::read_to_string(&p)
                .map(|t| (Some(p.clone()), t))
                .or_else(|e| err(format!("reading {}: {e}", p.display())));
        }
    }
    if let Some(text) = builtin(group, option) {
        return Ok((None, text.to_owned()));
    }
    let mut names: Vec<String> = dirs.iter().flat_map(|d| options_in(d)).collect();
    names.extend(builtin_options(group).map(|(o, _)| o.to_owned()));
    names.sort();
    names.dedup();
    let looked: Vec<String> = dirs.iter().map(|d| d.display().to_string()).collect();
    err(format!(
        "no {group} config `{option}` (looked in {}{}); available: {}",
        looked.join(", "),
        if group == "data" {
            ""
        } else {
            " and the built-in ones"
        },
        if names.is_empty() {
            "none".to_owned()
        } else {
            let closest =
                gnn4c_features::closest_names(option, names.iter().map(String::as_str), 1);
            format!(
                "{}{}",
                names.join(", "),
                closest
                    .first()
                    .map(|c| format!(" (did you mean `{c}`?)"))
                    .unwrap_or_default()
            )
        }
    ))
}

/// A YAML text as a dict (the default profile's data), or an error naming `label`.
fn parse_yaml(text: &str, label: &str) -> Result<Dict, ConfigError> {
    use figment::providers::{Format, Yaml};
    if text.trim().is_empty() {
        return Ok(Dict::new());
    }
    let data = Yaml::string(text)
        .data()
        .map_err(|e| ConfigError(format!("{label}: {e}")))?;
    Ok(data.into_values().next().unwrap_or_default())
}

/// Replaces `${env:NAME}` in every string value; an unset variable is an error naming it.
fn interpolate(dict: &mut Dict, label: &str, path: &mut Vec<String>) -> Result<(), ConfigError> {
    for (k, v) in dict.iter_mut() {
        path.push(k.clone());
        interpolate_value(v, label, path)?;
        path.pop();
    }
    Ok(())
}

fn interpolate_value(
    v: &mut Value,
    label: &str,
    path: &mut Vec<String>,
) -> Result<(), ConfigError> {
    match v {
        Value::String(tag, s) if s.contains("${env:") => {
            let mut out = String::new();
            let mut rest = s.as_str();
            while let Some(start) = rest.find("${env:") {
                out.push_str(&rest[..start]);
                let after = &rest[start + 6..];
                let Some(end) = after.find('}') else {
                    return err(format!(
                        "`{}` in {label}: unclosed `${{env:` in {s:?}",
                        path.join(".")
                    ));
                };
                let name = &after[..end];
                match std::env::var(name) {
                    Ok(value) => out.push_str(&value),
                    Err(_) => {
                        return err(format!(
                            "`{}` in {label} needs the environment variable {name}, which is not set",
                            path.join(".")
                        ));
                    }
                }
                rest = &after[end + 1..];
            }
            out.push_str(rest);
            *v = Value::String(*tag, out);
        }
        Value::Dict(_, d) => interpolate(d, label, path)?,
        Value::Array(_, items) => {
            for item in items {
                interpolate_value(item, label, path)?;
            }
        }
        _ => {}
    }
    Ok(())
}

/// One `a.b.c=value` override as a dict (`{a: {b: {c: value}}}`); the value is parsed as YAML,
/// so `3`, `1e-4`, `true`, `[a, b]` and strings all work.
fn override_dict(key: &str, value: &str, label: &str) -> Result<Dict, ConfigError> {
    let parts: Vec<&str> = key.trim().split('.').collect();
    if parts
        .iter()
        .any(|p| p.is_empty() || !p.chars().all(|c| c.is_ascii_alphanumeric() || c == '_'))
    {
        return err(format!(
            "{label}: '{key}' is not a dotted key like trainer.max_epochs"
        ));
    }
    let parsed = parse_yaml(&format!("v: {}\n", value.trim()), label)?;
    let mut v = parsed.get("v").cloned().unwrap_or(Value::from(""));
    for p in parts.iter().rev() {
        v = Value::from(Dict::from([((*p).to_owned(), v)]));
    }
    match v {
        Value::Dict(_, d) => Ok(d),
        _ => unreachable!("a key path always builds a dict"),
    }
}

/// One command-line item: a group selection (`model=NAME`) or a key override (`a.b=value`).
enum Item {
    Group(String, String),
    Key(String, String),
}

fn parse_item(item: &str) -> Result<Item, ConfigError> {
    let Some((key, value)) = item.split_once('=') else {
        return err(format!(
            "override '{item}' is not KEY=VALUE (for example trainer.max_epochs=3 or data=nanoaod)"
        ));
    };
    let key = key.trim();
    if GROUPS.contains(&key) && !value.trim().is_empty() && !value.trim().starts_with(['{', '[']) {
        Ok(Item::Group(key.to_owned(), value.trim().to_owned()))
    } else {
        Ok(Item::Key(key.to_owned(), value.to_owned()))
    }
}

/// The defaults list of a primary config: (group, option) entries and where `_self_` goes.
fn defaults_list(
    dict: &mut Dict,
    label: &str,
) -> Result<(Vec<(String, String)>, usize), ConfigError> {
    let Some(list) = dict.remove("defaults") else {
        return Ok((Vec::new(), 0));
    };
    let Value::Array(_, items) = list else {
        return err(format!(
            "`defaults` in {label} must be a list like [{{model: root_gnn}}, _self_]"
        ));
    };
    let mut entries = Vec::new();
    let mut self_at = None;
    for item in items {
        match item {
            Value::String(_, s) if s == "_self_" => self_at = Some(entries.len()),
            Value::Dict(_, d) if d.len() == 1 => {
                let (group, option) = d.into_iter().next().expect("one entry");
                if !GROUPS.contains(&group.as_str()) {
                    let closest = gnn4c_features::closest_names(&group, GROUPS, 1);
                    return err(format!(
                        "unknown config group `{group}` in the defaults list of {label} (groups: {}; did you mean `{}`?)",
                        GROUPS.join(", "),
                        closest.first().map_or("", String::as_str)
                    ));
                }
                let Some(option) = option.as_str().map(str::to_owned) else {
                    return err(format!(
                        "defaults entry `{group}` in {label}: the option must be a name like root_gnn"
                    ));
                };
                if entries.iter().any(|(g, _): &(String, String)| *g == group) {
                    return err(format!(
                        "group `{group}` appears twice in the defaults list of {label}"
                    ));
                }
                entries.push((group, option));
            }
            other => {
                return err(format!(
                    "defaults entry {other:?} in {label}: use `group: option` or `_self_`"
                ));
            }
        }
    }
    let n = entries.len();
    Ok((entries, self_at.unwrap_or(n)))
}

/// The layer a group selection contributes.
fn group_layer(
    root: Option<&Path>,
    group: &str,
    option: &str,
    how: &str,
) -> Result<Layer, ConfigError> {
    if group == "data" {
        // Dataset files stand alone (scan, preprocess and inspect read them too): the group
        // selects the file, and `data` holds its path.
        let (path, _) = find_group_file(root, group, option)?;
        let path = path.expect("no built-in datasets");
        return Ok(Layer {
            label: format!("{} ({how} data={option})", path.display()),
            dict: Dict::from([("data".to_owned(), Value::from(path.display().to_string()))]),
        });
    }
    let (path, text) = find_group_file(root, group, option)?;
    let label = match &path {
        Some(p) => format!("{} ({how} {group}={option})", p.display()),
        None => format!("built-in {group}/{option}.yaml ({how} {group}={option})"),
    };
    let mut dict = parse_yaml(&text, &label)?;
    if dict.contains_key("defaults") {
        return err(format!(
            "{label}: group files cannot have their own defaults list"
        ));
    }
    interpolate(&mut dict, &label, &mut vec![group.to_owned()])?;
    Ok(Layer {
        label,
        dict: Dict::from([(group.to_owned(), Value::from(dict))]),
    })
}

/// Composes the run config `primary` with command-line `overrides` and `flags` (pairs of the
/// flag's name and the `key=value` it stands for).
pub fn compose(
    primary: &Path,
    overrides: &[String],
    flags: &[(&str, String)],
) -> Result<Composed, ConfigError> {
    let label = primary.display().to_string();
    let text = std::fs::read_to_string(primary)
        .or_else(|e| err(format!("reading run config {label}: {e}")))?;
    let mut own = parse_yaml(&text, &label)?;
    let (mut entries, self_at) = defaults_list(&mut own, &label)?;
    interpolate(&mut own, &label, &mut Vec::new())?;
    let root = config_root(primary);

    // Command-line group selections replace their defaults entry, or come after the file.
    let mut keys = Vec::new();
    let mut late_groups = Vec::new();
    for o in overrides {
        match parse_item(o)? {
            Item::Group(g, opt) => match entries.iter_mut().find(|(eg, _)| *eg == g) {
                Some(e) => e.1 = opt,
                None => late_groups.push((g, opt)),
            },
            Item::Key(k, v) => keys.push((k, v, format!("command-line override `{o}`"))),
        }
    }

    let mut layers = Vec::new();
    for (i, (g, opt)) in entries.iter().enumerate() {
        if i == self_at {
            layers.push(Layer {
                label: label.clone(),
                dict: own.clone(),
            });
        }
        layers.push(group_layer(root.as_deref(), g, opt, "defaults:")?);
    }
    if self_at >= entries.len() {
        layers.push(Layer {
            label: label.clone(),
            dict: own,
        });
    }
    for (g, opt) in &late_groups {
        layers.push(group_layer(root.as_deref(), g, opt, "command line:")?);
    }

    // GNN4C_SECTION__KEY environment variables. Other GNN4C_ names are not config: the test-data
    // folder, the network settings, the Slurm scripts' settings.
    let mut vars: Vec<(String, String)> = std::env::vars()
        .filter(|(k, _)| k.starts_with("GNN4C_") && k.contains("__"))
        .collect();
    vars.sort();
    for (k, v) in vars {
        let key = k["GNN4C_".len()..].to_lowercase().replace("__", ".");
        let label = format!("environment variable {k}");
        let dict = override_dict(&key, &v, &label)?;
        layers.push(Layer { label, dict });
    }
    for (k, v, label) in keys {
        let dict = override_dict(&k, &v, &label)?;
        layers.push(Layer { label, dict });
    }
    for (flag, kv) in flags {
        let (k, v) = kv.split_once('=').expect("flags are key=value");
        let label = format!("command-line flag --{flag}");
        let dict = override_dict(k, v, &label)?;
        layers.push(Layer { label, dict });
    }
    Ok(Composed { layers })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[derive(Debug, serde::Deserialize)]
    #[serde(deny_unknown_fields)]
    struct Inner {
        a: u32,
        #[serde(default)]
        b: String,
    }

    #[derive(Debug, serde::Deserialize)]
    #[serde(deny_unknown_fields)]
    struct Top {
        model: Inner,
        #[serde(default)]
        name: String,
    }

    fn write(dir: &Path, rel: &str, text: &str) -> PathBuf {
        let p = dir.join(rel);
        std::fs::create_dir_all(p.parent().expect("parent")).expect("mkdir");
        std::fs::write(&p, text).expect("write");
        p
    }

    #[test]
    fn defaults_self_and_overrides_merge_in_order_and_errors_name_their_layer() {
        let dir = tempfile::tempdir().expect("tempdir");
        write(dir.path(), "c/model/small.yaml", "a: 1\nb: small\n");
        write(dir.path(), "c/model/big.yaml", "a: 9\n");
        let exp = write(
            dir.path(),
            "c/experiment/e.yaml",
            "defaults:\n  - model: small\n  - _self_\nname: e\nmodel: {a: 2}\n",
        );
        let top: Top = compose(&exp, &[], &[])
            .expect("compose")
            .extract()
            .expect("ok");
        assert_eq!(
            (top.model.a, top.model.b.as_str()),
            (2, "small"),
            "_self_ wins"
        );
        assert_eq!(top.name, "e");

        // A group selection replaces the defaults entry; a key override comes last.
        let c = compose(&exp, &["model=big".into(), "model.b=x".into()], &[]).expect("compose");
        let top: Top = c.extract().expect("ok");
        assert_eq!((top.model.a, top.model.b.as_str()), (2, "x"));
        assert!(c.sources()[0].contains("big.yaml"), "{:?}", c.sources());

        // _self_ first: the group file wins over the file's own keys.
        let exp2 = write(
            dir.path(),
            "c/experiment/f.yaml",
            "defaults:\n  - _self_\n  - model: big\nmodel: {a: 2}\n",
        );
        let top: Top = compose(&exp2, &[], &[])
            .expect("compose")
            .extract()
            .expect("ok");
        assert_eq!(top.model.a, 9);

        // Unknown key: the key, the layer that set it, the closest valid key.
        let c = compose(&exp, &["model.bb=1".into()], &[]).expect("compose");
        let e = c.extract::<Top>().expect_err("unknown").0;
        assert!(
            e.contains("`model.bb`")
                && e.contains("command-line override `model.bb=1`")
                && e.contains("did you mean `model.b`"),
            "{e}"
        );
        write(dir.path(), "c/model/typo.yaml", "a: 1\nbee: 2\n");
        let e = compose(&exp, &["model=typo".into()], &[])
            .expect("compose")
            .extract::<Top>()
            .expect_err("unknown")
            .0;
        assert!(e.contains("typo.yaml") && e.contains("model.bee"), "{e}");
        // Wrong type: the key and the layer.
        let e = compose(&exp, &["model.a=many".into()], &[])
            .expect("compose")
            .extract::<Top>()
            .expect_err("type")
            .0;
        assert!(e.contains("`model.a`") && e.contains("model.a=many"), "{e}");
        // A missing group option lists what exists.
        let e = compose(&exp, &["model=bog".into()], &[])
            .expect_err("no such")
            .0;
        assert!(e.contains("big") && e.contains("small"), "{e}");
        // Not KEY=VALUE.
        let e = compose(&exp, &["epochs".into()], &[]).expect_err("usage").0;
        assert!(e.contains("KEY=VALUE"), "{e}");
        // An unknown group in the defaults list.
        let bad = write(
            dir.path(),
            "c/experiment/g.yaml",
            "defaults:\n  - modle: big\n",
        );
        let e = compose(&bad, &[], &[]).expect_err("group").0;
        assert!(e.contains("modle") && e.contains("`model`"), "{e}");
    }

    #[test]
    fn env_interpolation_and_builtin_groups() {
        let dir = tempfile::tempdir().expect("tempdir");
        let p = write(
            dir.path(),
            "r.yaml",
            "path: \"${env:GNN4C_TEST_UNSET_VAR_XYZ}/runs\"\n",
        );
        let e = compose(&p, &[], &[]).expect_err("unset").0;
        assert!(
            e.contains("GNN4C_TEST_UNSET_VAR_XYZ") && e.contains("`path`"),
            "{e}"
        );
        let p = write(dir.path(), "s.yaml", "path: \"${env:PATH}/x\"\n");
        let c = compose(&p, &[], &[]).expect("compose");
        #[derive(serde::Deserialize)]
        struct P {
            path: String,
        }
        let v: P = c.extract().expect("ok");
        assert!(
            v.path.ends_with("/x") && !v.path.contains("${"),
            "{}",
            v.path
        );
        // A group the config root does not have comes from the copies built into the binary.
        let c = compose(&p, &["environment=local".into()], &[]).expect("compose");
        assert!(
            c.sources()[1].starts_with("built-in environment/local.yaml"),
            "{:?}",
            c.sources()
        );
        // Perlmutter's runs go to $SCRATCH: without it, the error names the variable.
        if std::env::var_os("SCRATCH").is_none() {
            let e = compose(&p, &["environment=perlmutter".into()], &[])
                .expect_err("no SCRATCH")
                .0;
            assert!(e.contains("SCRATCH") && e.contains("perlmutter"), "{e}");
        }
    }
}
