//! The OpenAI-compatible wire format of a request (`POST {base}/chat/completions`): the body,
//! with the typed messages written as OpenAI message objects. Replies are decoded by
//! [`super::response`] and [`super::sse`].
//!
//! The messages are written by [`OpenAiShape`] (the shape the tape keeps them in, without what
//! only the tape keeps: saved images' paths, a Gemini `thought_signature` of a call).

use serde::ser::SerializeSeq;
use serde::{Serialize, Serializer};
use serde_json::value::RawValue;

use super::ChatRequest;
use super::message::{ChatMessage, OpenAiShape};

/// The JSON body of a chat completion request (a borrowed view, serialized once per call).
#[derive(Serialize)]
pub(crate) struct RequestBody<'a> {
    model: &'a str,
    messages: Messages<'a>,
    #[serde(skip_serializing_if = "Option::is_none")]
    tools: Option<&'a RawValue>,
    max_tokens: u32,
    stream: bool,
    #[serde(skip_serializing_if = "Option::is_none")]
    stream_options: Option<StreamOptions>,
}

#[derive(Serialize)]
struct StreamOptions {
    include_usage: bool,
}

impl<'a> RequestBody<'a> {
    /// The body of `req` for `model`; a streamed call asks for the usage in the stream.
    pub(crate) fn new(model: &'a str, req: &'a ChatRequest, stream: bool) -> Self {
        Self {
            model,
            messages: Messages(&req.messages),
            tools: (!req.tools.is_empty()).then(|| req.tools.json()),
            max_tokens: req.max_tokens,
            stream,
            stream_options: stream.then_some(StreamOptions {
                include_usage: true,
            }),
        }
    }
}

struct Messages<'a>(&'a [ChatMessage]);

impl Serialize for Messages<'_> {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        let mut seq = s.serialize_seq(Some(self.0.len()))?;
        for message in self.0 {
            seq.serialize_element(&OpenAiShape {
                message,
                record: false,
            })?;
        }
        seq.end()
    }
}
