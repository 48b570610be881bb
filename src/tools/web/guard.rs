//! The destination guard of `web.fetch` (SSRF): a chat user must not make the bot read what only
//! its host can reach — loopback services, private networks, the cloud metadata service at
//! 169.254.169.254 — so those destinations are refused unless the operator sets
//! `BUB_WEB_ALLOW_PRIVATE=true`. [`classify`] says which addresses are forbidden.
//!
//! Addresses are checked after DNS resolution, and on every redirect hop:
//!
//! * IP-literal hosts (`http://10.0.0.1/`, also spelt `http://0x0a.1/` or
//!   `http://[::ffff:10.0.0.1]/`) never reach a resolver, so [`Guard::check_url`] checks them:
//!   fetch.rs for the first URL, [`redirect_policy`] for each redirect.
//! * Host names are resolved by [`GuardedResolver`], the guarded client's DNS resolver, which
//!   refuses a name when any of its addresses is forbidden: the connection can only go to
//!   addresses that were checked, with no window between check and connect.
//! * Through a proxy (reqwest's rules: `HTTPS_PROXY`, `NO_PROXY`, ...), the proxy resolves
//!   names, not us. So fetch.rs resolves each hop's host here first ([`check_lookup`]) and
//!   follows redirects itself (a [`redirect::Policy`] cannot wait for a lookup). Residual risk:
//!   the proxy's own lookup may answer differently than ours did (a DNS-rebinding name with a
//!   short TTL, or a proxy that sees internal DNS zones this host does not), and the proxy
//!   reaches whatever its network reaches. The same gap applies to a redirect, on that path, to
//!   a host `NO_PROXY` exempts: it is connected to directly after the same lookup check (the
//!   proxy's client cannot use [`GuardedResolver`], which would refuse a proxy on a private
//!   address). A name that does not resolve here is refused, since it cannot be checked.
//!
//! `web.search` is not guarded: it talks to the URLs the operator configured, often on localhost.

use std::fmt;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr};

use reqwest::Url;
use reqwest::dns::{Addrs, Name, Resolve, Resolving};
use reqwest::redirect::{self, Policy};

use super::{MAX_REDIRECTS, shown};

/// How a refusal tells the operator to lift the guard.
const HINT: &str = "set BUB_WEB_ALLOW_PRIVATE=true to allow private destinations";

/// Why an address is forbidden (displayed as the refusal names it).
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub(super) enum Class {
    #[error("a loopback address")]
    Loopback,
    #[error("a private address")]
    Private,
    #[error("a carrier-grade NAT address")]
    CarrierNat,
    #[error("a link-local address")]
    LinkLocal,
    #[error("an unspecified address")]
    Unspecified,
    #[error("a broadcast address")]
    Broadcast,
    #[error("a multicast address")]
    Multicast,
    #[error("a reserved address")]
    Reserved,
}

/// A forbidden address: its class, and the IPv4 address an IPv6 form stands for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) struct Forbidden {
    pub class: Class,
    pub embedded: Option<Ipv4Addr>,
}

impl fmt::Display for Forbidden {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.embedded {
            Some(v4) => write!(f, "an IPv6 form of {v4}, {}", self.class),
            None => write!(f, "{}", self.class),
        }
    }
}

/// Why `ip` may not be fetched, or `None` when it is a public address.
pub(super) fn classify(ip: IpAddr) -> Option<Forbidden> {
    match ip {
        IpAddr::V4(v4) => classify_v4(v4).map(|class| Forbidden {
            class,
            embedded: None,
        }),
        IpAddr::V6(v6) => classify_v6(v6),
    }
}

fn classify_v4(ip: Ipv4Addr) -> Option<Class> {
    let [a, b, _, _] = ip.octets();
    let class = if ip.is_unspecified() {
        Class::Unspecified
    } else if ip.is_loopback() {
        Class::Loopback
    } else if ip.is_private() {
        Class::Private
    } else if a == 100 && (b & 0xc0) == 64 {
        // 100.64.0.0/10, shared address space (RFC 6598).
        Class::CarrierNat
    } else if ip.is_link_local() {
        Class::LinkLocal
    } else if ip.is_broadcast() {
        Class::Broadcast
    } else if ip.is_multicast() {
        Class::Multicast
    } else if a == 0 || a >= 240 {
        // 0.0.0.0/8 "this network" (Linux connects 0.0.0.0 to the host itself) and 240.0.0.0/4.
        Class::Reserved
    } else {
        return None;
    };
    Some(class)
}

fn classify_v6(ip: Ipv6Addr) -> Option<Forbidden> {
    let plain = |class| {
        Some(Forbidden {
            class,
            embedded: None,
        })
    };
    if ip.is_unspecified() {
        return plain(Class::Unspecified);
    }
    if ip.is_loopback() {
        return plain(Class::Loopback);
    }
    if let Some(v4) = embedded_v4(ip) {
        return classify_v4(v4).map(|class| Forbidden {
            class,
            embedded: Some(v4),
        });
    }
    let first = ip.segments()[0];
    if first & 0xfe00 == 0xfc00 {
        // fc00::/7, unique local addresses.
        plain(Class::Private)
    } else if first & 0xffc0 == 0xfe80 {
        // fe80::/10.
        plain(Class::LinkLocal)
    } else if first & 0xffc0 == 0xfec0 {
        // fec0::/10, the deprecated site-local addresses.
        plain(Class::Private)
    } else if ip.is_multicast() {
        plain(Class::Multicast)
    } else {
        None
    }
}

/// The IPv4 address in an IPv6 form that reaches it: IPv4-mapped `::ffff:a.b.c.d`,
/// IPv4-compatible `::a.b.c.d` (deprecated, still routed by some stacks) and NAT64
/// `64:ff9b::a.b.c.d`.
fn embedded_v4(ip: Ipv6Addr) -> Option<Ipv4Addr> {
    let [a, b, c, d, e, f, _, _] = ip.segments();
    let prefix_ok = matches!(
        (a, b, c, d, e, f),
        (0, 0, 0, 0, 0, 0xffff) | (0, 0, 0, 0, 0, 0) | (0x64, 0xff9b, 0, 0, 0, 0)
    );
    prefix_ok.then(|| {
        let [.., w, x, y, z] = ip.octets();
        Ipv4Addr::new(w, x, y, z)
    })
}

/// Which destinations `web.fetch` may reach while `BUB_WEB_ALLOW_PRIVATE` is off: public
/// addresses only ([`Guard::strict`]). Tests add one exception ([`Guard::for_tests_allowing`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Guard {
    exception: Option<SocketAddr>,
}

impl Guard {
    /// Public addresses only: what `web.fetch` uses while `BUB_WEB_ALLOW_PRIVATE` is off.
    pub(super) const fn strict() -> Self {
        Self { exception: None }
    }

    /// For tests only: the strict guard, except that an IP-literal URL naming exactly `addr` —
    /// this address *and* port, e.g. a test server on `127.0.0.1:PORT` — passes, so a test can
    /// serve the first hop of a redirect whose later hops must be refused. Nothing else passes:
    /// not another port, not a host name resolving to `addr` (the resolver never sees ports).
    /// No setting reaches this constructor: `web.fetch` builds [`Guard::strict`] or no guard
    /// from `BUB_WEB_ALLOW_PRIVATE`.
    pub fn for_tests_allowing(addr: SocketAddr) -> Self {
        Self {
            exception: Some(addr),
        }
    }

    /// Checks a URL whose host is an IP literal (host names pass: they are checked where they
    /// are resolved).
    pub(super) fn check_url(&self, url: &Url) -> Result<(), Refused> {
        let Some(ip) = ip_host(url) else {
            return Ok(());
        };
        if let (Some(allowed), Some(port)) = (self.exception, url.port_or_known_default())
            && allowed == SocketAddr::new(ip, port)
        {
            return Ok(());
        }
        match classify(ip) {
            Some(why) => Err(Refused::new(Reason::Forbidden {
                name: None,
                ip,
                why,
            })),
            None => Ok(()),
        }
    }
}

/// The host of `url` when it is an IP literal. The URL parser has already normalised every
/// IPv4 spelling (`0x7f.1`, `2130706433`, `127.1`) to dotted decimal and put IPv6 in brackets.
fn ip_host(url: &Url) -> Option<IpAddr> {
    let host = url.host_str()?;
    let host = host
        .strip_prefix('[')
        .and_then(|h| h.strip_suffix(']'))
        .unwrap_or(host);
    host.parse().ok()
}

/// A destination `web.fetch` will not reach; its message is the tool's error.
#[derive(Debug, Clone)]
pub(super) struct Refused {
    reason: Reason,
    /// The redirect that led there, if any.
    redirect: Option<Via>,
}

#[derive(Debug, Clone)]
enum Via {
    /// A redirect to this URL (as shown to the user).
    Url(String),
    /// Some redirect: the resolver knows the name it was asked for, not the URL.
    Unknown,
}

#[derive(Debug, Clone)]
enum Reason {
    /// `ip` (the address of host `name`, when the URL named a host) is forbidden.
    Forbidden {
        name: Option<String>,
        ip: IpAddr,
        why: Forbidden,
    },
    /// `name` did not resolve here, so it cannot be checked before a proxy resolves it.
    Unresolved { name: String, error: String },
}

impl Refused {
    fn new(reason: Reason) -> Self {
        Self {
            reason,
            redirect: None,
        }
    }

    /// The same refusal, reached by a redirect to `to`.
    pub(super) fn after_redirect(mut self, to: String) -> Self {
        self.redirect = Some(Via::Url(to));
        self
    }

    /// The same refusal, reached by a redirect to an unknown URL.
    pub(super) fn after_some_redirect(mut self) -> Self {
        self.redirect = Some(Via::Unknown);
        self
    }

    /// The host name that was resolved, if any.
    pub(super) fn name(&self) -> Option<&str> {
        match &self.reason {
            Reason::Forbidden { name, .. } => name.as_deref(),
            Reason::Unresolved { name, .. } => Some(name),
        }
    }
}

impl fmt::Display for Refused {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("refused: ")?;
        match &self.redirect {
            Some(Via::Url(to)) => write!(f, "redirect to {to}: ")?,
            Some(Via::Unknown) => f.write_str("after a redirect, ")?,
            None => {}
        }
        match &self.reason {
            Reason::Forbidden {
                name: None,
                ip,
                why,
            } => write!(f, "{ip} is {why} ({HINT})"),
            Reason::Forbidden {
                name: Some(name),
                ip,
                why,
            } => write!(f, "{name} resolves to {ip}, {why} ({HINT})"),
            Reason::Unresolved { name, error } => write!(
                f,
                "{name} does not resolve here ({error}), so its address cannot be checked \
                 before the proxy fetches it; {HINT}"
            ),
        }
    }
}

impl std::error::Error for Refused {}

/// The refusal inside a request error (from [`GuardedResolver`] or [`redirect_policy`]).
pub(super) fn refusal(e: &reqwest::Error) -> Option<&Refused> {
    let mut source = std::error::Error::source(e);
    while let Some(err) = source {
        if let Some(refused) = err.downcast_ref::<Refused>() {
            return Some(refused);
        }
        source = err.source();
    }
    None
}

/// The first forbidden address `name` resolved to.
fn first_forbidden(name: &str, addrs: &[SocketAddr]) -> Option<Refused> {
    addrs.iter().find_map(|addr| {
        let ip = addr.ip();
        classify(ip).map(|why| {
            Refused::new(Reason::Forbidden {
                name: Some(name.to_owned()),
                ip,
                why,
            })
        })
    })
}

/// The guarded client's DNS resolver: the system's (getaddrinfo, like reqwest's default), but a
/// name with any forbidden address is refused — a name answering both a public and a private
/// address is not a page worth the risk.
#[derive(Debug, Default)]
pub(super) struct GuardedResolver;

impl Resolve for GuardedResolver {
    fn resolve(&self, name: Name) -> Resolving {
        let name = name.as_str().to_owned();
        Box::pin(async move {
            let addrs: Vec<SocketAddr> =
                tokio::net::lookup_host((name.as_str(), 0)).await?.collect();
            if let Some(refused) = first_forbidden(&name, &addrs) {
                return Err(refused.into());
            }
            Ok(Box::new(addrs.into_iter()) as Addrs)
        })
    }
}

/// Resolves the host of `url` here and refuses it when any address is forbidden: the check
/// before a proxy, which does its own lookup (see the module doc for what remains).
pub(super) async fn check_lookup(url: &Url) -> Result<(), Refused> {
    let Some(name) = url.host_str().filter(|_| ip_host(url).is_none()) else {
        return Ok(());
    };
    let port = url.port_or_known_default().unwrap_or(0);
    let addrs: Vec<SocketAddr> = match tokio::net::lookup_host((name, port)).await {
        Ok(addrs) => addrs.collect(),
        Err(e) => {
            return Err(Refused::new(Reason::Unresolved {
                name: name.to_owned(),
                error: e.to_string(),
            }));
        }
    };
    match first_forbidden(name, &addrs) {
        Some(refused) => Err(refused),
        None => Ok(()),
    }
}

/// "too many redirects", past [`MAX_REDIRECTS`] (reqwest's own error type is private).
#[derive(Debug)]
struct TooManyRedirects;

impl fmt::Display for TooManyRedirects {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("too many redirects")
    }
}

impl std::error::Error for TooManyRedirects {}

/// The guarded client's redirects: at most [`MAX_REDIRECTS`], each hop's IP-literal host
/// checked by `guard` (host names are checked by [`GuardedResolver`] when connecting).
pub(super) fn redirect_policy(guard: Guard) -> Policy {
    Policy::custom(move |attempt: redirect::Attempt<'_>| {
        // `previous` starts with the first URL, which is not a redirect (as reqwest's limit).
        if attempt.previous().len() > MAX_REDIRECTS {
            return attempt.error(TooManyRedirects);
        }
        match guard.check_url(attempt.url()) {
            Ok(()) => attempt.follow(),
            Err(refused) => {
                let to = shown(attempt.url());
                attempt.error(refused.after_redirect(to))
            }
        }
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn class_of(ip: &str) -> Option<Class> {
        classify(ip.parse().unwrap()).map(|f| f.class)
    }

    #[test]
    fn address_classification() {
        use Class::*;
        let table: &[(&str, Option<Class>)] = &[
            // Public.
            ("93.184.215.14", None),
            ("8.8.8.8", None),
            ("1.1.1.1", None),
            ("100.63.255.255", None),
            ("100.128.0.1", None),
            ("172.15.255.255", None),
            ("172.32.0.1", None),
            ("169.253.255.255", None),
            ("223.255.255.255", None),
            ("2606:4700:4700::1111", None),
            ("2001:db8::1", None),
            ("::ffff:8.8.8.8", None),
            ("64:ff9b::808:808", None),
            // Loopback.
            ("127.0.0.1", Some(Loopback)),
            ("127.255.255.254", Some(Loopback)),
            ("::1", Some(Loopback)),
            ("::ffff:127.0.0.1", Some(Loopback)),
            ("::127.0.0.1", Some(Loopback)),
            ("64:ff9b::7f00:1", Some(Loopback)),
            // Private.
            ("10.0.0.1", Some(Private)),
            ("10.255.255.255", Some(Private)),
            ("172.16.0.1", Some(Private)),
            ("172.31.255.255", Some(Private)),
            ("192.168.1.1", Some(Private)),
            ("fc00::1", Some(Private)),
            ("fd12:3456::1", Some(Private)),
            ("fec0::1", Some(Private)),
            ("::ffff:10.1.2.3", Some(Private)),
            ("::ffff:192.168.0.1", Some(Private)),
            // Carrier-grade NAT.
            ("100.64.0.1", Some(CarrierNat)),
            ("100.127.255.255", Some(CarrierNat)),
            // Link-local, cloud metadata included.
            ("169.254.169.254", Some(LinkLocal)),
            ("169.254.0.1", Some(LinkLocal)),
            ("fe80::1", Some(LinkLocal)),
            ("febf::1", Some(LinkLocal)),
            ("::ffff:169.254.169.254", Some(LinkLocal)),
            // Unspecified, broadcast, multicast, reserved.
            ("0.0.0.0", Some(Unspecified)),
            ("::", Some(Unspecified)),
            ("::ffff:0.0.0.0", Some(Unspecified)),
            ("255.255.255.255", Some(Broadcast)),
            ("224.0.0.1", Some(Multicast)),
            ("239.255.255.250", Some(Multicast)),
            ("ff02::1", Some(Multicast)),
            ("0.1.2.3", Some(Reserved)),
            ("240.0.0.1", Some(Reserved)),
        ];
        for (ip, expected) in table {
            assert_eq!(class_of(ip), *expected, "{ip}");
        }
    }

    #[test]
    fn ipv6_forms_name_their_ipv4_address() {
        let why = classify("::ffff:127.0.0.1".parse().unwrap()).unwrap();
        assert_eq!(
            why.to_string(),
            "an IPv6 form of 127.0.0.1, a loopback address"
        );
        let why = classify("::1".parse().unwrap()).unwrap();
        assert_eq!(why.to_string(), "a loopback address");
    }

    #[test]
    fn ip_literal_urls_are_checked_in_every_spelling() {
        let guard = Guard::strict();
        let refused = |url: &str| guard.check_url(&Url::parse(url).unwrap()).err();
        for url in [
            "http://127.0.0.1/",
            "http://127.1/",
            "http://0x7f.1/",
            "http://2130706433/",
            "http://0177.0.0.1/",
            "http://[::1]:8080/",
            "http://[::ffff:127.0.0.1]/",
            "http://[::ffff:7f00:1]/",
            "http://0.0.0.0/",
            "http://169.254.169.254/latest/meta-data",
            "https://10.0.0.1/",
        ] {
            assert!(refused(url).is_some(), "{url} passed");
        }
        assert_eq!(
            refused("http://169.254.169.254/latest/meta-data")
                .unwrap()
                .to_string(),
            "refused: 169.254.169.254 is a link-local address (set BUB_WEB_ALLOW_PRIVATE=true \
             to allow private destinations)"
        );
        // Host names are checked where they are resolved, not here.
        assert!(refused("http://localhost/").is_none());
        assert!(refused("https://93.184.215.14/").is_none());
    }

    #[test]
    fn the_test_exception_is_one_exact_socket_address() {
        let guard = Guard::for_tests_allowing("127.0.0.1:4321".parse().unwrap());
        let passes = |url: &str| guard.check_url(&Url::parse(url).unwrap()).is_ok();
        assert!(passes("http://127.0.0.1:4321/x"));
        assert!(!passes("http://127.0.0.1:4322/x"));
        assert!(!passes("http://127.0.0.1/x"));
        assert!(!passes("http://127.0.0.2:4321/x"));
        assert!(!passes("http://[::ffff:127.0.0.1]:4321/x"));
        assert!(!passes("http://[::1]:4321/x"));
    }

    #[tokio::test]
    async fn names_are_checked_after_resolution() {
        let err = check_lookup(&Url::parse("http://localhost:8080/").unwrap())
            .await
            .unwrap_err();
        let msg = err.to_string();
        assert!(msg.starts_with("refused: localhost resolves to "), "{msg}");
        assert!(msg.contains("a loopback address"), "{msg}");
        assert_eq!(err.name(), Some("localhost"));

        // A name that does not resolve cannot be checked: refused (`.invalid` never resolves;
        // bounded, in case the system's DNS server is unreachable).
        let unknown = Url::parse("http://no-such-host.invalid/").unwrap();
        let err = tokio::time::timeout(std::time::Duration::from_secs(30), check_lookup(&unknown))
            .await
            .expect("the lookup finished")
            .unwrap_err();
        assert!(
            err.to_string()
                .starts_with("refused: no-such-host.invalid does not resolve here"),
            "{err}"
        );

        // IP literals are not looked up (check_url checks them).
        check_lookup(&Url::parse("http://93.184.215.14/").unwrap())
            .await
            .unwrap();
    }

    #[tokio::test]
    async fn the_resolver_refuses_forbidden_names() {
        let err = match GuardedResolver.resolve("localhost".parse().unwrap()).await {
            Ok(_) => panic!("localhost resolved"),
            Err(e) => e,
        };
        let refused = err.downcast_ref::<Refused>().expect("a Refused");
        assert_eq!(refused.name(), Some("localhost"));
    }
}
