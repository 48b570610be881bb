//! Values of the configuration that must not show in a log: [`Secret`], a token or API key
//! (`Debug` and `Display` show `***`; the value is read only through [`Secret::expose`], which
//! makes every use easy to find), and [`MaskedUrl`], a URL that may carry `user:password@`
//! (`Debug` masks the credentials). With them, the settings derive `Debug` without leaking.

use std::fmt;
use std::ops::Deref;

/// A secret value (bot token, API key). Never printed.
#[derive(Clone, PartialEq, Eq)]
pub struct Secret(String);

impl Secret {
    pub(crate) fn new(value: impl Into<String>) -> Self {
        Self(value.into())
    }

    /// The value itself: for the one place that sends it (an HTTP header, a URL).
    pub(crate) fn expose(&self) -> &str {
        &self.0
    }
}

impl From<&str> for Secret {
    fn from(value: &str) -> Self {
        Self::new(value)
    }
}

impl From<String> for Secret {
    fn from(value: String) -> Self {
        Self(value)
    }
}

impl fmt::Debug for Secret {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("***")
    }
}

impl fmt::Display for Secret {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("***")
    }
}

/// A URL from the configuration (a proxy, an API base) that may carry `user:password@`. It
/// reads as the `str` it is; `Debug` masks the credentials.
#[derive(Clone, PartialEq, Eq)]
pub struct MaskedUrl(String);

impl Deref for MaskedUrl {
    type Target = str;

    fn deref(&self) -> &str {
        &self.0
    }
}

impl From<&str> for MaskedUrl {
    fn from(value: &str) -> Self {
        Self(value.to_owned())
    }
}

impl From<String> for MaskedUrl {
    fn from(value: String) -> Self {
        Self(value)
    }
}

impl PartialEq<&str> for MaskedUrl {
    fn eq(&self, other: &&str) -> bool {
        self.0 == *other
    }
}

impl fmt::Debug for MaskedUrl {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Debug::fmt(&super::parse::redact_url_text(&self.0), f)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn urls_show_without_their_credentials() {
        let url = MaskedUrl::from("http://user:hunter2@proxy:3128");
        assert_eq!(format!("{url:?}"), "\"http://***@proxy:3128\"");
        assert_eq!(&*url, "http://user:hunter2@proxy:3128");
        assert_eq!(url, "http://user:hunter2@proxy:3128");
    }

    #[test]
    fn never_printed() {
        let s = Secret::from("123:very-secret-token");
        assert_eq!(format!("{s:?} {s}"), "*** ***");
        assert_eq!(format!("{:?}", Some(s.clone())), "Some(***)");
        assert_eq!(s.expose(), "123:very-secret-token");
    }
}
