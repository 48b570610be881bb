//! The console's Markdown: what it renders, and that nothing a chat writes becomes markup of its
//! own — every tag the output holds is one of the few the renderer writes, with only its own
//! attributes, each double-quoted and escaped.

use super::*;

/// The tags the renderer writes (opening and closing), without attributes.
const PLAIN_TAGS: [&str; 30] = [
    "p",
    "/p",
    "br",
    "hr",
    "em",
    "/em",
    "strong",
    "/strong",
    "del",
    "/del",
    "code",
    "/code",
    "pre",
    "/pre",
    "blockquote",
    "/blockquote",
    "ul",
    "/ul",
    "ol",
    "/ol",
    "li",
    "/li",
    "table",
    "/table",
    "thead",
    "/thead",
    "tbody",
    "/tbody",
    "tr",
    "/tr",
];

/// Every tag of `html` is one the renderer writes, with only the attributes it writes.
fn assert_only_own_tags(html: &str) {
    let mut rest = html;
    while let Some(at) = rest.find('<') {
        let tag_and_more = &rest[at + 1..];
        let end = tag_and_more
            .find('>')
            .unwrap_or_else(|| panic!("an unclosed tag in {html}"));
        let tag = &tag_and_more[..end];
        let name = tag.split(' ').next().unwrap();
        let heading = |n: &str| {
            let n = n.trim_start_matches('/');
            n.len() == 2 && n.starts_with('h') && ('1'..='6').contains(&n.chars().nth(1).unwrap())
        };
        let own = PLAIN_TAGS.contains(&tag)
            || ["th", "/th", "td", "/td", "/a"].contains(&tag)
            || heading(tag)
            || is_link(tag)
            || (name == "ol" && tag.len() > 3 && attributes(&tag[3..]) == ["start"])
            || (name == "code" && attributes(&tag[5..]) == ["class"]);
        assert!(own, "a tag the renderer does not write: <{tag}> in {html}");
        rest = &tag_and_more[end + 1..];
    }
}

/// `<a href="…" [title="…"] rel="noopener noreferrer">` with a kept scheme.
fn is_link(tag: &str) -> bool {
    let Some(attrs) = tag.strip_prefix("a ") else {
        return false;
    };
    let names = attributes(attrs);
    let href = attrs.strip_prefix("href=\"").unwrap_or_default();
    let kept = ["http://", "https://", "mailto:"]
        .iter()
        .any(|s| href.to_ascii_lowercase().starts_with(s));
    kept && attrs.ends_with(" rel=\"noopener noreferrer\"")
        && (names == ["href", "rel"] || names == ["href", "title", "rel"])
}

/// The attribute names of `attrs` (`name="value" …`), checking each value is double-quoted
/// and holds no `"`, `<` or `>`.
fn attributes(attrs: &str) -> Vec<&str> {
    let mut names = Vec::new();
    let mut rest = attrs.trim_start();
    while !rest.is_empty() {
        let (name, after) = rest.split_once("=\"").expect("name=\"value\"");
        let (value, after) = after.split_once('"').expect("a closing quote");
        assert!(!value.contains(['<', '>']), "{value}");
        names.push(name);
        rest = after.trim_start();
    }
    names
}

fn html(text: &str) -> String {
    let (html, _) = to_html(text);
    assert_only_own_tags(&html);
    html
}

#[test]
fn markdown_becomes_html() {
    assert_eq!(
        html("say **bold** and *it* ~~gone~~"),
        "<p>say <strong>bold</strong> and <em>it</em> <del>gone</del></p>\n"
    );
    assert_eq!(
        html("one\ntwo"),
        "<p>one<br>\ntwo</p>\n",
        "a chat's line break"
    );
    let list = html("1. first\n2. second\n\n- a\n- b");
    assert!(
        list.contains("<ol>\n<li>first</li>") && list.contains("<ul>\n<li>a</li>"),
        "{list}"
    );
    assert!(html("3. third").contains("<ol start=\"3\">"));
    let table = html("| a | b |\n|---|---|\n| 1 | 2 |");
    assert!(
        table.contains("<thead><tr><th>a</th><th>b</th></tr></thead><tbody>")
            && table.contains("<tr><td>1</td><td>2</td></tr>"),
        "{table}"
    );
    assert!(html("# Title").contains("<h1>Title</h1>"));
    assert!(html("> quoted").contains("<blockquote>\n<p>quoted</p>"));
    assert!(html("- [x] done").contains("☑ done"));
}

#[test]
fn code_is_kept_and_escaped() {
    assert_eq!(
        html("```rust\nif a < b && c > d { x() }\n\n  indented\n```"),
        "<pre><code class=\"language-rust\">if a &lt; b &amp;&amp; c &gt; d { x() }\n\n  indented\n</code></pre>\n"
    );
    assert_eq!(
        html("run `<b>ls</b>` now"),
        "<p>run <code>&lt;b&gt;ls&lt;/b&gt;</code> now</p>\n"
    );
    // The language is a class name, nothing more.
    let fenced = html("```rust\"><script>alert(1)</script>\nx\n```");
    assert!(
        fenced.starts_with("<pre><code class=\"language-rustscriptalert1script\">"),
        "{fenced}"
    );
}

#[test]
fn raw_html_is_text() {
    let script = html("hi <script>alert(1)</script> there");
    assert_eq!(
        script,
        "<p>hi &lt;script&gt;alert(1)&lt;/script&gt; there</p>\n"
    );
    let img = html("<img src=x onerror=\"alert(1)\">");
    assert!(
        img.contains("&lt;img src=x onerror=\"alert(1)\"&gt;"),
        "{img}"
    );
    let block = html("<div onclick=\"alert(1)\">\n**x**\n</div>");
    assert!(!block.contains("<div"), "{block}");
    let inline = html("a <a href=\"javascript:alert(1)\">link</a> b");
    assert!(
        inline.contains("&lt;a href=\"javascript:alert(1)\"&gt;"),
        "{inline}"
    );
    let entity = html("&lt;script&gt; &#60;b&#62;");
    assert!(entity.contains("&lt;script&gt; &lt;b&gt;"), "{entity}");
}

#[test]
fn links_keep_only_web_and_mail_addresses() {
    assert_eq!(
        html("[docs](https://example.com/a?b=1&c=2)"),
        "<p><a href=\"https://example.com/a?b=1&amp;c=2\" rel=\"noopener noreferrer\">docs</a></p>\n"
    );
    assert!(html("<http://example.com>").contains(
        "<a href=\"http://example.com\" rel=\"noopener noreferrer\">http://example.com</a>"
    ));
    assert!(
        html("<ada@example.com>")
            .contains("<a href=\"mailto:ada@example.com\" rel=\"noopener noreferrer\">")
    );
    for refused in [
        "[click](javascript:alert(1))",
        "[click](JaVaScRiPt:alert(1))",
        "[click](  javascript:alert(1) )",
        "[click](java&#x73;cript:alert(1))",
        "[click](data:text/html,<script>alert(1)</script>)",
        "[click](vbscript:x)",
        "[click](//evil.example/)",
        "[click](/logout)",
        "[click][r]\n\n[r]: javascript:alert(1)",
    ] {
        let out = html(refused);
        assert!(!out.contains("<a"), "{refused}: {out}");
        assert!(
            out.starts_with("<p>click ("),
            "the text, then the address: {out}"
        );
    }
}

#[test]
fn link_addresses_and_titles_cannot_add_attributes() {
    let cases = [
        "[x](<https://a.example/\" onmouseover=\"alert(1)>)",
        "[x](https://a.example/ \"t\\\" onclick=\\\"alert(1)\")",
        "[x](https://a.example/ 'a\" onclick=\"alert(1)')",
        "[x](https://a.example/?q=&quot;onfocus=alert(1))",
        "[x](https://a.example/ (\"><script>alert(1)</script>))",
        "<https://a.example/\"onclick=\"alert(1)>",
    ];
    for case in cases {
        let out = html(case);
        assert!(!out.contains("\" on"), "{case}: {out}");
        assert!(!out.contains("<script"), "{case}: {out}");
    }
    let titled = html("[x](https://a.example/ \"a \\\"quoted\\\" <title>\")");
    assert!(
        titled.contains("title=\"a &quot;quoted&quot; &lt;title&gt;\" rel="),
        "{titled}"
    );
}

#[test]
fn images_are_links_never_loaded() {
    assert_eq!(
        html("![a cat](https://example.com/cat.png)"),
        "<p><a href=\"https://example.com/cat.png\" rel=\"noopener noreferrer\">a cat</a></p>\n"
    );
    let refused = html("![x](javascript:alert(1)) ![y](data:image/png;base64,AAAA)");
    assert!(
        !refused.contains("<a") && !refused.contains("<img"),
        "{refused}"
    );
}

#[test]
fn a_secret_hidden_by_markup_is_shown_plain() {
    let redactor = Redactor::new(["sk-test-secret", "sk_live_secret"]);
    let shown = |text: &str| render(text, &redactor).into_string();
    // Markup between its pieces: the rendering shows the secret whole.
    let split = shown("key: sk-test-**secret**");
    assert!(split.starts_with("<div class=\"text plain\">"), "{split}");
    assert!(!split.contains("<strong>"), "{split}");
    // Markup that would eat its characters (`_live_` as emphasis): the text as written.
    let eaten = shown("key: sk_live_secret");
    assert!(eaten.starts_with("<div class=\"text plain\">"), "{eaten}");
    // In a link's address.
    let linked = shown("[x](https://a.example/?k=sk-test-&#115;ecret)");
    assert!(linked.starts_with("<div class=\"text plain\">"), "{linked}");
    // Without a secret, Markdown.
    let fine = shown("**fine**");
    assert_eq!(
        fine,
        "<div class=\"text md\"><p><strong>fine</strong></p>\n</div>"
    );
    // The plain text is escaped.
    let plain = shown("<b>sk-test-secret</b>");
    assert!(
        plain.contains("&lt;b&gt;sk-test-secret&lt;/b&gt;"),
        "{plain}"
    );
}
