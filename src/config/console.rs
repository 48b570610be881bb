//! `BUB_CONSOLE*`: whether `bub message` serves the web console, where it listens, and the
//! address browsers reach it at — read and checked once, before anything serves.
//!
//! Invariants: an address that is not loopback needs `BUB_CONSOLE_ALLOW_REMOTE=true`, and that
//! needs an `https` `BUB_CONSOLE_PUBLIC_URL` (behind TLS the console's cookie is `Secure`, and
//! that URL is the only name besides the listen address it answers to); a public URL is a
//! scheme, a host and a port, nothing more.

use super::ConfigError;
use super::load::listen_address;
use super::parse::{is_null, parse_bool, redact_url_text};
use super::sources::Layers;

/// `BUB_CONSOLE`, `BUB_CONSOLE_LISTEN`, `BUB_CONSOLE_ALLOW_REMOTE`, `BUB_CONSOLE_PUBLIC_URL`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ConsoleSettings {
    /// `bub message` serves the console too.
    pub enabled: bool,
    /// Where it listens (loopback unless [`allow_remote`](Self::allow_remote)).
    pub listen: std::net::SocketAddr,
    /// Reachable beyond loopback (through a TLS proxy); then [`public_url`](Self::public_url)
    /// is set, and is `https`.
    pub allow_remote: bool,
    /// Where browsers reach the console when it is not at the listen address itself.
    pub public_url: Option<PublicUrl>,
}

impl Default for ConsoleSettings {
    fn default() -> Self {
        Self {
            enabled: false,
            listen: ([127, 0, 0, 1], 8787).into(),
            allow_remote: false,
            public_url: None,
        }
    }
}

/// `BUB_CONSOLE_PUBLIC_URL`: the scheme, host and port browsers use to reach the console (a
/// TLS proxy's, or an SSH tunnel's local port) — no path, query or credentials.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PublicUrl {
    pub https: bool,
    /// Lowercase; an IPv6 address in brackets (`[::1]`).
    pub host: String,
    /// The port, the scheme's own (443, 80) when the URL names none.
    pub port: u16,
}

impl PublicUrl {
    /// The port browsers leave out for this scheme.
    pub(crate) fn default_port(&self) -> u16 {
        if self.https { 443 } else { 80 }
    }

    /// Whether `host` (lowercase; IPv6 in brackets) and `port` (none: the scheme's own) name
    /// this address.
    pub fn is(&self, host: &str, port: Option<u16>) -> bool {
        self.host == host && port.unwrap_or(self.default_port()) == self.port
    }

    /// The origin browsers send from the console's pages: `https://bub.example.com`, the port
    /// only when it is not the scheme's own.
    pub fn origin(&self) -> String {
        let scheme = if self.https { "https" } else { "http" };
        match self.port == self.default_port() {
            true => format!("{scheme}://{}", self.host),
            false => format!("{scheme}://{}:{}", self.host, self.port),
        }
    }
}

/// Reads the console's variables of `l` into `c`, and checks them together.
pub(super) fn load(l: &Layers, c: &mut ConsoleSettings) -> Result<(), ConfigError> {
    l.set("BUB_CONSOLE", &mut c.enabled, parse_bool)?;
    if c.enabled && !cfg!(feature = "console") {
        return Err(ConfigError::new(
            "BUB_CONSOLE",
            "this build of Bub has no console (built without the `console` feature; install \
             with `--features console`)",
        ));
    }
    l.set("BUB_CONSOLE_LISTEN", &mut c.listen, listen_address)?;
    l.set("BUB_CONSOLE_ALLOW_REMOTE", &mut c.allow_remote, parse_bool)?;
    l.set(
        "BUB_CONSOLE_PUBLIC_URL",
        &mut c.public_url,
        parse_public_url,
    )?;
    if !c.listen.ip().is_loopback() && !c.allow_remote {
        return Err(ConfigError::new(
            "BUB_CONSOLE_LISTEN",
            format!(
                "{} is not a loopback address: the console would be reachable from other \
                 machines; set BUB_CONSOLE_ALLOW_REMOTE=true to allow it (and put TLS in front)",
                c.listen
            ),
        ));
    }
    if c.allow_remote && !c.public_url.as_ref().is_some_and(|u| u.https) {
        let problem = match &c.public_url {
            None => "is required with BUB_CONSOLE_ALLOW_REMOTE=true",
            Some(_) => "must be https with BUB_CONSOLE_ALLOW_REMOTE=true",
        };
        return Err(ConfigError::new(
            "BUB_CONSOLE_PUBLIC_URL",
            format!(
                "{problem}: the https:// address browsers reach the console at through its TLS \
                 proxy (e.g. https://bub.example.com); the console answers only to that name \
                 and its listen address"
            ),
        ));
    }
    Ok(())
}

/// `BUB_CONSOLE_PUBLIC_URL`: an `http(s)` URL of a host (and port) alone, no credentials, path,
/// query or fragment; blank or `null` is none.
fn parse_public_url(var: &str, raw: &str) -> Result<Option<PublicUrl>, ConfigError> {
    let raw = raw.trim();
    if raw.is_empty() || is_null(raw) {
        return Ok(None);
    }
    let expected = "expected scheme://host[:port], e.g. https://bub.example.com";
    let shown = redact_url_text(raw);
    let bad = |why: &str| ConfigError::new(var, format!("{shown:?} {why} ({expected})"));
    let url = reqwest::Url::parse(raw).map_err(|e| bad(&format!("is not a URL: {e}")))?;
    let https = match url.scheme() {
        "https" => true,
        "http" => false,
        _ => return Err(bad("must use http or https")),
    };
    let host = url.host_str().filter(|h| !h.is_empty());
    let (Some(host), Some(port)) = (host, url.port_or_known_default()) else {
        return Err(bad("has no host"));
    };
    if !url.username().is_empty() || url.password().is_some() {
        return Err(bad("must not hold credentials"));
    }
    if url.path() != "/" || url.query().is_some() || url.fragment().is_some() {
        return Err(bad("must be only a scheme, a host and a port"));
    }
    Ok(Some(PublicUrl {
        https,
        host: host.to_ascii_lowercase(),
        port,
    }))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn loaded(vars: &[(&str, &str)]) -> Result<ConsoleSettings, ConfigError> {
        let env = vars
            .iter()
            .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
            .collect();
        let mut console = ConsoleSettings::default();
        load(&super::super::sources::from_env(&env), &mut console).map(|()| console)
    }

    #[test]
    fn public_urls() {
        let url = |raw: &str| parse_public_url("V", raw);
        let public = url("https://Bub.Example.com/").unwrap().unwrap();
        assert_eq!(
            (public.https, public.host.as_str(), public.port),
            (true, "bub.example.com", 443)
        );
        assert_eq!(public.origin(), "https://bub.example.com");
        let tunnel = url("http://127.0.0.1:9000").unwrap().unwrap();
        assert_eq!(tunnel.origin(), "http://127.0.0.1:9000");
        let v6 = url("https://[::1]:8443").unwrap().unwrap();
        assert_eq!(
            (v6.host.as_str(), v6.origin().as_str()),
            ("[::1]", "https://[::1]:8443")
        );
        assert_eq!(url("").unwrap(), None);
        assert_eq!(url("null").unwrap(), None);
        for bad in [
            "bub.example.com",
            "ftp://bub.example.com",
            "https://bub.example.com/console",
            "https://bub.example.com/?a=1",
            "https://user:hunter2@bub.example.com",
        ] {
            let err = url(bad).unwrap_err();
            assert_eq!(err.var, "V");
            let err = err.to_string();
            assert!(!err.contains("hunter2"), "{err}");
        }
    }

    #[test]
    fn a_console_beyond_loopback_needs_its_https_public_url() {
        assert_eq!(loaded(&[]).unwrap(), ConsoleSettings::default());
        // An SSH tunnel's own port: http is fine on loopback.
        let tunnel = loaded(&[("BUB_CONSOLE_PUBLIC_URL", "http://127.0.0.1:9000")]).unwrap();
        assert_eq!(tunnel.public_url.unwrap().origin(), "http://127.0.0.1:9000");
        let err = loaded(&[("BUB_CONSOLE_LISTEN", "0.0.0.0:8787")]).unwrap_err();
        assert_eq!(err.var, "BUB_CONSOLE_LISTEN");
        let remote = [
            ("BUB_CONSOLE_LISTEN", "0.0.0.0:8787"),
            ("BUB_CONSOLE_ALLOW_REMOTE", "true"),
        ];
        let err = loaded(&remote).unwrap_err();
        assert_eq!(err.var, "BUB_CONSOLE_PUBLIC_URL");
        assert!(err.to_string().contains("required"), "{err}");
        let http = [
            remote[0],
            remote[1],
            ("BUB_CONSOLE_PUBLIC_URL", "http://bub.example.com"),
        ];
        let err = loaded(&http).unwrap_err();
        assert_eq!(err.var, "BUB_CONSOLE_PUBLIC_URL");
        assert!(err.to_string().contains("https"), "{err}");
        let https = [
            remote[0],
            remote[1],
            ("BUB_CONSOLE_PUBLIC_URL", "https://bub.example.com"),
        ];
        let console = loaded(&https).unwrap();
        assert!(console.allow_remote);
        assert_eq!(
            console.public_url.unwrap().origin(),
            "https://bub.example.com"
        );
    }
}
