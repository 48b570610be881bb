//! The HTTP side of rmcp's streamable HTTP transport, on Bub's own reqwest client: one HTTP
//! stack (rustls, the proxy rules) for models, chats and MCP servers alike. rmcp drives the
//! protocol (sessions, SSE reconnection); this file only sends its messages and hands back
//! what came: `202` accepted, a JSON body, or an SSE stream.
//!
//! Invariant: a JSON response body is read up to [`MAX_JSON_BODY`] and no further.

use std::borrow::Cow;
use std::collections::HashMap;
use std::sync::Arc;

use futures_util::StreamExt;
use futures_util::stream::BoxStream;
use http::{HeaderName, HeaderValue, StatusCode, header};
use rmcp::model::{ClientJsonRpcMessage, ServerJsonRpcMessage};
use rmcp::transport::streamable_http_client::{
    SseError, StreamableHttpClient, StreamableHttpError, StreamableHttpPostResponse,
};
use sse_stream::{Sse, SseStream};

/// The largest JSON response accepted from a server (a tool result with an image fits).
const MAX_JSON_BODY: usize = 16 << 20;
const SESSION_ID: &str = "Mcp-Session-Id";
const LAST_EVENT_ID: &str = "Last-Event-Id";
const EVENT_STREAM: &str = "text/event-stream";
const JSON: &str = "application/json";

type Error = StreamableHttpError<reqwest::Error>;

/// Bub's reqwest client as rmcp's HTTP client.
#[derive(Clone)]
pub(super) struct Http(pub(super) reqwest::Client);

impl Http {
    /// A request to `uri` with the headers every MCP request carries.
    fn request(
        &self,
        method: reqwest::Method,
        uri: &str,
        session: Option<&str>,
        auth: Option<String>,
        headers: HashMap<HeaderName, HeaderValue>,
    ) -> reqwest::RequestBuilder {
        let mut request = self
            .0
            .request(method, uri)
            .header(header::ACCEPT, format!("{EVENT_STREAM}, {JSON}"));
        if let Some(session) = session {
            request = request.header(SESSION_ID, session);
        }
        if let Some(token) = auth {
            request = request.bearer_auth(token);
        }
        for (name, value) in headers {
            request = request.header(name, value);
        }
        request
    }
}

/// The response's media type, without parameters (`text/event-stream; charset=utf-8`).
fn media_type(response: &reqwest::Response) -> Option<String> {
    let value = response
        .headers()
        .get(header::CONTENT_TYPE)?
        .to_str()
        .ok()?;
    Some(value.split(';').next()?.trim().to_ascii_lowercase())
}

/// An error status as rmcp's error, with the start of the body (servers explain there).
async fn status_error(response: reqwest::Response) -> Error {
    let status = response.status();
    let body = response.text().await.unwrap_or_default();
    let cut: String = body.chars().take(200).collect();
    StreamableHttpError::UnexpectedServerResponse(Cow::Owned(format!("HTTP {status}: {cut}")))
}

/// The response's SSE events.
fn events(response: reqwest::Response) -> BoxStream<'static, Result<Sse, SseError>> {
    SseStream::from_bytes_stream(response.bytes_stream()).boxed()
}

/// Reads a JSON body of at most [`MAX_JSON_BODY`] bytes.
async fn json_body(response: reqwest::Response) -> Result<Vec<u8>, Error> {
    let mut body = Vec::new();
    let mut chunks = response.bytes_stream();
    while let Some(chunk) = chunks.next().await {
        let chunk = chunk.map_err(StreamableHttpError::Client)?;
        if body.len() + chunk.len() > MAX_JSON_BODY {
            return Err(StreamableHttpError::ResponseBodyTooLarge {
                max_size: MAX_JSON_BODY,
            });
        }
        body.extend_from_slice(&chunk);
    }
    Ok(body)
}

impl StreamableHttpClient for Http {
    type Error = reqwest::Error;

    async fn post_message(
        &self,
        uri: Arc<str>,
        message: ClientJsonRpcMessage,
        session: Option<Arc<str>>,
        auth: Option<String>,
        headers: HashMap<HeaderName, HeaderValue>,
    ) -> Result<StreamableHttpPostResponse, Error> {
        let request = self.request(
            reqwest::Method::POST,
            &uri,
            session.as_deref(),
            auth,
            headers,
        );
        let response = request
            .json(&message)
            .send()
            .await
            .map_err(StreamableHttpError::Client)?;
        let status = response.status();
        if matches!(status, StatusCode::ACCEPTED | StatusCode::NO_CONTENT) {
            return Ok(StreamableHttpPostResponse::Accepted);
        }
        if status == StatusCode::NOT_FOUND && session.is_some() {
            return Err(StreamableHttpError::SessionExpired);
        }
        if !status.is_success() {
            return Err(status_error(response).await);
        }
        let new_session = response
            .headers()
            .get(SESSION_ID)
            .and_then(|v| v.to_str().ok())
            .map(str::to_owned);
        match media_type(&response).as_deref() {
            Some(EVENT_STREAM) => Ok(StreamableHttpPostResponse::Sse(
                events(response),
                new_session,
            )),
            Some(JSON) => {
                let body = json_body(response).await?;
                let message: ServerJsonRpcMessage = serde_json::from_slice(&body)?;
                Ok(StreamableHttpPostResponse::Json(message, new_session))
            }
            other => Err(StreamableHttpError::UnexpectedContentType(
                other.map(str::to_owned),
            )),
        }
    }

    async fn delete_session(
        &self,
        uri: Arc<str>,
        session: Arc<str>,
        auth: Option<String>,
        headers: HashMap<HeaderName, HeaderValue>,
    ) -> Result<(), Error> {
        let request = self.request(reqwest::Method::DELETE, &uri, Some(&session), auth, headers);
        let response = request.send().await.map_err(StreamableHttpError::Client)?;
        match response.status() {
            s if s.is_success() || s == StatusCode::METHOD_NOT_ALLOWED => Ok(()),
            _ => Err(status_error(response).await),
        }
    }

    async fn get_stream(
        &self,
        uri: Arc<str>,
        session: Option<Arc<str>>,
        last_event: Option<String>,
        auth: Option<String>,
        headers: HashMap<HeaderName, HeaderValue>,
    ) -> Result<BoxStream<'static, Result<Sse, SseError>>, Error> {
        let mut request = self.request(
            reqwest::Method::GET,
            &uri,
            session.as_deref(),
            auth,
            headers,
        );
        if let Some(id) = last_event {
            request = request.header(LAST_EVENT_ID, id);
        }
        let response = request.send().await.map_err(StreamableHttpError::Client)?;
        if response.status() == StatusCode::METHOD_NOT_ALLOWED {
            return Err(StreamableHttpError::ServerDoesNotSupportSse);
        }
        if !response.status().is_success() {
            return Err(status_error(response).await);
        }
        match media_type(&response).as_deref() {
            Some(EVENT_STREAM) => Ok(events(response)),
            other => Err(StreamableHttpError::UnexpectedContentType(
                other.map(str::to_owned),
            )),
        }
    }
}
