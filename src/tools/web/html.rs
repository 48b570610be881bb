//! HTML → Markdown for `web.fetch`, with htmd: the main text of a page, links kept, furniture
//! (scripts, styles, navigation, menus, hidden elements) dropped.
//!
//! Parsing a hostile page must not take the process down: html5ever's tree builder is quadratic
//! in the nesting depth and htmd walks the tree recursively. So a page nested deeper than
//! [`MAX_DEPTH`] (estimated from its tags in one linear pass) is shown as plain text instead;
//! the conversion runs on its own thread with a large stack, and one that takes longer than
//! [`CONVERT_TIMEOUT`] is abandoned for the plain text too.

use std::sync::{Arc, Mutex};
use std::time::Duration;

use htmd::element_handler::{HandlerResult, Handlers};
use htmd::options::{BulletListMarker, Options};
use htmd::{Element, HtmlToMarkdown};
use reqwest::Url;

use super::excerpt;

/// Deepest element nesting converted to Markdown (real pages stay well below 100).
pub(crate) const MAX_DEPTH: usize = 512;
/// Longest a conversion may take before the plain text is shown instead.
pub(crate) const CONVERT_TIMEOUT: Duration = Duration::from_secs(10);
/// Below this many characters of filtered Markdown, the page is converted again without the
/// furniture filter (see [`convert_now`]).
const FILTER_SANITY_CHARS: usize = 200;
/// Stack of the conversion thread: htmd recurses once or twice per level (a few KB each).
const CONVERT_STACK_BYTES: usize = 64 * 1024 * 1024;

/// Elements whose content is page furniture or code, not text to read.
const SKIPPED_TAGS: &[&str] = &[
    "script", "style", "noscript", "template", "nav", "footer", "aside", "svg", "canvas", "iframe",
    "object", "embed", "form", "button", "select", "textarea", "dialog", "img", "picture", "video",
    "audio", "map",
];

/// Containers dropped when their attributes mark them as furniture ([`is_furniture`]).
const FILTERED_TAGS: &[&str] = &[
    "div", "section", "header", "ul", "ol", "li", "span", "p", "table", "label", "details",
];

/// Roles of page furniture (ARIA landmarks and widgets that are not the text).
const FURNITURE_ROLES: &[&str] = &[
    "navigation",
    "menu",
    "menubar",
    "search",
    "complementary",
    "contentinfo",
    "dialog",
    "alertdialog",
    "tooltip",
    "banner",
];

/// Words in a `class` or `id` (split on `-`, `_`, spaces) that mark furniture.
const FURNITURE_WORDS: &[&str] = &[
    "nav",
    "navbar",
    "navigation",
    "menu",
    "dropdown",
    "sidebar",
    "breadcrumb",
    "breadcrumbs",
    "cookie",
    "cookies",
    "consent",
    "popup",
    "modal",
    "share",
    "sharing",
    "social",
    "advert",
    "advertisement",
    "skip",
    "toolbar",
];

/// A page ready to show.
pub(crate) struct Page {
    pub title: Option<String>,
    pub markdown: String,
    /// Why the page is shown differently than usual (plain text instead of Markdown).
    pub note: Option<String>,
}

/// Converts `html` (links resolved against `base`) off the async workers; pages too deep or
/// too slow to convert become plain text with a note.
pub(crate) async fn convert(html: String, base: Url) -> Page {
    let html: Arc<str> = Arc::from(html);
    let (tx, rx) = tokio::sync::oneshot::channel();
    let input = html.clone();
    let spawned = std::thread::Builder::new()
        .name("bub-html".into())
        .stack_size(CONVERT_STACK_BYTES)
        .spawn(move || {
            let _ = tx.send(convert_now(&input, &base));
        });
    let failed = match spawned {
        Err(e) => format!("the HTML converter could not start ({e}): shown as plain text"),
        Ok(_) => match tokio::time::timeout(CONVERT_TIMEOUT, rx).await {
            Ok(Ok(page)) => return page,
            Ok(Err(_)) => "the HTML conversion failed: shown as plain text".to_owned(),
            // The thread finishes on its own; its result is dropped.
            Err(_) => format!(
                "converting the page took longer than {} s: shown as plain text",
                CONVERT_TIMEOUT.as_secs()
            ),
        },
    };
    plain_page(html, failed).await
}

/// The conversion itself (blocking): Markdown, or plain text for a page nested too deep.
fn convert_now(html: &str, base: &Url) -> Page {
    if nesting_exceeds(html, MAX_DEPTH) {
        return Page {
            title: None,
            markdown: plain_text(html),
            note: Some(format!(
                "the page nests elements more than {MAX_DEPTH} deep: shown as plain text"
            )),
        };
    }
    let page = html_to_markdown(html, base, true);
    if page.markdown.chars().count() >= FILTER_SANITY_CHARS {
        return page;
    }
    // The furniture heuristics may have dropped the text itself (a layout wrapper whose class
    // says "sidebar"): with (almost) nothing left, the unfiltered page wins if it says more.
    let unfiltered = html_to_markdown(html, base, false);
    if unfiltered.markdown.len() > page.markdown.len() {
        unfiltered
    } else {
        page
    }
}

async fn plain_page(html: Arc<str>, note: String) -> Page {
    let markdown = tokio::task::spawn_blocking(move || plain_text(&html))
        .await
        .unwrap_or_default();
    Page {
        title: None,
        markdown,
        note: Some(note),
    }
}

fn attr<'a>(element: &'a Element, name: &str) -> Option<&'a str> {
    element
        .attrs
        .iter()
        .find(|a| &*a.name.local == name)
        .map(|a| &*a.value)
}

/// HTML → Markdown: the `<main>` element (or `role="main"`, or the only `<article>`) when there
/// is one, else the whole body; furniture ([`SKIPPED_TAGS`]) dropped; links resolved against
/// `base` and kept as `[text](url)`; the `<title>` returned separately.
fn html_to_markdown(html: &str, base: &Url, filter: bool) -> Page {
    #[derive(Default)]
    struct Found {
        title: Option<String>,
        main: Option<String>,
        articles: Vec<String>,
    }
    let found = Arc::new(Mutex::new(Found::default()));
    let (f_title, f_main, f_article) = (found.clone(), found.clone(), found.clone());
    let base = base.clone();
    let options = Options {
        bullet_list_marker: BulletListMarker::Dash,
        ul_bullet_spacing: 1,
        ol_number_spacing: 1,
        ..Options::default()
    };
    let converter = HtmlToMarkdown::builder()
        .options(options)
        .skip_tags(SKIPPED_TAGS.to_vec())
        .add_handler(
            FILTERED_TAGS.to_vec(),
            move |h: &dyn Handlers, el: Element| {
                if filter && is_furniture(&el) {
                    None
                } else {
                    h.fallback(el)
                }
            },
        )
        .add_handler(vec!["title"], move |h: &dyn Handlers, el: Element| {
            let text = h.walk_children(el.node).content;
            let mut found = f_title.lock().unwrap_or_else(|p| p.into_inner());
            if found.title.is_none() {
                found.title = Some(excerpt(&text, 300));
            }
            None
        })
        .add_handler(
            vec!["main", "div", "section"],
            move |h: &dyn Handlers, el: Element| {
                let is_main = el.tag == "main" || attr(&el, "role") == Some("main");
                let result = h.fallback(el)?;
                if is_main {
                    let mut found = f_main.lock().unwrap_or_else(|p| p.into_inner());
                    // Nested mains: the outer one (finished last) wins.
                    found.main = Some(result.content.clone());
                }
                Some(result)
            },
        )
        .add_handler(vec!["article"], move |h: &dyn Handlers, el: Element| {
            let result = h.fallback(el)?;
            let mut found = f_article.lock().unwrap_or_else(|p| p.into_inner());
            found.articles.push(result.content.clone());
            Some(result)
        })
        .add_handler(vec!["a"], move |h: &dyn Handlers, el: Element| {
            Some(link(h, &el, &base, filter))
        })
        .build();
    let whole = converter.convert(html).unwrap_or_default();
    let mut found = std::mem::take(&mut *found.lock().unwrap_or_else(|p| p.into_inner()));
    let body = match (found.main.take(), found.articles.len()) {
        (Some(main), _) if !main.trim().is_empty() => main,
        (_, 1) if !found.articles[0].trim().is_empty() => found.articles.remove(0),
        _ => whole,
    };
    Page {
        title: found.title,
        markdown: tidy(&body),
        note: None,
    }
}

/// Whether an element is hidden or page furniture by its attributes: `hidden`,
/// `aria-hidden="true"`, `display: none`, a furniture role, or a furniture word in its class or
/// id.
fn is_furniture(el: &Element) -> bool {
    el.attrs.iter().any(|a| {
        let value = a.value.trim().to_ascii_lowercase();
        match &*a.name.local {
            "hidden" => true,
            "aria-hidden" => value == "true",
            "style" => value.replace(' ', "").contains("display:none"),
            "role" => FURNITURE_ROLES.contains(&value.as_str()),
            "class" | "id" => value
                .split(|c: char| c.is_whitespace() || c == '-' || c == '_')
                .any(|word| FURNITURE_WORDS.contains(&word)),
            _ => false,
        }
    })
}

/// `[text](absolute url)` for an http(s)/mailto link with text; just the text otherwise
/// (`javascript:` links, anchors without `href`, links around nothing readable).
fn link(h: &dyn Handlers, el: &Element, base: &Url, filter: bool) -> HandlerResult {
    if filter && is_furniture(el) {
        return String::new().into();
    }
    let content = h.walk_children(el.node).content;
    let text = content.split_whitespace().collect::<Vec<_>>().join(" ");
    let target = attr(el, "href")
        .map(str::trim)
        .filter(|href| !href.is_empty() && !href.starts_with('#'))
        .and_then(|href| base.join(href).ok())
        .filter(|u| matches!(u.scheme(), "http" | "https" | "mailto"));
    match target {
        Some(url) if !text.is_empty() => {
            let url = url.as_str().replace('(', "%28").replace(')', "%29");
            format!("[{text}]({url})").into()
        }
        _ => text.into(),
    }
}

/// Trailing spaces dropped, runs of blank lines collapsed to one, table rows without their
/// column padding (htmd pads every cell to the widest one); fenced code kept verbatim.
fn tidy(markdown: &str) -> String {
    let mut out = String::with_capacity(markdown.len());
    let mut blank = 0;
    let mut fenced = false;
    for line in markdown.lines() {
        let trimmed = line.trim_start();
        if trimmed.starts_with("```") || trimmed.starts_with("~~~") {
            fenced = !fenced;
        } else if fenced {
            out.push_str(line);
            out.push('\n');
            continue;
        }
        let line = line.trim_end();
        if second_blank(&mut blank, line) {
            continue;
        }
        if trimmed.starts_with('|') {
            out.push_str(&table_row(line));
        } else {
            out.push_str(line);
        }
        out.push('\n');
    }
    out.trim().to_owned()
}

/// Counts `line` into the run of `blank` lines before it: whether it is a blank line after
/// another one (dropped, so at most one blank line stands in a row).
fn second_blank(blank: &mut usize, line: &str) -> bool {
    *blank = if line.is_empty() { *blank + 1 } else { 0 };
    *blank > 1
}

/// A Markdown table row with whitespace runs collapsed and `---…` separators shortened.
fn table_row(line: &str) -> String {
    let mut out = String::with_capacity(line.len().min(256));
    let mut dashes = 0;
    let mut space = false;
    for c in line.trim().chars() {
        match c {
            '-' => {
                dashes += 1;
                if dashes <= 3 {
                    out.push('-');
                }
                space = false;
            }
            c if c.is_whitespace() => {
                dashes = 0;
                if !space {
                    out.push(' ');
                }
                space = true;
            }
            c => {
                dashes = 0;
                space = false;
                out.push(c);
            }
        }
    }
    out
}

/// Elements without an end tag, or closed implicitly by their siblings: not counted as nesting.
const NOT_NESTING: &[&str] = &[
    "area", "base", "br", "col", "embed", "hr", "img", "input", "link", "meta", "param", "source",
    "track", "wbr", "keygen", "frame", "basefont", "bgsound", "image", "html", "head", "body", "p",
    "li", "dt", "dd", "td", "th", "tr", "tbody", "thead", "tfoot", "option", "optgroup", "rb",
    "rt", "rp", "rtc", "colgroup", "caption",
];

/// Elements whose content is text up to their end tag.
const RAW_TEXT: &[&str] = &[
    "script", "style", "textarea", "title", "xmp", "iframe", "noembed", "noframes",
];

/// Whether the elements of `html` nest deeper than `limit`, estimated in one pass over the
/// tags: start tags push, end tags pop to their match (stray ones are ignored), void and
/// implicitly closed elements don't count, `<a>` closes an open `<a>`, and `/>` closes only
/// inside `<svg>`/`<math>` (as in the HTML parser).
fn nesting_exceeds(html: &str, limit: usize) -> bool {
    let lower = html.to_ascii_lowercase();
    let b = lower.as_bytes();
    let mut stack: Vec<&str> = Vec::new();
    let mut i = 0;
    while let Some(found) = lower[i..].find('<') {
        i += found + 1;
        let rest = &lower[i..];
        if rest.starts_with("!--") {
            i += rest.find("-->").map_or(rest.len(), |e| e + 3);
            continue;
        }
        let close = rest.starts_with('/');
        let start = if close { i + 1 } else { i };
        let name_len = lower[start..]
            .bytes()
            .take_while(|c| c.is_ascii_alphanumeric() || *c == b'-' || *c == b':')
            .count();
        if name_len == 0 || !b[start].is_ascii_alphabetic() {
            continue;
        }
        let name = &lower[start..start + name_len];
        let Some(end) = lower[start..].find('>').map(|e| start + e) else {
            break;
        };
        i = end + 1;
        if close {
            if let Some(pos) = stack.iter().rposition(|open| *open == name) {
                stack.truncate(pos);
            }
            continue;
        }
        if RAW_TEXT.contains(&name) {
            let closing = format!("</{name}");
            i += lower[i..].find(&closing).unwrap_or(lower.len() - i);
            continue;
        }
        if NOT_NESTING.contains(&name) {
            continue;
        }
        if b[end - 1] == b'/' && stack.iter().any(|open| matches!(*open, "svg" | "math")) {
            continue;
        }
        if name == "a"
            && let Some(pos) = stack.iter().rposition(|open| *open == "a")
        {
            stack.truncate(pos);
        }
        stack.push(name);
        if stack.len() > limit {
            return true;
        }
    }
    false
}

/// The text of `html` without tags, comments, scripts and styles; common entities decoded,
/// whitespace collapsed, at most one blank line in a row. Linear, for pages htmd can't take.
fn plain_text(html: &str) -> String {
    let lower = html.to_ascii_lowercase();
    let mut text = String::with_capacity(html.len() / 2);
    let mut i = 0;
    while i < html.len() {
        let Some(found) = lower[i..].find('<') else {
            text.push_str(&html[i..]);
            break;
        };
        text.push_str(&html[i..i + found]);
        i += found;
        let rest = &lower[i..];
        let skip = if rest.starts_with("<!--") {
            rest.find("-->").map(|e| e + 3)
        } else if let Some(raw) = ["script", "style", "noscript", "template"]
            .into_iter()
            .find(|t| rest[1..].starts_with(t))
        {
            rest.find(&format!("</{raw}"))
                .and_then(|e| rest[e..].find('>').map(|g| e + g + 1))
        } else {
            rest.find('>').map(|e| e + 1)
        };
        let tag = &rest[..skip.unwrap_or(rest.len())];
        let block = [
            "<p", "<div", "<br", "<li", "<h", "<tr", "</p", "</div", "</li", "</h", "</tr",
        ]
        .iter()
        .any(|t| tag.starts_with(t));
        text.push(if block { '\n' } else { ' ' });
        i += skip.unwrap_or(rest.len());
    }
    let text = text
        .replace("&nbsp;", " ")
        .replace("&lt;", "<")
        .replace("&gt;", ">")
        .replace("&quot;", "\"")
        .replace("&#39;", "'")
        .replace("&apos;", "'")
        .replace("&amp;", "&");
    let mut out = String::with_capacity(text.len());
    let mut blank = 0;
    for line in text.lines() {
        let line = line.split_whitespace().collect::<Vec<_>>().join(" ");
        if second_blank(&mut blank, &line) {
            continue;
        }
        out.push_str(&line);
        out.push('\n');
    }
    out.trim().to_owned()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn html_main_text_links_and_title() {
        let base = Url::parse("http://example.test/dir/page").unwrap();
        let html = r#"<html><head><title>The &amp; Title</title><style>p{}</style></head>
            <body><nav><a href="/home">Home</a></nav>
            <main><h1>Heading</h1><p>Some <b>bold</b> text and
            <a href="other?x=1">a link</a>.</p><script>var secret = 1;</script></main>
            <footer>Copyright</footer></body></html>"#;
        let page = convert_now(html, &base);
        assert_eq!(page.title.as_deref(), Some("The & Title"));
        assert!(page.markdown.contains("# Heading"), "{}", page.markdown);
        assert!(
            page.markdown
                .contains("[a link](http://example.test/dir/other?x=1)"),
            "{}",
            page.markdown
        );
        assert!(page.markdown.contains("**bold**"), "{}", page.markdown);
        for absent in ["secret", "Home", "Copyright", "p{}"] {
            assert!(
                !page.markdown.contains(absent),
                "{absent}: {}",
                page.markdown
            );
        }
    }

    #[test]
    fn text_dropped_as_furniture_comes_back() {
        let base = Url::parse("http://example.test/").unwrap();
        let html = format!(
            "<body><div class='layout has-sidebar'><p>{}</p></div>\
             <div class='sidebar'>links</div></body>",
            "Real text. ".repeat(30)
        );
        let page = convert_now(&html, &base);
        assert!(
            page.markdown.starts_with("Real text. Real text."),
            "{}",
            page.markdown
        );
        // With enough text left, furniture stays out.
        let html = format!(
            "<body><p>{}</p><div class='sidebar'>links</div></body>",
            "Real text. ".repeat(30)
        );
        let page = convert_now(&html, &base);
        assert!(!page.markdown.contains("links"), "{}", page.markdown);
    }

    #[test]
    fn nesting_estimate() {
        let deep = |open: &str, n: usize| format!("<body>{}x</body>", open.repeat(n));
        assert!(!nesting_exceeds(&deep("<div>", 100), 512));
        assert!(nesting_exceeds(&deep("<div>", 600), 512));
        assert!(nesting_exceeds(&deep("<span>", 600), 512));
        assert!(nesting_exceeds(&deep("<div/>", 600), 512));
        // Closed, void, implicitly closed and self-closed SVG elements don't nest.
        assert!(!nesting_exceeds(&"<div>x</div>".repeat(1000), 512));
        assert!(!nesting_exceeds(
            &deep("<p>x<li>y<br><img src=a>", 1000),
            512
        ));
        assert!(!nesting_exceeds(&deep("<a href=x>link", 1000), 512));
        let svg = format!("<svg>{}</svg>", "<path d='M0 0'/>".repeat(1000));
        assert!(!nesting_exceeds(&svg, 512));
        // Stray end tags don't hide depth; scripts and comments are not markup.
        assert!(nesting_exceeds(&deep("<div></span>", 600), 512));
        assert!(!nesting_exceeds(
            &format!("<script>{}</script>", "<div>".repeat(600)),
            512
        ));
        assert!(!nesting_exceeds(
            &format!("<!--{}-->", "<div>".repeat(600)),
            512
        ));
    }

    #[test]
    fn plain_text_fallback() {
        let html = "<html><head><style>p{color:red}</style><script>let x = '<p>';</script></head>\
                    <body><h1>Title</h1><p>One &amp; <b>two</b></p><!-- hidden -->\
                    <div>three&nbsp;four</div></body></html>";
        assert_eq!(plain_text(html), "Title\n\nOne & two\n\nthree four");
    }

    #[tokio::test]
    async fn deep_pages_become_plain_text_quickly() {
        let base = Url::parse("http://example.test/").unwrap();
        for open in ["<div>", "<span>", "<ul><li>"] {
            let html = format!("<body>{}deep text</body>", open.repeat(200_000));
            let started = std::time::Instant::now();
            let page = convert(html, base.clone()).await;
            assert!(started.elapsed() < Duration::from_secs(5), "{open}");
            assert_eq!(page.markdown, "deep text");
            assert!(page.note.unwrap().contains("more than 512 deep"));
        }
        // Moderately deep pages still convert.
        let html = format!("<body>{}<p>text</p></body>", "<div>".repeat(400));
        let page = convert(html, base).await;
        assert_eq!((page.markdown.as_str(), page.note), ("text", None));
    }
}
