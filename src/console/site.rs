//! The console's own addresses: which `Host` a request may name, and which origin a change may
//! come from.
//!
//! Browsers keep cookies per host, not per port: a page on `127.0.0.1:ANY` is the same *site*
//! as the console, so its forms carry the console's cookie, `SameSite=Strict` or not. And a name
//! an attacker controls may resolve to 127.0.0.1 (DNS rebinding), making the console the same
//! *origin* as the attacker's page. So:
//!
//! * Every console request names one of the console's addresses in `Host` (and in its target,
//!   when absolute): the listen address — `127.0.0.1:PORT` and `localhost:PORT` for an IPv4
//!   loopback address, `[::1]:PORT` and `localhost:PORT` for IPv6's, the loopback ones behind
//!   an unspecified address (`0.0.0.0`) — and `BUB_CONSOLE_PUBLIC_URL`'s host and port.
//!   Anything else is `421 Misdirected Request`, and nothing more.
//! * Every change (every method but `GET` and `HEAD`, the login included) comes from one of the
//!   console's origins: `Origin` is one; without it, `Sec-Fetch-Site` is `same-origin`; without
//!   that, the `Referer`'s origin is one. With none of the three it is refused (`403`).
//!   `Origin: null` says nothing, so it counts as none: the console's own pages send no
//!   referrer (`Referrer-Policy: no-referrer`), and browsers then send `null` from its forms —
//!   with `Sec-Fetch-Site: same-origin`, which a page of another origin (or a sandboxed one, or
//!   a redirect from elsewhere) never gets.
//!
//! Only the console's routes pass here: on the listener it shares with `BUB_HTTP_LISTEN`,
//! `/healthz`, `/metrics` and webhooks are not the console's business.

use std::net::{IpAddr, SocketAddr};

use axum::extract::{Request, State};
use axum::http::{HeaderMap, Method, StatusCode, header};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};

use super::Shared;
use crate::config::PublicUrl;

/// One address of the console, as browsers name it: a scheme, a host and a port, as the public
/// URL is.
type Address = PublicUrl;

/// The plain-HTTP address `host:port`.
fn http(host: &str, port: u16) -> Address {
    Address {
        https: false,
        host: host.to_owned(),
        port,
    }
}

/// The console's addresses.
#[derive(Debug, Clone)]
pub(super) struct Site {
    addresses: Vec<Address>,
}

/// Why a request was refused.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Refused {
    /// `Host` (or the target's authority) is not one of the console's addresses, or missing.
    Host,
    /// A change that did not come from one of the console's origins, or does not say where it
    /// came from.
    Origin,
}

impl Site {
    /// The addresses of a console listening on `listen` (as bound: port 0 already chosen) and
    /// reached at `public`, if given.
    pub(super) fn new(listen: SocketAddr, public: Option<&PublicUrl>) -> Site {
        let port = listen.port();
        let mut addresses = Vec::new();
        match listen.ip() {
            IpAddr::V4(ip) if ip.is_unspecified() => {
                addresses.push(http("127.0.0.1", port));
            }
            // `[::]` takes IPv4 too (unless the system says otherwise).
            IpAddr::V6(ip) if ip.is_unspecified() => {
                addresses.push(http("[::1]", port));
                addresses.push(http("127.0.0.1", port));
            }
            IpAddr::V4(ip) => addresses.push(http(&ip.to_string(), port)),
            IpAddr::V6(ip) => addresses.push(http(&format!("[{ip}]"), port)),
        }
        if listen.ip().is_loopback() || listen.ip().is_unspecified() {
            addresses.push(http("localhost", port));
        }
        addresses.extend(public.cloned());
        Site { addresses }
    }

    /// Whether a request for `target` (its URI) with `headers` names the console: one `Host`
    /// header naming one of its addresses, and the target's authority too when it has one.
    pub(super) fn is_for_us(&self, target: &axum::http::Uri, headers: &HeaderMap) -> bool {
        let mut hosts = headers.get_all(header::HOST).iter();
        let (Some(host), None) = (hosts.next(), hosts.next()) else {
            return false;
        };
        let named = |text: &str| {
            authority(text)
                .is_some_and(|(host, port)| self.addresses.iter().any(|a| a.is(&host, port)))
        };
        host.to_str().is_ok_and(named) && target.authority().is_none_or(|a| named(a.as_str()))
    }

    /// Whether `origin` (`scheme://host[:port]`, as browsers send it) is one of the console's.
    pub(super) fn is_origin(&self, origin: &str) -> bool {
        let (https, rest) = match origin.split_once("://") {
            Some(("https", rest)) => (true, rest),
            Some(("http", rest)) => (false, rest),
            _ => return false,
        };
        authority(rest).is_some_and(|(host, port)| {
            self.addresses
                .iter()
                .any(|a| a.https == https && a.is(&host, port))
        })
    }

    /// Whether a change with `headers` comes from the console's own pages: by `Origin` (unless
    /// `null`), else `Sec-Fetch-Site`, else the `Referer`'s origin; none of them is a refusal.
    pub(super) fn is_same_origin(&self, headers: &HeaderMap) -> bool {
        let one = |name: header::HeaderName| {
            let mut values = headers.get_all(name).iter();
            match (values.next(), values.next()) {
                (None, _) => None,
                // Two values, or one that is not text: a refusal.
                (Some(value), None) => Some(value.to_str().ok()),
                (Some(_), Some(_)) => Some(None),
            }
        };
        if let Some(origin) = one(header::ORIGIN).filter(|o| *o != Some("null")) {
            return origin.is_some_and(|o| self.is_origin(o));
        }
        if let Some(site) = one(header::HeaderName::from_static("sec-fetch-site")) {
            return site == Some("same-origin");
        }
        if let Some(referer) = one(header::REFERER) {
            let origin = referer
                .and_then(|r| reqwest::Url::parse(r).ok())
                .map(|url| url.origin().ascii_serialization());
            return origin.is_some_and(|o| self.is_origin(&o));
        }
        false
    }

    /// Why a request with `method`, `target` and `headers` is refused, if it is.
    pub(super) fn refuses(
        &self,
        method: &Method,
        target: &axum::http::Uri,
        headers: &HeaderMap,
    ) -> Option<Refused> {
        if !self.is_for_us(target, headers) {
            return Some(Refused::Host);
        }
        let safe = matches!(*method, Method::GET | Method::HEAD);
        (!safe && !self.is_same_origin(headers)).then_some(Refused::Origin)
    }
}

/// `host[:port]`: the host lowercased (an IPv6 address in brackets) and the port if given;
/// `None` when it is not an authority of a host alone (empty, a path, credentials, a bad port).
fn authority(text: &str) -> Option<(String, Option<u16>)> {
    let authority: axum::http::uri::Authority = text.parse().ok()?;
    if text.contains(['@', '%']) || authority.host().is_empty() {
        return None;
    }
    Some((authority.host().to_ascii_lowercase(), authority.port_u16()))
}

/// Refuses, before anything else is done, a console request for another host (`421`) and a
/// change from another origin (`403`).
pub(super) async fn guard(State(console): State<Shared>, request: Request, next: Next) -> Response {
    let refused = console
        .site
        .refuses(request.method(), request.uri(), request.headers());
    match refused {
        None => next.run(request).await,
        Some(Refused::Host) => {
            tracing::debug!(reason = "host", "console.refused");
            let text = "misdirected request: not an address of this Bub console (its listen \
                        address, or BUB_CONSOLE_PUBLIC_URL behind a proxy)\n";
            (StatusCode::MISDIRECTED_REQUEST, text).into_response()
        }
        Some(Refused::Origin) => {
            tracing::debug!(reason = "origin", "console.refused");
            let text = "forbidden: this change did not come from the console's own page \
                        (Origin); nothing was changed\n";
            (StatusCode::FORBIDDEN, text).into_response()
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use axum::http::{HeaderValue, Uri};

    fn loopback() -> Site {
        Site::new(([127, 0, 0, 1], 8787).into(), None)
    }

    fn public() -> PublicUrl {
        PublicUrl {
            https: true,
            host: "bub.example.com".into(),
            port: 443,
        }
    }

    fn headers(pairs: &[(&'static str, &str)]) -> HeaderMap {
        let mut map = HeaderMap::new();
        for (name, value) in pairs {
            map.append(*name, HeaderValue::from_str(value).unwrap());
        }
        map
    }

    fn host_ok(site: &Site, host: &str) -> bool {
        site.is_for_us(&Uri::from_static("/"), &headers(&[("host", host)]))
    }

    #[test]
    fn a_loopback_console_answers_to_its_address_and_localhost_on_its_port() {
        let site = loopback();
        for ours in ["127.0.0.1:8787", "localhost:8787", "LOCALHOST:8787"] {
            assert!(host_ok(&site, ours), "{ours}");
        }
        for theirs in [
            "evil.example:8787",
            "evil.example",
            "127.0.0.1",
            "127.0.0.1:8788",
            "localhost:80",
            "[::1]:8787",
            "127.0.0.2:8787",
            "localhost.:8787",
            "user@127.0.0.1:8787",
            "127.0.0.1:8787/x",
            "127.0.0.1:",
            "127.0.0.1:99999",
            "",
        ] {
            assert!(!host_ok(&site, theirs), "{theirs}");
        }
        let none = site.is_for_us(&Uri::from_static("/"), &HeaderMap::new());
        assert!(!none, "no Host");
        let two = headers(&[("host", "127.0.0.1:8787"), ("host", "evil.example")]);
        assert!(!site.is_for_us(&Uri::from_static("/"), &two), "two Hosts");
        // An absolute target names the host too.
        let ours = headers(&[("host", "127.0.0.1:8787")]);
        let absolute = Uri::from_static("http://evil.example:8787/");
        assert!(!site.is_for_us(&absolute, &ours));
        let absolute = Uri::from_static("http://localhost:8787/");
        assert!(site.is_for_us(&absolute, &ours));
    }

    #[test]
    fn ipv6_unspecified_and_public_addresses() {
        let v6 = Site::new("[::1]:8787".parse().unwrap(), None);
        assert!(host_ok(&v6, "[::1]:8787") && host_ok(&v6, "localhost:8787"));
        assert!(!host_ok(&v6, "127.0.0.1:8787") && !host_ok(&v6, "[::2]:8787"));
        let any = Site::new("0.0.0.0:8787".parse().unwrap(), Some(&public()));
        for ours in [
            "127.0.0.1:8787",
            "localhost:8787",
            "bub.example.com",
            "bub.example.com:443",
            "BUB.example.com",
        ] {
            assert!(host_ok(&any, ours), "{ours}");
        }
        for theirs in [
            "0.0.0.0:8787",
            "bub.example.com:8787",
            "bub.example.com:80",
            "10.0.0.5:8787",
        ] {
            assert!(!host_ok(&any, theirs), "{theirs}");
        }
        let lan = Site::new("10.0.0.5:8787".parse().unwrap(), Some(&public()));
        assert!(host_ok(&lan, "10.0.0.5:8787") && !host_ok(&lan, "localhost:8787"));
    }

    #[test]
    fn origins_are_the_consoles_addresses_with_their_scheme() {
        let site = Site::new(([127, 0, 0, 1], 8787).into(), Some(&public()));
        for ours in [
            "http://127.0.0.1:8787",
            "http://localhost:8787",
            "https://bub.example.com",
            "https://bub.example.com:443",
        ] {
            assert!(site.is_origin(ours), "{ours}");
        }
        for theirs in [
            "http://127.0.0.1:8788",
            "http://localhost:3000",
            "https://127.0.0.1:8787",
            "http://bub.example.com",
            "https://bub.example.com:8443",
            "https://evil.example",
            "null",
            "127.0.0.1:8787",
            "http://127.0.0.1:8787/",
            "",
        ] {
            assert!(!site.is_origin(theirs), "{theirs}");
        }
    }

    #[test]
    fn a_change_says_it_came_from_the_console_or_is_refused() {
        let site = loopback();
        let same = |pairs: &[(&'static str, &str)]| site.is_same_origin(&headers(pairs));
        assert!(same(&[("origin", "http://127.0.0.1:8787")]));
        assert!(same(&[("sec-fetch-site", "same-origin")]));
        assert!(same(&[("referer", "http://localhost:8787/access?done=1")]));
        // Origin decides when it is there, whatever else is said.
        assert!(!same(&[
            ("origin", "http://127.0.0.1:3000"),
            ("sec-fetch-site", "same-origin"),
            ("referer", "http://127.0.0.1:8787/"),
        ]));
        // `null` says nothing (the console's own form under its no-referrer policy).
        assert!(same(&[
            ("origin", "null"),
            ("sec-fetch-site", "same-origin")
        ]));
        assert!(!same(&[
            ("origin", "null"),
            ("sec-fetch-site", "same-site")
        ]));
        assert!(!same(&[
            ("origin", "null"),
            ("sec-fetch-site", "cross-site")
        ]));
        assert!(!same(&[("origin", "null")]));
        assert!(!same(&[
            ("origin", "http://127.0.0.1:8787"),
            ("origin", "http://127.0.0.1:3000"),
        ]));
        // Then Sec-Fetch-Site, then the Referer.
        assert!(!same(&[("sec-fetch-site", "same-site")]));
        assert!(!same(&[("sec-fetch-site", "cross-site")]));
        assert!(!same(&[("sec-fetch-site", "none")]));
        assert!(!same(&[
            ("sec-fetch-site", "same-site"),
            ("referer", "http://127.0.0.1:8787/"),
        ]));
        assert!(!same(&[("referer", "http://127.0.0.1:3000/page")]));
        assert!(!same(&[("referer", "not a url")]));
        // Nothing said: refused.
        assert!(!same(&[]));
        assert!(!same(&[("user-agent", "curl/8")]));
    }

    #[test]
    fn only_changes_need_an_origin() {
        let site = loopback();
        let target = Uri::from_static("/jobs");
        let plain = headers(&[("host", "127.0.0.1:8787")]);
        assert_eq!(site.refuses(&Method::GET, &target, &plain), None);
        assert_eq!(site.refuses(&Method::HEAD, &target, &plain), None);
        for change in [Method::POST, Method::PUT, Method::DELETE, Method::PATCH] {
            assert_eq!(
                site.refuses(&change, &target, &plain),
                Some(Refused::Origin)
            );
        }
        let rebound = headers(&[
            ("host", "evil.example:8787"),
            ("origin", "http://evil.example:8787"),
        ]);
        assert_eq!(
            site.refuses(&Method::GET, &target, &rebound),
            Some(Refused::Host)
        );
        assert_eq!(
            site.refuses(&Method::POST, &target, &rebound),
            Some(Refused::Host)
        );
    }
}
