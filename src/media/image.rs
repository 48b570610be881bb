//! Images for vision models: a saved image becomes an image part of a message — decoded,
//! downscaled so its longer edge is at most [`MAX_EDGE`] pixels, re-encoded as JPEG, inlined as
//! a data URI — and the user message that carries images (`"images": [paths]` on the tape) is
//! turned into content parts for the request.
//!
//! Only the newest user message with images in the context gets image parts (a question about
//! the photo sent a turn earlier still sees it), at most [`MAX_IMAGES`] of them; the `images`
//! field never reaches the provider. An image that is not shown gets a note with its path in the
//! message's text instead ([`Shown::Note`]).
//!
//! Bounds — a small file may declare a huge canvas (a decompression bomb: 465 KB of PNG that
//! decodes to 480 MB):
//! * the canvas is read from the file's header first, and an image over [`MAX_PIXELS`], or
//!   whose decode would hold more than [`MAX_ALLOC`] (a progressive JPEG keeps all its
//!   coefficients), is never decoded; the decoder itself reserves at most [`MAX_ALLOC`] for the
//!   picture (a 16-bit or RGBA PNG);
//! * one image is measured and decoded at a time in the process ([`DECODING`]): chats sending
//!   images at once wait for each other instead of adding up;
//! * each image is decoded once: the JPEG made of it, or the note why there is none, is kept in
//!   `BUB_HOME/cache/images/` under a hash of the file's path, length and modification time (at
//!   most [`MAX_CACHED`] entries, the oldest removed first), so later turns of the chat read it
//!   back. Nothing is kept in memory between turns.
//!
//! All of it is blocking file and CPU work: callers run [`show`] on the blocking pool.

use std::path::{Path, PathBuf};
use std::sync::{Mutex, PoisonError};
use std::time::UNIX_EPOCH;

use base64::Engine;

use crate::llm::{ChatMessage, Part, Role};

/// The longest edge, in pixels, of an image sent to the model (larger ones are scaled down).
pub(crate) const MAX_EDGE: u32 = 1568;

/// The most images one request carries.
pub(crate) const MAX_IMAGES: usize = 4;

/// The most pixels an image may have to be decoded: 40 megapixels, which admits the photos
/// phones take (12 MP, or 50 MP sensors binned to 12.5 MP; the full-resolution 48–200 MP modes
/// are over it) and 4:3 photos up to 7296 × 5472 sent as files (Telegram's own photos are at
/// most 2560 px). As 8-bit RGB that is 120 MB.
pub(crate) const MAX_PIXELS: u64 = 40_000_000;

/// The most one decode may hold: the picture (the decoder reserves it up front and fails
/// past this) plus, for a progressive JPEG, its coefficients (checked before decoding). A
/// [`MAX_PIXELS`] 8-bit RGB picture fits; a 16-bit or RGBA one, or a progressive JPEG, of that
/// size does not.
const MAX_ALLOC: u64 = 128 * 1024 * 1024;

/// The largest image file decoded (a bigger one is refused before it is read).
const MAX_FILE_BYTES: u64 = 32 * 1024 * 1024;

/// The largest WebP or GIF passed through as it is (Bub decodes only JPEG and PNG).
const MAX_PASSED_BYTES: u64 = 4 * 1024 * 1024;

/// Where the images made for the model are kept, under `BUB_HOME`.
pub(crate) const CACHE_DIR: &str = "cache/images";

/// The most entries (JPEGs of up to a few hundred KB, or notes) the cache keeps.
const MAX_CACHED: usize = 128;

/// One image measured and decoded at a time in the process: a decode may hold up to
/// [`MAX_ALLOC`].
static DECODING: Mutex<()> = Mutex::new(());

/// What a vision model is shown of one saved image.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Shown {
    /// The image, as a data URI.
    Image(String),
    /// Why it is not shown: a short note the model gets beside the image's path.
    Note(String),
}

/// What the model is shown of the image at `path`: a `data:image/jpeg;base64,…` URI, its longer
/// edge at most [`MAX_EDGE`] — made once, then read from the cache under `home` —, a WebP or
/// GIF as it is (at most [`MAX_PASSED_BYTES`]; not decoded here: fewer codecs in the binary),
/// or a note saying why not.
pub(crate) fn show(home: &Path, path: &Path) -> Shown {
    shown(&home.join(CACHE_DIR), path).unwrap_or_else(|e| Shown::Note(format!("{e:#}")))
}

fn shown(cache: &Path, path: &Path) -> anyhow::Result<Shown> {
    let meta = std::fs::metadata(path)?;
    if let Some(mime) = passed_through(path)? {
        anyhow::ensure!(
            meta.len() <= MAX_PASSED_BYTES,
            "the {mime} image is too large to send"
        );
        return Ok(Shown::Image(uri(mime, &std::fs::read(path)?)));
    }
    anyhow::ensure!(
        meta.len() <= MAX_FILE_BYTES,
        "the image is too large to decode"
    );
    let entry = Entry::of(cache, path, &meta);
    if let Some(shown) = entry.read() {
        tracing::debug!(path = %path.display(), "media.image.cached");
        return Ok(shown);
    }
    let made = jpeg(path);
    match &made {
        Ok(jpeg) => tracing::info!(path = %path.display(), bytes = jpeg.len(), "media.image.made"),
        Err(e) => tracing::warn!(path = %path.display(), reason = %e, "media.image.refused"),
    }
    if let Err(e) = entry.write(&made) {
        tracing::warn!(error = %format!("{e:#}"), "media.image.cache_error");
    }
    Ok(made.map_or_else(Shown::Note, |jpeg| Shown::Image(uri("image/jpeg", &jpeg))))
}

/// The image at `path` decoded (within the bounds) and re-encoded as a JPEG of at most
/// [`MAX_EDGE`] pixels; the error is the note for the model.
fn jpeg(path: &Path) -> Result<Vec<u8>, String> {
    // Reading the header may hold the file too (the JPEG decoder reads it whole, up to 32 MB).
    let _decoding = DECODING.lock().unwrap_or_else(PoisonError::into_inner);
    let unreadable = |e: &dyn std::fmt::Display| format!("could not read the image: {e}");
    let open = || {
        image::ImageReader::open(path)
            .and_then(|reader| reader.with_guessed_format())
            .map_err(|e| unreadable(&e))
    };
    // The canvas from the header: an image over the limits is never decoded.
    let (width, height) = open()?.into_dimensions().map_err(|e| unreadable(&e))?;
    let coefficients = progressive_coefficients(path).map_err(|e| unreadable(&e))?;
    check_canvas(width, height, coefficients)?;
    let mut reader = open()?;
    let mut limits = image::Limits::default();
    limits.max_alloc = Some(MAX_ALLOC);
    reader.limits(limits);
    let mut picture = reader.decode().map_err(|e| match e {
        image::ImageError::Limits(_) => too_large(width, height),
        e => format!("could not decode the image: {e}"),
    })?;
    if picture.width().max(picture.height()) > MAX_EDGE {
        // Area averaging: no intermediate image (a filtered resize keeps one 16 bytes a pixel).
        picture = picture.thumbnail(MAX_EDGE, MAX_EDGE);
    }
    let mut jpeg = Vec::new();
    let encoder = image::codecs::jpeg::JpegEncoder::new_with_quality(&mut jpeg, 85);
    picture
        .to_rgb8()
        .write_with_encoder(encoder)
        .map_err(|e| format!("could not encode the image: {e}"))?;
    Ok(jpeg)
}

/// Whether a canvas of `width` × `height` may be decoded, the decoder holding `extra` bytes
/// besides an 8-bit RGB picture; the error is the note for the model.
fn check_canvas(width: u32, height: u32, extra: u64) -> Result<(), String> {
    let pixels = u64::from(width) * u64::from(height);
    if pixels > MAX_PIXELS || pixels * 3 + extra > MAX_ALLOC {
        return Err(too_large(width, height));
    }
    Ok(())
}

/// The note for an image over the limits.
fn too_large(width: u32, height: u32) -> String {
    format!(
        "image {width}×{height} too large to show (the limits: {} megapixels, {} MiB decoded)",
        MAX_PIXELS / 1_000_000,
        MAX_ALLOC >> 20
    )
}

/// What a progressive JPEG's decoder holds besides the picture: every DCT coefficient (2 bytes)
/// of every component, in whole 8 × 8 blocks, until the last scan — for a 4:4:4 colour photo
/// twice the picture. 0 for anything else (a baseline JPEG is decoded block row by block row;
/// other formats are bounded by the decoder's reservation). Read from the markers before the
/// frame header.
fn progressive_coefficients(path: &Path) -> std::io::Result<u64> {
    use std::io::Read;
    let mut file = std::io::BufReader::new(std::fs::File::open(path)?);
    let mut bytes = |n: usize| -> std::io::Result<Vec<u8>> {
        let mut buf = vec![0; n];
        file.read_exact(&mut buf)?;
        Ok(buf)
    };
    if bytes(2)? != [0xFF, 0xD8] {
        return Ok(0);
    }
    loop {
        let marker = bytes(2)?;
        let code = match marker[..] {
            [0xFF, code] => code,
            _ => return Ok(0), // not a marker where one belongs: the decoder will say
        };
        if code == 0x01 || (0xD0..=0xD7).contains(&code) {
            continue; // markers without a segment
        }
        let length = bytes(2)?;
        let length = usize::from(u16::from_be_bytes([length[0], length[1]]));
        let segment = bytes(length.saturating_sub(2))?;
        match code {
            // Progressive frames (Huffman or arithmetic coded).
            0xC2 | 0xC6 | 0xCA | 0xCE => return Ok(coefficient_bytes(&segment)),
            // Any other frame, or the scan: not progressive.
            0xC0..=0xCF if !matches!(code, 0xC4 | 0xC8 | 0xCC) => return Ok(0),
            0xDA | 0xD9 => return Ok(0),
            _ => {}
        }
    }
}

/// The coefficients' bytes of a frame header (`segment`: precision, height, width, components,
/// then each component's id, sampling factors and table), as the decoder allocates them:
/// per component, its share of each MCU's 8 × 8 blocks, times the MCUs.
fn coefficient_bytes(segment: &[u8]) -> u64 {
    let [_, h0, h1, w0, w1, _, components @ ..] = segment else {
        return 0;
    };
    let height = u64::from(u16::from_be_bytes([*h0, *h1]));
    let width = u64::from(u16::from_be_bytes([*w0, *w1]));
    let sampling: Vec<(u64, u64)> = components
        .as_chunks::<3>()
        .0
        .iter()
        .map(|c| (u64::from(c[1] >> 4).max(1), u64::from(c[1] & 0x0F).max(1)))
        .collect();
    let h_max = sampling.iter().map(|s| s.0).max().unwrap_or(1);
    let v_max = sampling.iter().map(|s| s.1).max().unwrap_or(1);
    let mcus = width.div_ceil(8 * h_max) * height.div_ceil(8 * v_max);
    sampling.iter().map(|(h, v)| mcus * h * v * 64 * 2).sum()
}

/// A data URI of `bytes` of type `mime`.
fn uri(mime: &str, bytes: &[u8]) -> String {
    let encoded = base64::engine::general_purpose::STANDARD.encode(bytes);
    format!("data:{mime};base64,{encoded}")
}

/// One image's place in the cache: `<hash>.jpg` (the JPEG made of it) or `<hash>.note` (why
/// there is none), the hash of the file's path, length and modification time — a file changed
/// in place is a new entry.
struct Entry {
    dir: PathBuf,
    key: String,
}

impl Entry {
    fn of(dir: &Path, path: &Path, meta: &std::fs::Metadata) -> Self {
        let modified = meta
            .modified()
            .ok()
            .and_then(|t| t.duration_since(UNIX_EPOCH).ok())
            .unwrap_or_default();
        let identity = format!(
            "{}\n{}\n{}",
            path.to_string_lossy(),
            meta.len(),
            modified.as_nanos()
        );
        Self {
            dir: dir.to_path_buf(),
            key: crate::tape::md5_hex(&identity),
        }
    }

    fn path(&self, extension: &str) -> PathBuf {
        self.dir.join(format!("{}.{extension}", self.key))
    }

    /// What was made of the image before, if anything.
    fn read(&self) -> Option<Shown> {
        if let Ok(jpeg) = std::fs::read(self.path("jpg")) {
            return Some(Shown::Image(uri("image/jpeg", &jpeg)));
        }
        let note = std::fs::read_to_string(self.path("note")).ok()?;
        Some(Shown::Note(note))
    }

    /// Keeps `made` (replacing the file whole), then removes the oldest entries past
    /// [`MAX_CACHED`].
    fn write(&self, made: &Result<Vec<u8>, String>) -> anyhow::Result<()> {
        use std::io::Write;
        crate::storage::create_private_dir(&self.dir)?;
        let (bytes, extension) = match made {
            Ok(jpeg) => (jpeg.as_slice(), "jpg"),
            Err(note) => (note.as_bytes(), "note"),
        };
        let mut file = tempfile::NamedTempFile::new_in(&self.dir)?;
        file.write_all(bytes)?;
        file.as_file().sync_all()?;
        file.persist(self.path(extension))?;
        prune(&self.dir, MAX_CACHED)
    }
}

/// Removes the oldest files of `dir` (by modification time) beyond the newest `keep`.
fn prune(dir: &Path, keep: usize) -> anyhow::Result<()> {
    let mut files: Vec<(std::time::SystemTime, PathBuf)> = std::fs::read_dir(dir)?
        .flatten()
        .filter_map(|e| Some((e.metadata().ok()?.modified().ok()?, e.path())))
        .collect();
    if files.len() <= keep {
        return Ok(());
    }
    files.sort();
    for (_, path) in &files[..files.len() - keep] {
        let _ = std::fs::remove_file(path);
    }
    Ok(())
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
pub(crate) fn newest_images(messages: &[ChatMessage]) -> Option<(usize, Vec<String>)> {
    let (at, message) = messages
        .iter()
        .enumerate()
        .rev()
        .find(|(_, m)| m.role == Role::User && !m.images.is_empty())?;
    Some((
        at,
        message.images.iter().take(MAX_IMAGES).cloned().collect(),
    ))
}

/// Clears the `images` of every message; the message at `at` gets what is shown of its images:
/// a note with the path of each one not shown added to its text, then an image part per image
/// (plain text when no image is shown).
pub(crate) fn attach(messages: &mut [ChatMessage], at: Option<(usize, &[(String, Shown)])>) {
    for message in messages.iter_mut() {
        message.images.clear();
    }
    let Some((at, shown)) = at.filter(|(_, shown)| !shown.is_empty()) else {
        return;
    };
    let Some(message) = messages.get_mut(at) else {
        return;
    };
    let mut text = message.text();
    let mut parts = Vec::new();
    for (path, shown) in shown {
        match shown {
            Shown::Image(uri) => parts.push(Part::image_url(uri)),
            Shown::Note(note) => text.push_str(&format!("\n[Image {path} not shown: {note}]")),
        }
    }
    parts.insert(0, Part::Text(text));
    message.content = parts;
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The entries of the cache under `home`, by extension.
    fn cached(home: &Path, extension: &str) -> Vec<PathBuf> {
        std::fs::read_dir(home.join(CACHE_DIR))
            .map(|dir| dir.flatten().map(|e| e.path()).collect::<Vec<_>>())
            .unwrap_or_default()
            .into_iter()
            .filter(|p| p.extension().is_some_and(|e| e == extension))
            .collect()
    }

    #[test]
    fn a_large_image_is_scaled_down_to_a_jpeg_made_once() {
        let dir = tempfile::tempdir().unwrap();
        let home = dir.path().join("home");
        let path = dir.path().join("big.png");
        image::RgbImage::from_pixel(3000, 1000, image::Rgb([200, 10, 10]))
            .save(&path)
            .unwrap();
        let Shown::Image(made) = show(&home, &path) else {
            panic!("not shown");
        };
        let encoded = made.strip_prefix("data:image/jpeg;base64,").unwrap();
        let bytes = base64::engine::general_purpose::STANDARD
            .decode(encoded)
            .unwrap();
        let back = image::load_from_memory(&bytes).unwrap();
        assert_eq!((back.width(), back.height()), (MAX_EDGE, 523));
        // Kept: the next turn reads the JPEG back instead of decoding again.
        let kept = cached(&home, "jpg");
        assert_eq!(kept.len(), 1);
        assert_eq!(std::fs::read(&kept[0]).unwrap(), bytes);
        std::fs::write(&kept[0], b"made before").unwrap();
        assert_eq!(
            show(&home, &path),
            Shown::Image(uri("image/jpeg", b"made before"))
        );

        // Not an image: a note, kept too.
        let junk = dir.path().join("not.png");
        std::fs::write(&junk, b"not an image").unwrap();
        let Shown::Note(note) = show(&home, &junk) else {
            panic!("shown");
        };
        assert!(note.starts_with("could not read the image"), "{note}");
        assert_eq!(cached(&home, "note").len(), 1);
        // A GIF is sent as it is, and not kept.
        std::fs::write(dir.path().join("a.gif"), b"GIF89a\x01\x00\x01\x00").unwrap();
        let Shown::Image(gif) = show(&home, &dir.path().join("a.gif")) else {
            panic!("not shown");
        };
        assert!(gif.starts_with("data:image/gif;base64,R0lGODlh"), "{gif}");
        assert_eq!(std::fs::read_dir(home.join(CACHE_DIR)).unwrap().count(), 2);
        // A missing file is a note, and nothing is kept.
        assert!(matches!(
            show(&home, &dir.path().join("gone.png")),
            Shown::Note(_)
        ));
    }

    #[test]
    fn a_canvas_over_the_limits_is_not_decoded() {
        // Phone photos: 12 MP, 4:3 at 40 MP.
        assert_eq!(check_canvas(4032, 3024, 0), Ok(()));
        assert_eq!(check_canvas(7296, 5472, 0), Ok(()));
        // A 48 MP photo, a long strip, a decompression bomb (16000 × 10000).
        for (width, height) in [(8064, 6048), (400_000, 101), (16000, 10000)] {
            let note = check_canvas(width, height, 0).unwrap_err();
            assert!(
                note.starts_with(&format!("image {width}×{height} too large to show")),
                "{note}"
            );
        }
        assert!(check_canvas(u32::MAX, u32::MAX, 0).is_err(), "no overflow");
        // A progressive JPEG also holds its coefficients: 12 MP fits, 40 MP does not.
        let progressive = |width: u16, height: u16, sampling: u8| {
            let mut frame = vec![0xFF, 0xD8, 0xFF, 0xE0, 0, 4, b'J', b'F'];
            frame.extend([0xFF, 0xC2, 0, 17, 8]);
            frame.extend(height.to_be_bytes());
            frame.extend(width.to_be_bytes());
            frame.extend([3, 1, sampling, 0, 2, 0x11, 1, 3, 0x11, 1]);
            let dir = tempfile::tempdir().unwrap();
            std::fs::write(dir.path().join("p.jpg"), frame).unwrap();
            progressive_coefficients(&dir.path().join("p.jpg")).unwrap()
        };
        // 4:4:4: two bytes per sample, three samples a pixel; 4:2:0: half of that.
        assert_eq!(progressive(4032, 3024, 0x11), 4032 * 3024 * 6);
        assert_eq!(progressive(4032, 3024, 0x22), 4032 * 3024 * 3);
        assert_eq!(
            check_canvas(4032, 3024, progressive(4032, 3024, 0x11)),
            Ok(())
        );
        let coefficients = progressive(7296, 5472, 0x22);
        assert!(check_canvas(7296, 5472, coefficients).is_err());
        // A baseline JPEG, a PNG: nothing besides the picture.
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("b.jpg");
        image::RgbImage::new(16, 16).save(&path).unwrap();
        assert_eq!(progressive_coefficients(&path).unwrap(), 0);
        let path = dir.path().join("b.png");
        image::RgbImage::new(16, 16).save(&path).unwrap();
        assert_eq!(progressive_coefficients(&path).unwrap(), 0);
    }

    #[test]
    fn the_cache_keeps_the_newest_entries() {
        let dir = tempfile::tempdir().unwrap();
        for n in 0..5u64 {
            let path = dir.path().join(format!("{n}.jpg"));
            std::fs::write(&path, b"x").unwrap();
            let at = UNIX_EPOCH + std::time::Duration::from_secs(1_000 + n);
            std::fs::File::options()
                .write(true)
                .open(&path)
                .unwrap()
                .set_modified(at)
                .unwrap();
        }
        prune(dir.path(), 3).unwrap();
        let mut left: Vec<String> = std::fs::read_dir(dir.path())
            .unwrap()
            .flatten()
            .map(|e| e.file_name().to_string_lossy().into_owned())
            .collect();
        left.sort();
        assert_eq!(left, ["2.jpg", "3.jpg", "4.jpg"]);
    }

    #[test]
    fn the_newest_message_with_images_gets_the_parts_and_no_message_keeps_the_field() {
        let with_images = |text: &str, paths: &[&str]| ChatMessage {
            images: paths.iter().map(|p| p.to_string()).collect(),
            ..ChatMessage::user(text)
        };
        let mut messages = vec![
            with_images("old", &["a.jpg"]),
            ChatMessage::assistant("a cat", Vec::new()),
            with_images("and this?", &["b.jpg", "c.jpg"]),
            ChatMessage::user("hm"),
        ];
        let (at, paths) = newest_images(&messages).unwrap();
        assert_eq!(
            (at, paths),
            (2, vec!["b.jpg".to_owned(), "c.jpg".to_owned()])
        );
        let shown = [
            (
                "b.jpg".to_owned(),
                Shown::Image("data:image/jpeg;base64,AA".to_owned()),
            ),
            (
                "c.jpg".to_owned(),
                Shown::Note("image 9×9 too large".to_owned()),
            ),
        ];
        attach(&mut messages, Some((2, &shown)));
        assert_eq!(messages[0], ChatMessage::user("old"));
        assert_eq!(
            messages[2].content,
            [
                Part::Text("and this?\n[Image c.jpg not shown: image 9×9 too large]".into()),
                Part::Image {
                    mime: "image/jpeg".into(),
                    data: "AA".into()
                }
            ]
        );
        assert_eq!(newest_images(&messages), None);
        // No image shown: the text with the notes.
        let mut messages = vec![with_images("this?", &["c.jpg"])];
        attach(&mut messages, Some((0, &shown[1..])));
        assert_eq!(
            messages[0],
            ChatMessage::user("this?\n[Image c.jpg not shown: image 9×9 too large]")
        );
    }
}
