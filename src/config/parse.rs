//! Parsers for single configuration values: booleans, bounded integers, durations, lists, URLs,
//! the model string, log settings, secrets and `~` paths.
//!
//! Every parser takes the variable name so its error names it. Values are echoed in errors with
//! `{:?}` (one line, escapes visible); secrets are never echoed and URL credentials are masked.

use std::path::{Path, PathBuf};
use std::time::Duration;

use super::providers::{known_providers, provider_base_url};
use super::{ConfigError, MaskedUrl, Model};
use crate::time::secs;

/// The literal that means "unset" for optional fields (case-insensitive).
pub(crate) fn is_null(raw: &str) -> bool {
    raw.trim().eq_ignore_ascii_case("null")
}

/// `true/false/1/0/yes/no/on/off/t/f/y/n`, case-insensitive (pydantic's spellings).
pub(crate) fn parse_bool(var: &str, raw: &str) -> Result<bool, ConfigError> {
    match raw.trim().to_ascii_lowercase().as_str() {
        "true" | "1" | "yes" | "on" | "t" | "y" => Ok(true),
        "false" | "0" | "no" | "off" | "f" | "n" => Ok(false),
        _ => Err(ConfigError::new(
            var,
            format!("invalid boolean {raw:?} (expected true/false, 1/0, yes/no or on/off)"),
        )),
    }
}

/// A whole number in `min..=max`.
pub(crate) fn parse_u32_range(
    var: &str,
    raw: &str,
    min: u32,
    max: u32,
) -> Result<u32, ConfigError> {
    let value: u32 = raw.trim().parse().map_err(|_| {
        ConfigError::new(
            var,
            format!("invalid integer {raw:?} (expected a whole number >= {min})"),
        )
    })?;
    if value < min {
        return Err(ConfigError::new(
            var,
            format!("must be >= {min}, got {value}"),
        ));
    }
    if value > max {
        return Err(ConfigError::new(
            var,
            format!("must be at most {max}, got {value}"),
        ));
    }
    Ok(value)
}

/// Seconds as a finite number in `0..=max`; fractions allowed (`0`, `0.2`). The maximum keeps
/// every duration built from the value (and every deadline `now + value`) representable.
pub(crate) fn parse_seconds(var: &str, raw: &str, max: f64) -> Result<f64, ConfigError> {
    let value: f64 = raw.trim().parse().map_err(|_| {
        ConfigError::new(
            var,
            format!("invalid duration {raw:?} (expected seconds, e.g. 10 or 0.5)"),
        )
    })?;
    if !value.is_finite() || value < 0.0 {
        return Err(ConfigError::new(
            var,
            format!("must be a finite number of seconds >= 0, got {raw:?}"),
        ));
    }
    if value > max {
        return Err(ConfigError::new(
            var,
            format!("must be at most {max} seconds, got {raw:?}"),
        ));
    }
    Ok(value)
}

/// Seconds as a finite number in `(0, max]`: a duration that must not be zero (a deadline of
/// zero would fail every call).
pub(crate) fn parse_positive_seconds(var: &str, raw: &str, max: f64) -> Result<f64, ConfigError> {
    let value = parse_seconds(var, raw, max)?;
    if value == 0.0 {
        return Err(ConfigError::new(
            var,
            format!("must be more than 0 seconds, got {raw:?}"),
        ));
    }
    Ok(value)
}

/// An optional timeout of at most `max` seconds: `null`, `none` or `0` mean no timeout.
pub(crate) fn parse_timeout(var: &str, raw: &str, max: f64) -> Result<Option<f64>, ConfigError> {
    if is_null(raw) || raw.trim().eq_ignore_ascii_case("none") {
        return Ok(None);
    }
    let value = parse_seconds(var, raw, max)?;
    Ok((value > 0.0).then_some(value))
}

/// The parser of a whole number in `min..=max` ([`parse_u32_range`]).
pub(crate) fn between(min: u32, max: u32) -> impl Fn(&str, &str) -> Result<u32, ConfigError> {
    move |var, raw| parse_u32_range(var, raw, min, max)
}

/// The parser of a whole number `>= min` that fits in `u32`.
pub(crate) fn at_least(min: u32) -> impl Fn(&str, &str) -> Result<u32, ConfigError> {
    between(min, u32::MAX)
}

/// The parser of a duration of `0..=max` seconds ([`parse_seconds`]).
pub(crate) fn seconds(max: f64) -> impl Fn(&str, &str) -> Result<Duration, ConfigError> {
    move |var, raw| parse_seconds(var, raw, max).map(secs)
}

/// The parser of a duration of `(0, max]` seconds ([`parse_positive_seconds`]).
pub(crate) fn positive_seconds(max: f64) -> impl Fn(&str, &str) -> Result<Duration, ConfigError> {
    move |var, raw| parse_positive_seconds(var, raw, max).map(secs)
}

/// Text, trimmed.
pub(crate) fn trimmed(_: &str, raw: &str) -> Result<String, ConfigError> {
    Ok(raw.trim().to_owned())
}

/// Text, trimmed; `null` is none.
pub(crate) fn optional_text(_: &str, raw: &str) -> Result<Option<String>, ConfigError> {
    Ok((!is_null(raw)).then(|| raw.trim().to_owned()))
}

/// An optional URL ([`parse_url`]): `null` is none.
pub(crate) fn optional_url(var: &str, raw: &str) -> Result<Option<MaskedUrl>, ConfigError> {
    match is_null(raw) {
        true => Ok(None),
        false => parse_url(var, raw).map(|url| Some(url.into())),
    }
}

/// A list: a JSON array of strings/numbers, or a comma-separated list. Items are trimmed and
/// empty items dropped; `null` is the empty list. A value starting with `[` must be valid JSON.
pub(crate) fn parse_list(var: &str, raw: &str) -> Result<Vec<String>, ConfigError> {
    let trimmed = raw.trim();
    if is_null(trimmed) {
        return Ok(Vec::new());
    }
    if !trimmed.starts_with('[') {
        return Ok(trimmed
            .split(',')
            .map(str::trim)
            .filter(|item| !item.is_empty())
            .map(str::to_owned)
            .collect());
    }
    let items: Vec<serde_json::Value> = serde_json::from_str(trimmed).map_err(|err| {
        ConfigError::new(
            var,
            format!("invalid JSON list {raw:?}: {err} (use [\"a\",\"b\"] or a,b)"),
        )
    })?;
    let mut out = Vec::with_capacity(items.len());
    for item in items {
        let text = match item {
            serde_json::Value::String(s) => s,
            serde_json::Value::Number(n) => n.to_string(),
            other => {
                return Err(ConfigError::new(
                    var,
                    format!("list items must be strings or numbers, got {other}"),
                ));
            }
        };
        let text = text.trim();
        if !text.is_empty() {
            out.push(text.to_owned());
        }
    }
    Ok(out)
}

/// Which URL schemes a URL setting accepts.
const HTTP_SCHEMES: &[&str] = &["http", "https"];

/// An `http(s)` URL with a host; returned as written, trailing `/` stripped.
pub(crate) fn parse_url(var: &str, raw: &str) -> Result<String, ConfigError> {
    let trimmed = raw.trim();
    let shown = redact_url_text(trimmed);
    let url = reqwest::Url::parse(trimmed)
        .map_err(|err| ConfigError::new(var, format!("invalid URL {shown:?}: {err}")))?;
    if !HTTP_SCHEMES.contains(&url.scheme()) {
        return Err(ConfigError::new(
            var,
            format!("URL {shown:?} must use http or https"),
        ));
    }
    if url.host_str().is_none_or(str::is_empty) {
        return Err(ConfigError::new(var, format!("URL {shown:?} has no host")));
    }
    Ok(trimmed.trim_end_matches('/').to_owned())
}

/// Masks the `user:password@` part of a URL-looking string, parsed or not.
pub(crate) fn redact_url_text(text: &str) -> String {
    let Some(scheme_end) = text.find("://") else {
        return text.to_owned();
    };
    let authority_start = scheme_end + 3;
    let rest = &text[authority_start..];
    let authority_len = rest.find(['/', '?', '#']).unwrap_or(rest.len());
    match rest[..authority_len].rfind('@') {
        Some(at) => format!(
            "{}***@{}",
            &text[..authority_start],
            &text[authority_start + at + 1..]
        ),
        None => text.to_owned(),
    }
}

/// The password of a URL's `user:password@` part, if it has one.
pub(crate) fn url_password(url: &str) -> Option<String> {
    let url = reqwest::Url::parse(url.trim()).ok()?;
    let password = url.password()?;
    let decoded = percent_encoding::percent_decode_str(password).decode_utf8_lossy();
    Some(decoded.into_owned())
}

/// `guests`, `all` or `off`, case-insensitive.
pub(crate) fn parse_sandbox(var: &str, raw: &str) -> Result<super::SandboxMode, ConfigError> {
    match raw.trim().to_ascii_lowercase().as_str() {
        "guests" => Ok(super::SandboxMode::Guests),
        "all" => Ok(super::SandboxMode::All),
        "off" => Ok(super::SandboxMode::Off),
        _ => Err(ConfigError::new(
            var,
            format!("invalid sandbox mode {raw:?} (expected guests, all or off)"),
        )),
    }
}

/// A secret (API key, token): trimmed; must not contain whitespace or control characters.
/// The value never appears in the error.
pub(crate) fn parse_secret(var: &str, raw: &str) -> Result<Option<super::Secret>, ConfigError> {
    let trimmed = raw.trim();
    if trimmed.is_empty() || is_null(trimmed) {
        return Ok(None);
    }
    if trimmed.chars().any(|c| c.is_whitespace() || c.is_control()) {
        return Err(ConfigError::new(
            var,
            "invalid value: contains whitespace or control characters (value not shown)",
        ));
    }
    Ok(Some(super::Secret::new(trimmed)))
}

/// Splits `provider:model` at the first `:`; both parts non-empty. Without `api_base` the
/// provider must be known.
pub(crate) fn parse_model(
    var: &str,
    raw: &str,
    api_base: Option<&str>,
) -> Result<Model, ConfigError> {
    let model = raw.trim();
    let Some((provider, id)) = model.split_once(':') else {
        return Err(ConfigError::new(
            var,
            format!(
                "invalid model {model:?}: expected provider:model, e.g. openrouter:qwen/qwen3-coder-next"
            ),
        ));
    };
    if provider.trim().is_empty() || id.trim().is_empty() {
        return Err(ConfigError::new(
            var,
            format!("invalid model {model:?}: provider and model must both be non-empty"),
        ));
    }
    if api_base.is_none() && provider_base_url(provider).is_none() {
        return Err(ConfigError::new(
            var,
            format!(
                "unknown provider {provider:?} (known: {}); set BUB_API_BASE to use any \
                 OpenAI-compatible server",
                known_providers()
            ),
        ));
    }
    Ok(Model {
        provider: provider.to_owned(),
        id: id.to_owned(),
    })
}

/// `BUB_FALLBACK_MODELS`: a list (JSON array or comma-separated) of models, each validated like
/// `BUB_MODEL`, at most [`super::MAX_FALLBACK_MODELS`]; a model named twice is kept once.
pub(crate) fn parse_fallback_models(
    raw: &str,
    api_base: Option<&str>,
) -> Result<Vec<Model>, ConfigError> {
    const VAR: &str = "BUB_FALLBACK_MODELS";
    let mut models: Vec<Model> = Vec::new();
    for item in parse_list(VAR, raw)? {
        let model = parse_model(VAR, &item, api_base)?;
        if !models.contains(&model) {
            models.push(model);
        }
    }
    if models.len() > super::MAX_FALLBACK_MODELS {
        return Err(ConfigError::new(
            VAR,
            format!(
                "{} models named; at most {} are tried",
                models.len(),
                super::MAX_FALLBACK_MODELS
            ),
        ));
    }
    Ok(models)
}

/// `trace/debug/info/warn/error` (case-insensitive; `warning` means `warn`), returned lowercase.
pub(crate) fn parse_log_level(var: &str, raw: &str) -> Result<String, ConfigError> {
    let level = raw.trim().to_ascii_lowercase();
    match level.as_str() {
        "trace" | "debug" | "info" | "warn" | "error" => Ok(level),
        "warning" => Ok("warn".to_owned()),
        _ => Err(ConfigError::new(
            var,
            format!("invalid log level {raw:?} (expected trace, debug, info, warn or error)"),
        )),
    }
}

/// `text` or `json`, case-insensitive.
pub(crate) fn parse_log_format(var: &str, raw: &str) -> Result<super::LogFormat, ConfigError> {
    match raw.trim().to_ascii_lowercase().as_str() {
        "text" => Ok(super::LogFormat::Text),
        "json" => Ok(super::LogFormat::Json),
        _ => Err(ConfigError::new(
            var,
            format!("invalid log format {raw:?} (expected text or json)"),
        )),
    }
}

/// Expands a leading `~` (alone or followed by `/`) with `home`; other paths are unchanged.
pub(crate) fn expand_tilde(
    var: &str,
    raw: &str,
    home: Option<&Path>,
) -> Result<PathBuf, ConfigError> {
    let rest = match raw.strip_prefix('~') {
        Some("") => "",
        Some(rest) if rest.starts_with('/') => rest.trim_start_matches('/'),
        _ => return Ok(PathBuf::from(raw)),
    };
    let home = home.ok_or_else(|| {
        ConfigError::new(var, format!("cannot expand ~ in {raw:?}: HOME is not set"))
    })?;
    Ok(if rest.is_empty() {
        home.to_path_buf()
    } else {
        home.join(rest)
    })
}

/// Makes `path` absolute against `base` (no filesystem access).
pub(crate) fn absolute(path: PathBuf, base: &Path) -> PathBuf {
    if path.is_absolute() {
        path
    } else {
        base.join(path)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn booleans() {
        for t in ["true", "TRUE", "1", "yes", "On", " y "] {
            assert!(parse_bool("V", t).unwrap(), "{t}");
        }
        for f in ["false", "0", "No", "off", "F"] {
            assert!(!parse_bool("V", f).unwrap(), "{f}");
        }
        assert_eq!(parse_bool("V", "maybe").unwrap_err().var, "V");
    }

    #[test]
    fn integers_and_bounds() {
        assert_eq!(at_least(1)("V", " 30 ").unwrap(), 30);
        assert!(at_least(1)("V", "0").unwrap_err().message.contains(">= 1"));
        assert!(at_least(1)("V", "-3").is_err());
        assert!(at_least(1)("V", "2.5").is_err());
        assert_eq!(parse_u32_range("V", "8", 1, 8).unwrap(), 8);
        let err = parse_u32_range("V", "9", 1, 8).unwrap_err();
        assert_eq!(err.message, "must be at most 8, got 9");
        assert!(parse_u32_range("V", "99999999999", 1, 8).is_err());
    }

    #[test]
    fn durations_and_timeouts() {
        assert_eq!(parse_seconds("V", "0", 60.0).unwrap(), 0.0);
        assert_eq!(parse_seconds("V", "0.2", 60.0).unwrap(), 0.2);
        assert_eq!(parse_seconds("V", "60", 60.0).unwrap(), 60.0);
        assert!(parse_seconds("V", "-1", 60.0).is_err());
        assert!(parse_seconds("V", "inf", 60.0).is_err());
        assert!(parse_seconds("V", "NaN", 60.0).is_err());
        let err = parse_seconds("V", "60.5", 60.0).unwrap_err();
        assert_eq!(err.var, "V");
        assert!(err.message.contains("at most 60 seconds"), "{err}");
        assert!(parse_seconds("V", "1e20", 60.0).is_err());
        assert_eq!(parse_timeout("V", "null", 60.0).unwrap(), None);
        assert_eq!(parse_timeout("V", "None", 60.0).unwrap(), None);
        assert_eq!(parse_timeout("V", "0", 60.0).unwrap(), None);
        assert_eq!(parse_timeout("V", "2.5", 60.0).unwrap(), Some(2.5));
        assert!(parse_timeout("V", "61", 60.0).is_err());
        assert_eq!(parse_positive_seconds("V", "0.01", 60.0).unwrap(), 0.01);
        let err = parse_positive_seconds("V", "0", 60.0).unwrap_err();
        assert!(err.message.contains("more than 0 seconds"), "{err}");
        assert!(parse_positive_seconds("V", "61", 60.0).is_err());
    }

    #[test]
    fn lists() {
        assert_eq!(
            parse_list("V", r#"["1", "alice", 42]"#).unwrap(),
            ["1", "alice", "42"]
        );
        assert_eq!(parse_list("V", " 1, alice ,,").unwrap(), ["1", "alice"]);
        assert_eq!(parse_list("V", "").unwrap(), Vec::<String>::new());
        assert_eq!(parse_list("V", "null").unwrap(), Vec::<String>::new());
        assert_eq!(parse_list("V", "[]").unwrap(), Vec::<String>::new());
        assert!(parse_list("V", "[1, 2").is_err());
        assert!(parse_list("V", "[true]").is_err());
    }

    #[test]
    fn urls() {
        assert_eq!(
            parse_url("V", "http://127.0.0.1:8080/v1/").unwrap(),
            "http://127.0.0.1:8080/v1"
        );
        assert_eq!(
            parse_url("V", "https://example.com").unwrap(),
            "https://example.com"
        );
        assert!(parse_url("V", "ftp://example.com").is_err());
        assert!(parse_url("V", "example.com").is_err());
        assert!(parse_url("V", "http://").is_err());
        let err = parse_url("V", "ftp://user:hunter2@proxy:1").unwrap_err();
        assert!(!err.message.contains("hunter2"), "{err}");
    }

    #[test]
    fn url_redaction() {
        assert_eq!(redact_url_text("http://u:p@h:1/x@y"), "http://***@h:1/x@y");
        assert_eq!(redact_url_text("http://h/x@y"), "http://h/x@y");
        assert_eq!(redact_url_text("not a url"), "not a url");
    }

    #[test]
    fn secrets() {
        assert_eq!(parse_secret("V", " abc ").unwrap().unwrap().expose(), "abc");
        assert_eq!(parse_secret("V", "null").unwrap(), None);
        let err = parse_secret("V", "ab cd-secret").unwrap_err();
        assert!(!err.to_string().contains("secret"), "{err}");
    }

    #[test]
    fn models() {
        assert!(parse_model("M", "openrouter:qwen/qwen3-coder-next", None).is_ok());
        assert!(parse_model("M", "ollama:llama3:8b", None).is_ok());
        assert!(parse_model("M", "nocolon", None).is_err());
        assert!(parse_model("M", ":x", None).is_err());
        assert!(parse_model("M", "openai:", None).is_err());
        let err = parse_model("M", "local:foo", None).unwrap_err();
        assert!(err.message.contains("BUB_API_BASE") && err.message.contains("openrouter"));
        assert!(parse_model("M", "local:foo", Some("http://127.0.0.1:1/v1")).is_ok());
    }

    #[test]
    fn tilde() {
        let home = Path::new("/h");
        assert_eq!(
            expand_tilde("V", "~", Some(home)).unwrap(),
            PathBuf::from("/h")
        );
        assert_eq!(
            expand_tilde("V", "~/x/y", Some(home)).unwrap(),
            PathBuf::from("/h/x/y")
        );
        assert_eq!(
            expand_tilde("V", "~bob/x", Some(home)).unwrap(),
            PathBuf::from("~bob/x")
        );
        assert_eq!(expand_tilde("V", "/a", None).unwrap(), PathBuf::from("/a"));
        assert_eq!(expand_tilde("V", "~/a", None).unwrap_err().var, "V");
    }
}
