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

use anyhow::anyhow;
use reqwest::header::HeaderMap;
use serde_json::Value;
use serenity::builder::CreateAttachment;
use serenity::http::{Http, LightMethod, Multipart, MultipartUpload, Request, Route};

use crate::net::retry::{Failure, RetryPolicy, retry};
use crate::time::{WaitTooLong, server_wait};

/// The catch-up's history pages: 5 attempts (it runs in the pipeline task, which waits).
const HISTORY_RETRY: RetryPolicy =
    RetryPolicy::attempts(5, Duration::from_secs(1), Duration::from_secs(15));
/// Wait when a 429 names no `retry_after`.
const DEFAULT_RETRY_WAIT: Duration = Duration::from_secs(1);

/// Discord answered with an error status (after the retries).
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
/// the shared builder's client it was built with ([`crate::net::client`]: its base and route
/// for connection errors, and how posts and edits are retried, [`crate::net::retry::SENDS`]).
pub(crate) struct Rest {
    pub http: std::sync::Arc<Http>,
    client: crate::net::client::Client,
}

impl Rest {
    pub(crate) fn new(http: std::sync::Arc<Http>, client: crate::net::client::Client) -> Self {
        Self { http, client }
    }

    /// Sends `body` (JSON) with `method` to `route`, retried by `policy`. Returns the response
    /// body of the first success.
    pub(crate) async fn call(
        &self,
        method: LightMethod,
        route: Route<'_>,
        body: Option<&Value>,
        policy: &RetryPolicy,
    ) -> anyhow::Result<Vec<u8>> {
        self.call_with_query(method, route, &[], body, None, policy)
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
        policy: &RetryPolicy,
    ) -> anyhow::Result<Vec<u8>> {
        let what = &route_name(method, route);
        let body = &body.map(serde_json::to_vec).transpose()?;
        let attempt = |_| async move {
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
            let resp = self.execute(req).await.map_err(|failure| match failure {
                Failure::Transient(e) => Failure::Transient(e.context(what.clone())),
                Failure::After(e, wait) => Failure::After(e.context(what.clone()), wait),
                Failure::Final(e) => Failure::Final(e.context(what.clone())),
            })?;
            let status = resp.status();
            let headers = resp.headers().clone();
            let bytes = resp
                .bytes()
                .await
                .map_err(|e| Failure::Transient(anyhow::Error::from(e).context(what.clone())))?;
            if status.is_success() {
                return Ok(bytes.to_vec());
            }
            let error = |detail| {
                anyhow::Error::from(RestError {
                    what: what.clone(),
                    status: status.as_u16(),
                    detail,
                })
            };
            Err(match status.as_u16() {
                429 => match retry_after(&headers, &bytes) {
                    Ok(wait) => Failure::After(error(describe(status, &bytes)), wait),
                    Err(too_long) => {
                        tracing::warn!(route = %what, retry_after = too_long.seconds,
                            "discord.rate_limited: wait too long, giving up");
                        Failure::Final(error(too_long.to_string()))
                    }
                },
                500.. => Failure::Transient(error(describe(status, &bytes))),
                _ => Failure::Final(error(describe(status, &bytes))),
            })
        };
        let on_retry = |error: &anyhow::Error, attempt, wait: Duration| {
            crate::metrics::retry("discord");
            let wait_ms = wait.as_millis() as u64;
            match error.downcast_ref::<RestError>().map(|e| e.status) {
                Some(429) => {
                    tracing::warn!(route = %what, wait_ms, attempt, "discord.rate_limited");
                }
                _ => tracing::warn!(route = %what, error = %format!("{error:#}"), wait_ms,
                    attempt, "discord.request_failed: retrying"),
            }
        };
        retry(policy, attempt, on_retry).await
    }

    /// `POST`, retried like a send ([`crate::net::retry::SENDS`]).
    pub(crate) async fn post(&self, route: Route<'_>, body: &Value) -> anyhow::Result<Vec<u8>> {
        self.call(LightMethod::Post, route, Some(body), &self.client.retry)
            .await
    }

    /// `PATCH` (an edit), retried like a send.
    pub(crate) async fn patch(&self, route: Route<'_>, body: &Value) -> anyhow::Result<Vec<u8>> {
        self.call(LightMethod::Patch, route, Some(body), &self.client.retry)
            .await
    }

    /// `POST` of `body` with `file` attached (multipart), retried like a send.
    pub(crate) async fn post_with_file(
        &self,
        route: Route<'_>,
        body: &Value,
        file: &CreateAttachment,
    ) -> anyhow::Result<Vec<u8>> {
        let post = LightMethod::Post;
        let sends = &self.client.retry;
        self.call_with_query(post, route, &[], Some(body), Some(file), sends)
            .await
    }

    /// `GET` returning JSON, one attempt (lookups fall back to "unknown" on errors).
    pub(crate) async fn get_json(&self, route: Route<'_>) -> anyhow::Result<Value> {
        let bytes = self
            .call(LightMethod::Get, route, None, &RetryPolicy::ONCE)
            .await?;
        Ok(serde_json::from_slice(&bytes)?)
    }

    /// `GET` with query parameters returning JSON, retried by [`HISTORY_RETRY`]: the
    /// catch-up's history pages, which nothing else would fetch again.
    pub(crate) async fn get_json_query(
        &self,
        route: Route<'_>,
        query: &[(&'static str, String)],
    ) -> anyhow::Result<Value> {
        let get = LightMethod::Get;
        let bytes = self
            .call_with_query(get, route, query, None, None, &HISTORY_RETRY)
            .await?;
        Ok(serde_json::from_slice(&bytes)?)
    }

    /// Runs one request through serenity's rate limiter when it is on, else directly (with the
    /// `proxy` override applied, as `Http::request` does). A request that could not be sent or
    /// whose answer did not arrive (connection, timeout) is [`Failure::Transient`]; one that
    /// could not be built is [`Failure::Final`].
    async fn execute(&self, req: Request<'_>) -> Result<reqwest::Response, Failure<anyhow::Error>> {
        let failed = |e: reqwest::Error| {
            let text = crate::net::unreachable(&e, &self.client.base, &self.client.route);
            match (e.is_builder(), text) {
                (true, _) => Failure::Final(e.into()),
                (false, Some(text)) => Failure::Transient(anyhow!(text)),
                (false, None) => Failure::Transient(e.into()),
            }
        };
        match &self.http.ratelimiter {
            Some(limiter) => limiter.perform(req).await.map_err(|e| match e {
                serenity::Error::Http(serenity::http::HttpError::Request(inner)) => failed(inner),
                e => Failure::Final(redacted(e)),
            }),
            None => {
                let client = &self.client.http;
                let builder = req
                    .build(client, self.http.token(), self.http.proxy.as_deref())
                    .map_err(|e| Failure::Final(redacted(e)))?;
                let request = builder.build().map_err(|e| Failure::Final(e.into()))?;
                client.execute(request).await.map_err(failed)
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
