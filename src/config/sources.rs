//! Raw configuration sources: TOML files, `.env` files and the environment, each read into a
//! [`Layers`] map from variable name to its text and where it came from.
//!
//! Sources are merged by precedence (a later layer wins) before any value is parsed, so a bad
//! value is reported only if it is the one in effect, with the file it came from.

use std::collections::{BTreeMap, HashMap};
use std::fmt;
use std::path::{Path, PathBuf};

use config::Source;

use super::ConfigError;
use super::vars;

/// Where a raw value came from.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Origin {
    Env,
    File(PathBuf),
}

impl fmt::Display for Origin {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Origin::Env => f.write_str("environment"),
            Origin::File(path) => write!(f, "{}", path.display()),
        }
    }
}

/// One variable's text and origin.
#[derive(Debug, Clone)]
pub(crate) struct Raw {
    pub value: String,
    pub origin: Origin,
}

/// One model's row of a file's `[prices]` table: each field's number (`None`: not a number).
pub(crate) type PriceRow = Vec<(String, Option<f64>)>;

/// Variable name → raw value, merged by precedence; the `[prices]` rows by model; and the
/// `BUB_*` names Bub does not know, with where each was seen.
#[derive(Debug, Default, Clone)]
pub(crate) struct Layers {
    values: HashMap<&'static str, Raw>,
    prices: HashMap<String, PriceRow>,
    unknown: BTreeMap<String, Origin>,
}

impl Layers {
    fn insert(&mut self, var: &'static str, value: String, origin: Origin) {
        self.values.insert(var, Raw { value, origin });
    }

    /// Overlays `higher` on `self`: every variable `higher` sets wins.
    pub(crate) fn overlay(&mut self, higher: Layers) {
        self.values.extend(higher.values);
        self.prices.extend(higher.prices);
        self.unknown.extend(higher.unknown);
    }

    /// One warning for each `BUB_*` name of the environment or a `.env` file that Bub does not
    /// know (a misspelling would otherwise be ignored silently), by name.
    pub(crate) fn unknown_warnings(&self) -> Vec<String> {
        self.unknown
            .iter()
            .map(|(name, origin)| {
                let warning = vars::stray_warning(name);
                match origin {
                    Origin::Env => warning,
                    Origin::File(path) => format!("{warning}; set in {}", path.display()),
                }
            })
            .collect()
    }

    /// Records `name` if it looks like Bub's (`BUB_*`) but is not a variable.
    fn note_unknown(&mut self, name: &str, origin: &Origin) {
        if vars::is_stray(name) {
            self.unknown.insert(name.to_owned(), origin.clone());
        }
    }

    /// The `[prices]` rows in effect (a higher file's row for a model replaces a lower one's).
    pub(crate) fn prices(&self) -> impl Iterator<Item = (String, PriceRow)> + '_ {
        self.prices.iter().map(|(k, v)| (k.clone(), v.clone()))
    }

    /// The value in effect; `None` if unset or blank (blank means "use the default").
    pub(crate) fn get(&self, var: &str) -> Option<&Raw> {
        self.values
            .get(var)
            .filter(|raw| !raw.value.trim().is_empty())
    }

    /// Parses the value in effect with `parse` (given the name and the text); an error says
    /// which file the value came from.
    pub(crate) fn parse<T>(
        &self,
        var: &str,
        parse: impl FnOnce(&str, &str) -> Result<T, ConfigError>,
    ) -> Result<Option<T>, ConfigError> {
        let Some(raw) = self.get(var) else {
            return Ok(None);
        };
        parse(var, &raw.value).map(Some).map_err(|mut err| {
            if raw.origin != Origin::Env {
                err.message = format!("{} (set in {})", err.message, raw.origin);
            }
            err
        })
    }

    /// Overwrites `field` with the parsed value of `var` when it is set.
    pub(crate) fn set<T>(
        &self,
        var: &str,
        field: &mut T,
        parse: impl FnOnce(&str, &str) -> Result<T, ConfigError>,
    ) -> Result<(), ConfigError> {
        if let Some(value) = self.parse(var, parse)? {
            *field = value;
        }
        Ok(())
    }

    /// Removes `var`, returning its raw value.
    pub(crate) fn take(&mut self, var: &str) -> Option<Raw> {
        self.values.remove(var)
    }
}

/// The canonical name of a variable, matched case-insensitively.
fn canonical_var(name: &str) -> Option<&'static str> {
    vars::find(name).map(|var| var.name)
}

/// A TOML key: the variable name, or its lowercase form without the `BUB_` prefix.
fn toml_key_var(key: &str) -> Option<&'static str> {
    canonical_var(key).or_else(|| canonical_var(&format!("BUB_{key}")))
}

/// Known variables from an environment map. Names match case-insensitively; an exact
/// (uppercase) name wins over a differently-cased duplicate.
pub(crate) fn from_env(env: &HashMap<String, String>) -> Layers {
    let mut layers = Layers::default();
    let mut entries: Vec<(&String, &String)> = env.iter().collect();
    // Exact names last so they win.
    entries.sort_by_key(|(name, _)| canonical_var(name).is_some_and(|var| var == name.as_str()));
    for (name, value) in entries {
        match canonical_var(name) {
            Some(var) => layers.insert(var, value.clone(), Origin::Env),
            None => layers.note_unknown(name, &Origin::Env),
        }
    }
    layers
}

/// Known variables from a `.env` file, read without touching the process environment.
pub(crate) fn from_dotenv(path: &Path) -> Result<Layers, ConfigError> {
    let file_var = path.display().to_string();
    let iter = dotenvy::from_path_iter(path)
        .map_err(|err| ConfigError::new(&file_var, format!("cannot read: {err}")))?;
    let mut layers = Layers::default();
    let origin = Origin::File(path.to_path_buf());
    for item in iter {
        let (name, value) = item.map_err(|err| dotenv_error(path, err))?;
        match canonical_var(&name) {
            Some(var) => layers.insert(var, value, origin.clone()),
            None => layers.note_unknown(&name, &origin),
        }
    }
    Ok(layers)
}

/// A `.env` error without the offending line's text (it may hold a secret).
fn dotenv_error(path: &Path, err: dotenvy::Error) -> ConfigError {
    let file_var = path.display().to_string();
    match err {
        dotenvy::Error::LineParse(line, _) => {
            let line_no = std::fs::read_to_string(path)
                .ok()
                .and_then(|text| text.find(&line).map(|pos| text[..pos].lines().count() + 1));
            let message = match line_no {
                Some(n) => format!("syntax error on line {n}"),
                None => "syntax error".to_owned(),
            };
            ConfigError::new(file_var, message)
        }
        other => ConfigError::new(file_var, format!("cannot read: {other}")),
    }
}

/// Known variables from a TOML file. A syntax error is reported under `err_var` (e.g.
/// `--config`), or under the file's path when `None`; unknown keys, tables, and arrays for
/// non-list variables are errors naming the key.
pub(crate) fn from_toml(path: &Path, err_var: Option<&str>) -> Result<Layers, ConfigError> {
    let map = config::File::from(path)
        .format(config::FileFormat::Toml)
        .required(true)
        .collect()
        .map_err(|err| {
            let reason = one_line_toml_error(&err.to_string());
            match err_var {
                Some(var) => ConfigError::new(var, format!("{}: {reason}", path.display())),
                None => ConfigError::new(path.display().to_string(), reason),
            }
        })?;
    let origin = Origin::File(path.to_path_buf());
    let mut layers = Layers::default();
    for (key, value) in map {
        if key == "prices" {
            layers.prices = price_rows(value.kind).map_err(|message| {
                ConfigError::new("prices", format!("{message} (set in {})", path.display()))
            })?;
            continue;
        }
        let var = toml_key_var(&key)
            .ok_or_else(|| ConfigError::new(&key, vars::unknown_key(&key, path)))?;
        let text = toml_value_text(var, value).map_err(|message| {
            ConfigError::new(var, format!("{message} (set in {})", path.display()))
        })?;
        layers.insert(var, text, origin.clone());
    }
    Ok(layers)
}

/// The rows of a `[prices]` table: `"provider:model" = { input = …, output = … }`.
fn price_rows(kind: config::ValueKind) -> Result<HashMap<String, PriceRow>, String> {
    use config::ValueKind as K;
    let K::Table(models) = kind else {
        return Err("expected a table of models, e.g. [prices.\"openai:gpt-4o-mini\"]".to_owned());
    };
    let mut rows = HashMap::new();
    for (model, value) in models {
        let K::Table(fields) = value.kind else {
            return Err(format!(
                "prices.{model:?}: expected a table (input, cached_input, cache_write, output)"
            ));
        };
        let row = fields
            .into_iter()
            .map(|(field, v)| {
                let number = match v.kind {
                    K::Float(x) => Some(x),
                    K::I64(n) => Some(n as f64),
                    K::U64(n) => Some(n as f64),
                    _ => None,
                };
                (field, number)
            })
            .collect();
        rows.insert(model, row);
    }
    Ok(rows)
}

/// The text form of a TOML value, as an environment variable would hold it.
fn toml_value_text(var: &str, value: config::Value) -> Result<String, String> {
    use config::ValueKind as K;
    Ok(match value.kind {
        K::Nil => "null".to_owned(),
        K::Table(_) => return Err("expected a value, not a table".to_owned()),
        K::Array(items) => {
            if !vars::find(var).is_some_and(|v| v.list) {
                return Err("expected a single value, not an array".to_owned());
            }
            let items = items
                .into_iter()
                .map(|item| match item.kind {
                    K::String(s) => Ok(serde_json::Value::String(s)),
                    K::I64(n) => Ok(n.into()),
                    K::U64(n) => Ok(n.into()),
                    K::I128(n) => Ok(n.to_string().into()),
                    K::U128(n) => Ok(n.to_string().into()),
                    _ => Err("list items must be strings or integers".to_owned()),
                })
                .collect::<Result<Vec<_>, _>>()?;
            serde_json::Value::Array(items).to_string()
        }
        // A string, a boolean or a number, as the config crate writes it.
        _ => value.into_string().map_err(|e| e.to_string())?,
    })
}

/// A TOML parse error on one line, without the source excerpt (it may hold a secret) and
/// without the `in <file>` the config crate appends (the caller names the file).
fn one_line_toml_error(text: &str) -> String {
    text.lines()
        .map(str::trim)
        .filter(|line| !line.is_empty() && !line.contains('|') && !line.starts_with("in "))
        .collect::<Vec<_>>()
        .join(": ")
}
