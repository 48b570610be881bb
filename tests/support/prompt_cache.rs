//! How much of a model request a provider's prompt cache can serve. Providers cache an exact
//! prefix of what the model reads — the tools, then the messages in order — so a request is
//! cut into those pieces, serialized, and compared with the request before it. Tokens are
//! estimated as bytes / 4 (the figure the issue and the peers' comparison use).

use serde_json::Value;

/// Bytes per estimated token.
pub const BYTES_PER_TOKEN: usize = 4;

/// A request in the order a provider caches it: the tools, then each message (serialized).
pub fn pieces(request: &Value) -> Vec<String> {
    let mut out = vec![request["tools"].to_string()];
    for message in request["messages"].as_array().into_iter().flatten() {
        out.push(message.to_string());
    }
    out
}

/// The bytes of `request`'s pieces.
pub fn size(request: &Value) -> usize {
    pieces(request).iter().map(String::len).sum()
}

/// The bytes at the start of `next` that repeat `prev` exactly (piece by piece, then the
/// common start of the first piece that differs).
pub fn shared_prefix(prev: &Value, next: &Value) -> usize {
    let (prev, next) = (pieces(prev), pieces(next));
    let mut shared = 0;
    for (a, b) in prev.iter().zip(&next) {
        if a == b {
            shared += a.len();
            continue;
        }
        shared += a.bytes().zip(b.bytes()).take_while(|(x, y)| x == y).count();
        break;
    }
    shared
}

/// Whether `next` begins with all of `prev`: its tools, system prompt and messages, byte for
/// byte. On failure, the first piece that differs.
pub fn extends(prev: &Value, next: &Value) -> Result<(), String> {
    let (prev, next) = (pieces(prev), pieces(next));
    for (i, a) in prev.iter().enumerate() {
        match next.get(i) {
            Some(b) if a == b => {}
            Some(b) => return Err(format!("piece {i} differs:\n  was {a}\n  now {b}")),
            None => return Err(format!("piece {i} is missing: {a}")),
        }
    }
    Ok(())
}

/// The figures of a conversation's requests, in tokens.
#[derive(Debug, Clone, PartialEq)]
pub struct Figures {
    pub requests: usize,
    /// The first request: all of it, its tools, its first (system) message.
    pub first: usize,
    pub first_tools: usize,
    pub first_system: usize,
    /// How much each request grew over the one before, on average.
    pub growth: f64,
    pub mean: f64,
    pub total: usize,
    /// Of each request after the first, the share that repeats the one before: the lowest
    /// and the mean.
    pub cacheable_min: f64,
    pub cacheable_mean: f64,
    /// The first request whole, plus what each later one does not share with the one before.
    pub uncached: usize,
}

pub fn figures(requests: &[Value]) -> Figures {
    let tokens = |bytes: usize| bytes / BYTES_PER_TOKEN;
    let sizes: Vec<usize> = requests.iter().map(size).collect();
    let first = requests.first().expect("a request");
    let first_pieces = pieces(first);
    let shares: Vec<f64> = requests
        .windows(2)
        .map(|w| shared_prefix(&w[0], &w[1]) as f64 / size(&w[1]) as f64)
        .collect();
    let uncached = sizes[0]
        + requests
            .windows(2)
            .map(|w| size(&w[1]) - shared_prefix(&w[0], &w[1]))
            .sum::<usize>();
    let n = requests.len();
    Figures {
        requests: n,
        first: tokens(sizes[0]),
        first_tools: tokens(first_pieces[0].len()),
        first_system: tokens(first_pieces.get(1).map_or(0, String::len)),
        growth: match n {
            1 => 0.0,
            _ => (tokens(sizes[n - 1]) as f64 - tokens(sizes[0]) as f64) / (n - 1) as f64,
        },
        mean: tokens(sizes.iter().sum()) as f64 / n as f64,
        total: tokens(sizes.iter().sum()),
        cacheable_min: shares.iter().copied().fold(1.0, f64::min),
        cacheable_mean: match shares.len() {
            0 => 1.0,
            len => shares.iter().sum::<f64>() / len as f64,
        },
        uncached: tokens(uncached),
    }
}

/// What the user wrote, out of a user message as the model is shown it: without the time line
/// a turn's prompt begins with and the notes after it (`<checkpoint>`, `<tool …>`, `<skill …>`).
pub fn said(content: &str) -> String {
    let text = match content.split_once('\n') {
        Some((first, rest)) if is_time(first) => rest,
        _ if is_time(content) => "",
        _ => content,
    };
    let end = ["\n\n<checkpoint>", "\n\n<tool name=", "\n\n<skill name="]
        .iter()
        .filter_map(|note| text.find(note))
        .min()
        .unwrap_or(text.len());
    text[..end].to_owned()
}

/// `[2026-11-25 12:45 +00:00, Wednesday]`.
fn is_time(line: &str) -> bool {
    let b = line.as_bytes();
    line.starts_with("[20")
        && line.ends_with(']')
        && b.get(5) == Some(&b'-')
        && b.get(14) == Some(&b':')
}
