//! Discord REST calls made by the adapter itself: posting messages, typing, the two lookups
//! the addressing rules need (channel info, the bot's roles in a guild), and the message
//! history the catch-up reads (a `GET` with query parameters).
//!
//! Requests are built by serenity (`Request` + `Route`, so URLs, headers and the `proxy`
//! override are serenity's) but executed here, so the raw response is visible: with the
//! serenity rate limiter disabled (the `BUB_DISCORD_API_BASE` override) a 429 comes back to us,
//! and serenity's error type drops the `retry_after` value. [`Rest::post`] therefore retries
//! 429s itself, waiting `retry-after` (header) or `retry_after` (body) — up to 60 s; a longer
//! wait is not waited for, the call fails at once ("rate limited: the server asks to wait N s",
//! the rule of [`crate::time`]). With the default API base the rate limiter is on and serenity
//! handles buckets and 429s before we see them.
//!
//! Errors never contain the token: they name the route, the status and Discord's message.

use std::time::Duration;

use anyhow::{Context as _, anyhow};
use reqwest::header::HeaderMap;
use serde_json::Value;
use serenity::builder::CreateAttachment;
use serenity::http::{Http, LightMethod, Multipart, MultipartUpload, Request, Route};

use crate::time::{WaitTooLong, server_wait};

/// Attempts per request when Discord answers 429.
pub(crate) const MAX_ATTEMPTS: u32 = 5;
/// Wait when a 429 names no `retry_after`.
const DEFAULT_RETRY_WAIT: Duration = Duration::from_secs(1);

/// Discord answered with an error status (after the 429 retries).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{what}: {detail}")]
pub(crate) struct RestError {
    /// `discord POST /channels/555/messages`.
    pub what: String,
    pub status: u16,
    /// `403 Forbidden: Missing Access (code 50001)`.
    pub detail: String,
}

/// The REST side of the adapter: serenity's `Http` (token, proxy override, rate limiter) plus
/// the reqwest client it was built with.
pub(crate) struct Rest {
    pub http: std::sync::Arc<Http>,
    client: reqwest::Client,
    /// The API's base and how `client` reaches it, for connection errors.
    api: reqwest::Url,
    route: crate::net::Route,
}

impl Rest {
    pub(crate) fn new(
        http: std::sync::Arc<Http>,
        client: reqwest::Client,
        api: reqwest::Url,
        route: crate::net::Route,
    ) -> Self {
        Self {
            http,
            client,
            api,
            route,
        }
    }

    /// Sends `body` (JSON) with `method` to `route`; on 429 waits and resends, at most
    /// `attempts` times in all. Returns the response body of the first success.
    pub(crate) async fn call(
        &self,
        method: LightMethod,
        route: Route<'_>,
        body: Option<&Value>,
        attempts: u32,
    ) -> anyhow::Result<Vec<u8>> {
        self.call_with_query(method, route, &[], body, None, attempts)
            .await
    }

    /// [`Rest::call`] with query parameters (`?after=…&limit=…`; values are sent as given, so
    /// only pass numbers or URL-safe text) and an optional file: then the request is multipart,
    /// `body` its `payload_json` and the file `files[0]`.
    async fn call_with_query(
        &self,
        method: LightMethod,
        route: Route<'_>,
        query: &[(&'static str, String)],
        body: Option<&Value>,
        file: Option<&CreateAttachment>,
        attempts: u32,
    ) -> anyhow::Result<Vec<u8>> {
        let what = route_name(method, route);
        let body = body.map(serde_json::to_vec).transpose()?;
        let mut attempt = 1;
        loop {
            let mut req = match file {
                None => Request::new(route, method).body(body.clone()),
                Some(file) => Request::new(route, method).multipart(Some(Multipart {
                    upload: MultipartUpload::Attachments(vec![file.clone()]),
                    fields: Vec::new(),
                    payload_json: body
                        .as_deref()
                        .map(|b| String::from_utf8_lossy(b).into_owned()),
                })),
            };
            if !query.is_empty() {
                req = req.params(Some(query.to_vec()));
            }
            let resp = self.execute(req).await.with_context(|| what.clone())?;
            let status = resp.status();
            let headers = resp.headers().clone();
            let bytes = resp.bytes().await.with_context(|| what.clone())?;
            if status.is_success() {
                return Ok(bytes.to_vec());
            }
            if status.as_u16() == 429 && attempt < attempts {
                let wait = match retry_after(&headers, &bytes) {
                    Ok(wait) => wait,
                    Err(too_long) => {
                        tracing::warn!(route = %what, retry_after = too_long.seconds, attempt,
                            "discord.rate_limited: wait too long, giving up");
                        return Err(RestError {
                            what,
                            status: 429,
                            detail: too_long.to_string(),
                        }
                        .into());
                    }
                };
                tracing::warn!(route = %what, wait_ms = wait.as_millis() as u64, attempt,
                    "discord.rate_limited");
                tokio::time::sleep(wait).await;
                attempt += 1;
                continue;
            }
            return Err(RestError {
                what,
                status: status.as_u16(),
                detail: describe(status, &bytes),
            }
            .into());
        }
    }

    /// `POST` with 429 retries ([`MAX_ATTEMPTS`]).
    pub(crate) async fn post(&self, route: Route<'_>, body: &Value) -> anyhow::Result<Vec<u8>> {
        self.call(LightMethod::Post, route, Some(body), MAX_ATTEMPTS)
            .await
    }

    /// `POST` of `body` with `file` attached (multipart), with 429 retries ([`MAX_ATTEMPTS`]).
    pub(crate) async fn post_with_file(
        &self,
        route: Route<'_>,
        body: &Value,
        file: &CreateAttachment,
    ) -> anyhow::Result<Vec<u8>> {
        self.call_with_query(
            LightMethod::Post,
            route,
            &[],
            Some(body),
            Some(file),
            MAX_ATTEMPTS,
        )
        .await
    }

    /// `GET` returning JSON, one attempt (lookups fall back to "unknown" on errors).
    pub(crate) async fn get_json(&self, route: Route<'_>) -> anyhow::Result<Value> {
        let bytes = self.call(LightMethod::Get, route, None, 1).await?;
        Ok(serde_json::from_slice(&bytes)?)
    }

    /// `GET` with query parameters returning JSON, with 429 retries ([`MAX_ATTEMPTS`]): the
    /// catch-up's history pages, which nothing else would fetch again.
    pub(crate) async fn get_json_query(
        &self,
        route: Route<'_>,
        query: &[(&'static str, String)],
    ) -> anyhow::Result<Value> {
        let bytes = self
            .call_with_query(LightMethod::Get, route, query, None, None, MAX_ATTEMPTS)
            .await?;
        Ok(serde_json::from_slice(&bytes)?)
    }

    /// Runs one request through serenity's rate limiter when it is on, else directly (with the
    /// `proxy` override applied, as `Http::request` does).
    async fn execute(&self, req: Request<'_>) -> anyhow::Result<reqwest::Response> {
        let unreachable = |e: &reqwest::Error| crate::net::unreachable(e, &self.api, &self.route);
        match &self.http.ratelimiter {
            Some(limiter) => limiter.perform(req).await.map_err(|e| match &e {
                serenity::Error::Http(serenity::http::HttpError::Request(inner)) => {
                    unreachable(inner).map_or_else(|| redacted(e), |text| anyhow!(text))
                }
                _ => redacted(e),
            }),
            None => {
                let builder = req
                    .build(&self.client, self.http.token(), self.http.proxy.as_deref())
                    .map_err(redacted)?;
                let request = builder.build()?;
                self.client
                    .execute(request)
                    .await
                    .map_err(|e| match unreachable(&e) {
                        Some(text) => anyhow!(text),
                        None => e.into(),
                    })
            }
        }
    }
}

/// serenity errors as plain text (they never carry the token, but keep them flat anyway).
fn redacted(err: serenity::Error) -> anyhow::Error {
    anyhow!("{err}")
}

/// `POST /channels/555/messages`.
fn route_name(method: LightMethod, route: Route<'_>) -> String {
    let path = route.path();
    let path = path.split_once("/api/v10").map_or(&*path, |(_, p)| p);
    let method = match method {
        LightMethod::Delete => "DELETE",
        LightMethod::Get => "GET",
        LightMethod::Patch => "PATCH",
        LightMethod::Post => "POST",
        LightMethod::Put => "PUT",
    };
    format!("discord {method} {path}")
}

/// How long a 429 asks us to wait: the `retry-after` header, else the body's `retry_after`
/// (both seconds, fractional allowed; [`DEFAULT_RETRY_WAIT`] when neither is a usable number),
/// or [`WaitTooLong`] beyond [`MAX_SERVER_WAIT`](crate::time::MAX_SERVER_WAIT).
pub(crate) fn retry_after(headers: &HeaderMap, body: &[u8]) -> Result<Duration, WaitTooLong> {
    let from_header = headers
        .get("retry-after")
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.trim().parse::<f64>().ok());
    let from_body = || {
        serde_json::from_slice::<Value>(body)
            .ok()
            .and_then(|v| v.get("retry_after").and_then(Value::as_f64))
    };
    match from_header.or_else(from_body) {
        Some(secs) if secs >= 0.0 => server_wait(secs),
        _ => Ok(DEFAULT_RETRY_WAIT),
    }
}

/// `403 Forbidden: Missing Access (code 50001)`, or the start of a non-JSON body.
fn describe(status: reqwest::StatusCode, body: &[u8]) -> String {
    let json: Option<Value> = serde_json::from_slice(body).ok();
    let message = json
        .as_ref()
        .and_then(|v| v.get("message"))
        .and_then(Value::as_str);
    let code = json
        .as_ref()
        .and_then(|v| v.get("code"))
        .and_then(Value::as_i64);
    match (message, code) {
        (Some(m), Some(c)) => format!("{status}: {m} (code {c})"),
        (Some(m), None) => format!("{status}: {m}"),
        _ => {
            let text: String = String::from_utf8_lossy(body).chars().take(200).collect();
            if text.trim().is_empty() {
                status.to_string()
            } else {
                format!("{status}: {}", text.trim())
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::time::MAX_SERVER_WAIT;

    #[test]
    fn retry_after_prefers_header_then_body() {
        let mut h = HeaderMap::new();
        let body = br#"{"message":"You are being rate limited.","retry_after":0.5,"global":false}"#;
        assert_eq!(retry_after(&h, body), Ok(Duration::from_millis(500)));
        h.insert("retry-after", "2".parse().unwrap());
        assert_eq!(retry_after(&h, body), Ok(Duration::from_secs(2)));
        h.insert("retry-after", "60".parse().unwrap());
        assert_eq!(retry_after(&h, body), Ok(MAX_SERVER_WAIT));
        h.insert("retry-after", "9999".parse().unwrap());
        assert_eq!(retry_after(&h, body), Err(WaitTooLong { seconds: 9999.0 }));
        let none = HeaderMap::new();
        assert_eq!(retry_after(&none, b"nope"), Ok(DEFAULT_RETRY_WAIT));
        let negative = br#"{"retry_after":-1}"#;
        assert_eq!(retry_after(&none, negative), Ok(DEFAULT_RETRY_WAIT));
        // Too large for a Duration: an error, not a panic.
        let huge = br#"{"retry_after":1e19}"#;
        assert_eq!(retry_after(&none, huge), Err(WaitTooLong { seconds: 1e19 }));
        h.insert("retry-after", "inf".parse().unwrap());
        assert!(retry_after(&h, body).is_err());
        h.insert("retry-after", "NaN".parse().unwrap());
        assert_eq!(retry_after(&h, body), Ok(DEFAULT_RETRY_WAIT));
    }

    #[test]
    fn errors_are_described_from_discord_json() {
        let s = reqwest::StatusCode::FORBIDDEN;
        assert_eq!(
            describe(s, br#"{"message":"Missing Access","code":50001}"#),
            "403 Forbidden: Missing Access (code 50001)"
        );
        assert_eq!(describe(s, b""), "403 Forbidden");
        assert_eq!(
            describe(s, b"<html>oops</html>"),
            "403 Forbidden: <html>oops</html>"
        );
    }

    #[test]
    fn routes_are_named_without_host() {
        let route = Route::ChannelMessages {
            channel_id: 555.into(),
        };
        assert_eq!(
            route_name(LightMethod::Post, route),
            "discord POST /channels/555/messages"
        );
    }
}
