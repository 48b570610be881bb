//! Images for vision models: a saved image becomes an OpenAI `image_url` content part — decoded,
//! downscaled so its longer edge is at most [`MAX_EDGE`] pixels, re-encoded as JPEG, inlined as
//! a data URI — and the user message that carries images (`"images": [paths]` on the tape) is
//! turned into content parts for the request.
//!
//! Only the newest user message with images in the context gets image parts (a question about
//! the photo sent a turn earlier still sees it), at most [`MAX_IMAGES`] of them; the `images`
//! field never reaches the provider. Decoding is CPU work: callers run [`data_uri`] on the
//! blocking pool.

use std::path::Path;

use base64::Engine;
use serde_json::{Value, json};

/// The longest edge, in pixels, of an image sent to the model (larger ones are scaled down).
pub(crate) const MAX_EDGE: u32 = 1568;

/// The most images one request carries.
pub(crate) const MAX_IMAGES: usize = 4;

/// The largest image file decoded (a bigger one is refused before it is read).
const MAX_FILE_BYTES: u64 = 32 * 1024 * 1024;

/// The largest WebP or GIF passed through as it is (Bub decodes only JPEG and PNG).
const MAX_PASSED_BYTES: u64 = 4 * 1024 * 1024;

/// The image at `path` as a `data:image/jpeg;base64,…` URI, its longer edge at most
/// [`MAX_EDGE`]; a WebP or GIF (not decoded here: fewer codecs in the binary) is passed as it is
/// when at most [`MAX_PASSED_BYTES`].
pub(crate) fn data_uri(path: &Path) -> anyhow::Result<String> {
    let size = std::fs::metadata(path)?.len();
    anyhow::ensure!(size <= MAX_FILE_BYTES, "the image is too large to decode");
    if let Some(mime) = passed_through(path)? {
        anyhow::ensure!(
            size <= MAX_PASSED_BYTES,
            "the {mime} image is too large to send"
        );
        let encoded = base64::engine::general_purpose::STANDARD.encode(std::fs::read(path)?);
        return Ok(format!("data:{mime};base64,{encoded}"));
    }
    let mut reader = image::ImageReader::open(path)?.with_guessed_format()?;
    // Guards against decompression bombs: a small file claiming a huge canvas.
    let mut limits = image::Limits::default();
    limits.max_image_width = Some(16_384);
    limits.max_image_height = Some(16_384);
    limits.max_alloc = Some(512 * 1024 * 1024);
    reader.limits(limits);
    let mut picture = reader.decode()?;
    if picture.width().max(picture.height()) > MAX_EDGE {
        picture = picture.resize(MAX_EDGE, MAX_EDGE, image::imageops::FilterType::Triangle);
    }
    let mut jpeg = Vec::new();
    let encoder = image::codecs::jpeg::JpegEncoder::new_with_quality(&mut jpeg, 85);
    picture.to_rgb8().write_with_encoder(encoder)?;
    let encoded = base64::engine::general_purpose::STANDARD.encode(&jpeg);
    Ok(format!("data:image/jpeg;base64,{encoded}"))
}

/// The type of a WebP or GIF file (by its first bytes), which goes to the model undecoded.
fn passed_through(path: &Path) -> std::io::Result<Option<&'static str>> {
    use std::io::Read;
    let mut head = [0u8; 12];
    let read = std::fs::File::open(path)?.read(&mut head)?;
    let head = &head[..read];
    Ok(if head.starts_with(b"GIF8") {
        Some("image/gif")
    } else if head.len() == 12 && head.starts_with(b"RIFF") && &head[8..12] == b"WEBP" {
        Some("image/webp")
    } else {
        None
    })
}

/// The image paths of the newest user message in `messages` that has any (at most
/// [`MAX_IMAGES`]), and its index.
pub(crate) fn newest_images(messages: &[Value]) -> Option<(usize, Vec<String>)> {
    let (at, message) = messages.iter().enumerate().rev().find(|(_, m)| {
        m["role"] == "user" && m["images"].as_array().is_some_and(|a| !a.is_empty())
    })?;
    let paths = message["images"]
        .as_array()?
        .iter()
        .filter_map(Value::as_str)
        .take(MAX_IMAGES)
        .map(str::to_owned)
        .collect();
    Some((at, paths))
}

/// Removes the `images` field of every message; the message at `at` gets `parts` — its text,
/// then an `image_url` part per data URI — as its content.
pub(crate) fn attach(messages: &mut [Value], at: Option<(usize, &[String])>) {
    for message in messages.iter_mut() {
        if let Some(fields) = message.as_object_mut() {
            fields.remove("images");
        }
    }
    let Some((at, uris)) = at.filter(|(_, uris)| !uris.is_empty()) else {
        return;
    };
    let Some(message) = messages.get_mut(at) else {
        return;
    };
    let text = message["content"].as_str().unwrap_or_default().to_owned();
    let mut parts = vec![json!({"type": "text", "text": text})];
    parts.extend(
        uris.iter()
            .map(|uri| json!({"type": "image_url", "image_url": {"url": uri}})),
    );
    message["content"] = Value::Array(parts);
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_large_image_is_scaled_down_to_a_jpeg_data_uri() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("big.png");
        image::RgbImage::from_pixel(3000, 1000, image::Rgb([200, 10, 10]))
            .save(&path)
            .unwrap();
        let uri = data_uri(&path).unwrap();
        let encoded = uri.strip_prefix("data:image/jpeg;base64,").unwrap();
        let bytes = base64::engine::general_purpose::STANDARD
            .decode(encoded)
            .unwrap();
        let back = image::load_from_memory(&bytes).unwrap();
        assert_eq!((back.width(), back.height()), (MAX_EDGE, 523));
        std::fs::write(dir.path().join("not.png"), b"not an image").unwrap();
        assert!(data_uri(&dir.path().join("not.png")).is_err());
        // A GIF is sent as it is.
        std::fs::write(dir.path().join("a.gif"), b"GIF89a\x01\x00\x01\x00").unwrap();
        let uri = data_uri(&dir.path().join("a.gif")).unwrap();
        assert!(uri.starts_with("data:image/gif;base64,R0lGODlh"), "{uri}");
    }

    #[test]
    fn the_newest_message_with_images_gets_the_parts_and_no_message_keeps_the_field() {
        let mut messages = vec![
            json!({"role": "user", "content": "old", "images": ["a.jpg"]}),
            json!({"role": "assistant", "content": "a cat"}),
            json!({"role": "user", "content": "and this?", "images": ["b.jpg", "c.jpg"]}),
            json!({"role": "user", "content": "hm"}),
        ];
        let (at, paths) = newest_images(&messages).unwrap();
        assert_eq!(
            (at, paths),
            (2, vec!["b.jpg".to_owned(), "c.jpg".to_owned()])
        );
        let uris = ["data:image/jpeg;base64,AA".to_owned()];
        attach(&mut messages, Some((2, &uris)));
        assert_eq!(messages[0], json!({"role": "user", "content": "old"}));
        assert_eq!(
            messages[2]["content"],
            json!([{"type": "text", "text": "and this?"},
                   {"type": "image_url", "image_url": {"url": "data:image/jpeg;base64,AA"}}])
        );
        assert_eq!(newest_images(&messages), None);
    }
}
