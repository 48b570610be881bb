//! [`Secret`]: a token or API key read from the configuration. Its `Debug` and `Display` show
//! `***`, so settings can derive `Debug` and be logged without leaking it; the value is read
//! only through [`Secret::expose`], which makes every use easy to find.

use std::fmt;

/// A secret value (bot token, API key). Never printed.
#[derive(Clone, PartialEq, Eq)]
pub struct Secret(String);

impl Secret {
    pub fn new(value: impl Into<String>) -> Self {
        Self(value.into())
    }

    /// The value itself: for the one place that sends it (an HTTP header, a URL).
    pub fn expose(&self) -> &str {
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn never_printed() {
        let s = Secret::from("123:very-secret-token");
        assert_eq!(format!("{s:?} {s}"), "*** ***");
        assert_eq!(format!("{:?}", Some(s.clone())), "Some(***)");
        assert_eq!(s.expose(), "123:very-secret-token");
    }
}
