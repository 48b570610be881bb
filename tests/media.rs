//! Media in and out. Telegram through the real `bub message` against the fakes: photos saved
//! in the workspace and shown to a vision model (and to a model that refuses images, as a
//! path), voice transcribed (and not, when the call fails), files over the cap described, not
//! kept. Files back through `message.send file=` and `bub send --file`. Discord at the adapter:
//! attachments downloaded from the CDN only, files uploaded as attachments.

// Its Discord tests need the `discord` feature; what they share with the others is then unused.
#![cfg_attr(not(feature = "discord"), allow(unused_imports))]

use crate::support;

use std::path::{Path, PathBuf};
use std::sync::Arc;

use bub::access::Access;
#[cfg(feature = "discord")]
use bub::channels::discord::Discord;
use bub::channels::{Attachment, AttachmentKind, Channel, Outbound};
use bub::config::Settings;
use support::bub_env::{Env, WAIT, stderr, stdout, texts};
use support::fake_openai::image_urls;
use support::fake_telegram::private_text;
use support::wait::{bounded, wait_until};

/// A PNG of `width`×`height` pixels.
pub(crate) fn png(width: u32, height: u32) -> Vec<u8> {
    let mut bytes = Vec::new();
    image::RgbImage::from_pixel(width, height, image::Rgb([10, 200, 30]))
        .write_to(
            &mut std::io::Cursor::new(&mut bytes),
            image::ImageFormat::Png,
        )
        .unwrap();
    bytes
}

/// The files saved under the workspace's `chats/telegram-42/`, by name.
fn saved(env: &Env) -> Vec<(String, Vec<u8>)> {
    let dir = env.workspace.join("chats/telegram-42");
    let mut files: Vec<(String, Vec<u8>)> = std::fs::read_dir(&dir)
        .map(|entries| {
            entries
                .flatten()
                .map(|e| {
                    let name = e.file_name().to_string_lossy().into_owned();
                    (name, std::fs::read(e.path()).unwrap())
                })
                .collect()
        })
        .unwrap_or_default();
    files.sort();
    files
}

/// The user message of the model's request `n` as one text (its text parts joined).
fn user_text(env: &Env, n: usize) -> String {
    support::fake_openai::last_user_text(&env.model.requests()[n])
}

#[tokio::test(flavor = "multi_thread")]
async fn a_photo_is_saved_and_shown_to_a_vision_model_or_named_to_one_that_refuses_images() {
    let mut env = Env::new().await;
    env.set("BUB_VISION", "on");
    let picture = png(2000, 1000);
    env.telegram.add_file("ph1", picture.clone());
    env.model.push_text("A green rectangle.");
    let daemon = env.start();
    let size = picture.len() as u64;
    let photo = private_text(42, 42, "").photo_file("ph1", size, Some("what is this?"));
    env.telegram.push_message_update(photo);
    let sent = env.telegram.wait_for_calls("sendMessage", 1, WAIT).await;
    assert_eq!(texts(&sent), ["A green rectangle."]);

    let files = saved(&env);
    assert_eq!(files.len(), 1);
    assert!(files[0].0.ends_with("-photo.jpg"), "{:?}", files[0].0);
    assert_eq!(files[0].1, picture, "the largest size, byte for byte");
    let request = &env.model.requests()[0];
    let urls = image_urls(request);
    assert_eq!(urls.len(), 1);
    let jpeg = urls[0].strip_prefix("data:image/jpeg;base64,").unwrap();
    use base64::Engine;
    let jpeg = base64::engine::general_purpose::STANDARD
        .decode(jpeg)
        .unwrap();
    let shown = image::load_from_memory(&jpeg).unwrap();
    assert_eq!((shown.width(), shown.height()), (1568, 784), "scaled down");
    // Made once: the JPEG is kept for the chat's later turns.
    let kept: Vec<Vec<u8>> = std::fs::read_dir(env.home.join("cache/images"))
        .unwrap()
        .flatten()
        .map(|e| std::fs::read(e.path()).unwrap())
        .collect();
    assert_eq!(kept, std::slice::from_ref(&jpeg));
    let prompt = user_text(&env, 0);
    assert!(
        prompt.contains(&format!("\"saved\":\"chats/telegram-42/{}\"", files[0].0)),
        "{prompt}"
    );
    assert!(prompt.contains("what is this?"));
    // The `images` field of the tape never reaches the provider.
    assert!(!request.to_string().contains("\"images\""));

    // A model that refuses images: the same request again with the path, then never again.
    env.model.reject_images(true);
    env.telegram.add_file("ph2", png(10, 10));
    env.model.push_text("I cannot see it, but it is saved.");
    let photo = private_text(42, 42, "").photo_file("ph2", 300, Some("and this?"));
    env.telegram.push_message_update(photo);
    let sent = env.telegram.wait_for_calls("sendMessage", 2, WAIT).await;
    assert_eq!(texts(&sent)[1], "I cannot see it, but it is saved.");
    let requests = env.model.requests();
    assert_eq!(requests.len(), 3, "one refused, one answered");
    assert_eq!(image_urls(&requests[1]).len(), 1);
    assert!(image_urls(&requests[2]).is_empty());
    let retried = user_text(&env, 2);
    assert!(
        retried.contains("[The model cannot look at images; they are saved at: chats/telegram-42/"),
        "{retried}"
    );
    assert!(env.tape_text().contains("\"media.images_refused\""));
    env.model.push_text("Still no images.");
    env.telegram
        .push_message_update(private_text(42, 42, "what colour was it?"));
    env.telegram.wait_for_calls("sendMessage", 3, WAIT).await;
    assert_eq!(env.model.request_count(), 4);
    assert!(image_urls(&env.model.requests()[3]).is_empty());
    assert!(daemon.stop().await.success());
}

/// The peak resident set (`VmHWM`) of process `pid`, in MB.
fn peak_rss_mb(pid: u32) -> f64 {
    support::bench::status_mb(pid, "VmHWM")
}

/// Issue 19, item 6: a 465 KB PNG declaring 16000 × 10000 pixels (480 MB decoded) sent from
/// three chats at once is described, not decoded — the daemon's peak stays far below what one
/// decode would take — and a later turn of the chat reads the verdict back instead of looking
/// at the file again.
#[tokio::test(flavor = "multi_thread")]
async fn an_image_bomb_is_described_not_decoded_and_judged_once() {
    let bomb = support::images::png_bomb(16000, 10000);
    assert!(bomb.len() < 500_000, "{} bytes", bomb.len());
    let small = image::load_from_memory(&support::images::png_bomb(300, 200)).unwrap();
    assert_eq!((small.width(), small.height()), (300, 200), "a valid PNG");
    let mut env = Env::new().await;
    env.set("BUB_VISION", "on");
    env.telegram.add_file("bomb", bomb.clone());
    let chats = [42, 43, 44];
    for _ in chats {
        env.model.push_text("I cannot see that one.");
    }
    let daemon = env.start();
    let pid = daemon.child.id().unwrap();
    for chat in chats {
        let photo =
            private_text(chat, chat, "").photo_file("bomb", bomb.len() as u64, Some("look"));
        env.telegram.push_message_update(photo);
    }
    // The peak (`VmHWM`) is watched all along: a decode would pass 150 MB within seconds.
    let answered = || {
        let peak = peak_rss_mb(pid);
        assert!(peak > 0.0 && peak < 150.0, "peak RSS {peak:.0} MB");
        env.telegram.calls_of("sendMessage").len() == 3
    };
    wait_until(WAIT, "three answers", answered).await;

    let requests = env.model.requests();
    assert_eq!(requests.len(), 3);
    for request in &requests {
        assert!(image_urls(request).is_empty(), "no image part");
        let text = support::fake_openai::last_user_text(request);
        assert!(
            text.contains("-photo.jpg not shown: image 16000×10000 too large to show"),
            "{text}"
        );
    }
    let judged = |log: &str| log.matches("media.image.refused").count();
    assert_eq!(judged(&daemon.log()), 3, "{}", daemon.log());
    let verdicts = || {
        std::fs::read_dir(env.home.join("cache/images"))
            .unwrap()
            .flatten()
            .map(|e| std::fs::read_to_string(e.path()).unwrap())
            .collect::<Vec<_>>()
    };
    assert_eq!(verdicts().len(), 3);
    assert!(verdicts().iter().all(|v| v.contains("16000×10000")));

    // The next turn in the chat shows the note again, read back from the cache.
    env.model.push_text("Still too large.");
    env.telegram
        .push_message_update(private_text(42, 42, "and now?"));
    env.telegram.wait_for_calls("sendMessage", 4, WAIT).await;
    let request = &env.model.requests()[3];
    assert!(image_urls(request).is_empty());
    assert!(
        request
            .to_string()
            .contains("not shown: image 16000×10000 too large to show"),
        "{request}"
    );
    let (status, log) = daemon.stop_with_log().await;
    assert!(status.success());
    assert_eq!(judged(&log), 3, "judged once per image: {log}");
    assert_eq!(verdicts().len(), 3);
}

#[tokio::test(flavor = "multi_thread")]
async fn voice_is_transcribed_into_the_prompt_and_a_failed_transcription_names_the_file() {
    let mut env = Env::new().await;
    env.set("BUB_TRANSCRIBE_MODEL", "whisper-1");
    let voice = vec![7u8; 3000];
    env.telegram.add_file("v1", voice.clone());
    env.model.push_transcript("buy oat milk");
    env.model.push_text("Added oat milk.");
    let daemon = env.start();
    let note = private_text(42, 42, "").voice_file("v1", 3, voice.len() as u64);
    env.telegram.push_message_update(note);
    env.telegram.wait_for_calls("sendMessage", 1, WAIT).await;
    let calls = env.model.transcriptions();
    assert_eq!(calls.len(), 1);
    assert_eq!(calls[0].model, "whisper-1");
    assert_eq!(calls[0].size, voice.len());
    assert!(
        calls[0].filename.ends_with("-voice.ogg"),
        "{}",
        calls[0].filename
    );
    assert_eq!(
        calls[0].authorization.as_deref(),
        Some("Bearer sk-test-secret"),
        "the model's key when no transcription key is set"
    );
    let prompt = user_text(&env, 0);
    assert!(
        prompt.contains("[Voice message: 3s]\\n[Voice message transcript (voice): buy oat milk]"),
        "{prompt}"
    );
    assert_eq!(
        prompt.matches("buy oat milk").count(),
        1,
        "said once: {prompt}"
    );
    assert!(!prompt.contains("file_id"), "no platform handles: {prompt}");
    assert_eq!(saved(&env)[0].1, voice);

    // The transcription fails: the turn still runs, and the prompt says why and where.
    env.telegram.add_file("v2", vec![1u8; 100]);
    let body = r#"{"error":{"message":"audio too short"}}"#.to_owned();
    env.model.push_transcription_error(400, body);
    env.model.push_text("I could not hear it.");
    let note = private_text(42, 42, "").voice_file("v2", 1, 100);
    env.telegram.push_message_update(note);
    let sent = env.telegram.wait_for_calls("sendMessage", 2, WAIT).await;
    assert_eq!(texts(&sent)[1], "I could not hear it.");
    let prompt = user_text(&env, 1);
    assert!(
        prompt
            .contains("\"note\":\"not transcribed: provider returned HTTP 400: audio too short\""),
        "{prompt}"
    );
    assert!(prompt.contains("\"saved\":\"chats/telegram-42/"));
    assert!(daemon.stop().await.success());
}

/// Transcription is retried by the one policy (`net::retry`): a 503 once, then the transcript;
/// the file is sent whole again.
#[tokio::test(flavor = "multi_thread")]
async fn a_transcription_that_fails_once_with_a_503_is_retried() {
    let mut env = Env::new().await;
    env.set("BUB_TRANSCRIBE_MODEL", "whisper-1");
    let voice = vec![7u8; 300];
    env.telegram.add_file("v1", voice.clone());
    let busy = r#"{"error":{"message":"overloaded"}}"#.to_owned();
    env.model.push_transcription_error(503, busy);
    env.model.push_transcript("call mum");
    env.model.push_text("Noted.");
    let daemon = env.start();
    let note = private_text(42, 42, "").voice_file("v1", 1, voice.len() as u64);
    env.telegram.push_message_update(note);
    env.telegram.wait_for_calls("sendMessage", 1, WAIT).await;
    let calls = env.model.transcriptions();
    assert_eq!(calls.len(), 2, "one failed attempt, one retry");
    assert_eq!(calls[1].size, voice.len(), "the whole file again");
    let prompt = user_text(&env, 0);
    assert!(
        prompt.contains("[Voice message transcript (voice): call mum]"),
        "{prompt}"
    );
    assert!(daemon.stop().await.success());
}

/// Transcription goes out over the model client's HTTP settings: a proxy from the environment
/// does not capture calls to a server on this machine (it did when each call built a default
/// client: the proxy here refuses connections, so the voice message was not transcribed).
#[tokio::test(flavor = "multi_thread")]
async fn a_proxy_from_the_environment_does_not_capture_a_local_transcription_server() {
    let mut env = Env::new().await;
    env.set("BUB_TRANSCRIBE_MODEL", "whisper-1");
    let closed = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let proxy = format!("http://{}", closed.local_addr().unwrap());
    drop(closed);
    env.set("HTTP_PROXY", &proxy);
    env.set("HTTPS_PROXY", &proxy);
    env.set("NO_PROXY", "");
    let voice = vec![7u8; 300];
    env.telegram.add_file("v1", voice.clone());
    env.model.push_transcript("call mum");
    env.model.push_text("Noted.");
    let daemon = env.start();
    let note = private_text(42, 42, "").voice_file("v1", 1, voice.len() as u64);
    env.telegram.push_message_update(note);
    env.telegram.wait_for_calls("sendMessage", 1, WAIT).await;
    assert_eq!(env.model.transcriptions().len(), 1);
    let prompt = user_text(&env, 0);
    assert!(
        prompt.contains("[Voice message transcript (voice): call mum]"),
        "{prompt}"
    );
    assert!(daemon.stop().await.success());
}

#[tokio::test(flavor = "multi_thread")]
async fn files_over_the_cap_are_described_not_kept_even_when_their_size_was_not_told() {
    let mut env = Env::new().await;
    env.set("BUB_MEDIA_MAX_BYTES", "1000");
    // Declared too large: not even asked for.
    env.model.push_text("Too big.");
    let daemon = env.start();
    let big =
        private_text(42, 42, "").document_file("d1", "big.pdf", "application/pdf", 5000, None);
    env.telegram.push_message_update(big);
    env.telegram.wait_for_calls("sendMessage", 1, WAIT).await;
    assert!(env.telegram.calls_of("getFile").is_empty());
    let prompt = user_text(&env, 0);
    assert!(
        prompt.contains(
            "\"note\":\"not downloaded: 4.9 KB is over the 1000 B limit (BUB_MEDIA_MAX_BYTES)\""
        ),
        "{prompt}"
    );
    // Declared small, streamed large: the download stops at the cap and nothing is left.
    env.telegram
        .add_file_reporting_size("d2", vec![0u8; 5000], 10);
    env.model.push_text("Still too big.");
    let liar = private_text(42, 42, "").document_file(
        "d2",
        "liar.bin",
        "application/octet-stream",
        10,
        None,
    );
    env.telegram.push_message_update(liar);
    env.telegram.wait_for_calls("sendMessage", 2, WAIT).await;
    assert_eq!(
        env.telegram.calls_of("file").len(),
        1,
        "the download was tried"
    );
    let prompt = user_text(&env, 1);
    assert!(
        prompt.contains("larger than the 1000-byte limit (BUB_MEDIA_MAX_BYTES)"),
        "{prompt}"
    );
    assert!(saved(&env).is_empty(), "{:?}", saved(&env).len());
    assert!(daemon.stop().await.success());
}

#[tokio::test]
async fn files_go_back_as_photo_voice_or_document_and_over_the_limit_is_an_error() {
    let mut env = Env::new().await;
    env.set("BUB_TELEGRAM_ENABLED", "false");
    let chart = png(40, 30);
    std::fs::write(env.workspace.join("chart.png"), &chart).unwrap();
    std::fs::write(env.workspace.join("note.ogg"), [3u8; 64]).unwrap();
    std::fs::write(env.workspace.join("report.pdf"), b"%PDF-1.4").unwrap();
    let send = |args: &str| format!(",message.send channel=telegram chat_id=42 {args}");
    let out = env
        .run(&["run", &send("file=chart.png text='the **chart**'")])
        .await;
    assert!(out.status.success(), "stderr: {}", stderr(&out));
    assert!(stdout(&out).contains("sent to telegram:42"));
    let photo = &env.telegram.calls_of("sendPhoto")[0];
    assert_eq!(photo.body["chat_id"], 42);
    assert_eq!(photo.body["caption"], "the <b>chart</b>");
    assert_eq!(photo.body["parse_mode"], "HTML");
    assert_eq!(photo.body["file"]["size"], chart.len());
    assert_eq!(env.telegram.uploads()[0], ("sendphoto".to_owned(), chart));

    let out = env.run(&["run", &send("file=note.ogg")]).await;
    assert!(out.status.success(), "stderr: {}", stderr(&out));
    assert!(
        env.telegram.calls_of("sendVoice")[0]
            .body
            .get("caption")
            .is_none()
    );
    // bub send: a document, the text as its caption.
    let out = env
        .command(&["send", "telegram", "42", "the report", "--file"])
        .arg(env.workspace.join("report.pdf"))
        .output();
    let out = bounded(out).await.unwrap();
    assert!(out.status.success(), "stderr: {}", stderr(&out));
    let document = &env.telegram.calls_of("sendDocument")[0];
    assert_eq!(document.body["caption"], "the report");
    assert_eq!(document.body["file"]["size"], 8);

    // Over Telegram's 50 MB: a clear error, nothing uploaded. (A sparse file: no 51 MB written.)
    let huge = std::fs::File::create(env.workspace.join("huge.zip")).unwrap();
    huge.set_len(51 * 1024 * 1024).unwrap();
    // A failed command goes to the model with its error.
    let before = env.telegram.calls().len();
    env.model.push_text("Too large for Telegram.");
    let out = env.run(&["run", &send("file=huge.zip")]).await;
    assert!(out.status.success(), "stderr: {}", stderr(&out));
    let told = env.model_prompts().pop().unwrap();
    assert!(told.contains("bots upload at most 50 MB"), "{told}");
    assert_eq!(
        env.telegram.calls().len(),
        before,
        "nothing crossed the wire"
    );
    // No such file: a clear error, too.
    env.model.push_text("No such file.");
    let out = env.run(&["run", &send("file=missing.png")]).await;
    assert!(out.status.success(), "stderr: {}", stderr(&out));
    let told = env.model_prompts().pop().unwrap();
    assert!(told.contains("missing.png: No such file"), "{told}");
}

/// Discord settings against `fake`.
#[cfg(feature = "discord")]
fn discord_settings(fake: &support::fake_discord::FakeDiscord, home: &Path) -> Settings {
    let mut s = Settings::with_defaults(home.to_path_buf(), PathBuf::from("."));
    s.channel_mut("discord").enabled = true;
    s.channel_mut("discord").token = Some("tok-SECRET".into());
    s.channel_mut("discord").api_base = fake.api_base().into();
    s.channel_mut("discord").allow_from = vec!["*".into()];
    s
}

#[cfg(feature = "discord")]
#[tokio::test]
async fn discord_attachments_come_from_the_cdn_only_and_files_go_up_as_attachments() {
    let fake = support::fake_discord::start().await;
    let dir = tempfile::tempdir().unwrap();
    let settings = discord_settings(&fake, dir.path());
    let discord = Discord::new(&settings, Arc::new(Access::new(&settings))).unwrap();
    let log = b"line 1\nline 2\n".to_vec();
    let url = fake.add_attachment("app.log", log.clone());
    let file = |name: &str, url: &str| Attachment {
        name: Some(name.into()),
        ..Attachment::new(AttachmentKind::File, Some(url.into()))
    };
    let files = [
        file("app.log", &url),
        file("x.png", "http://203.0.113.9/attachments/1/x.png"),
    ];
    let mut got = Vec::new();
    let written = bounded(discord.download(&files[0], &mut got, 1_000_000))
        .await
        .unwrap();
    assert_eq!((written, got), (log.len() as u64, log.clone()));
    assert_eq!(fake.attachment_downloads(), 1);
    let mut got = Vec::new();
    let refused = bounded(discord.download(&files[1], &mut got, 1_000_000)).await;
    assert!(
        refused
            .unwrap_err()
            .to_string()
            .contains("only from Discord's CDN"),
        "a URL elsewhere is never fetched"
    );
    let capped = bounded(discord.download(&files[0], &mut Vec::new(), 5)).await;
    assert!(
        capped
            .unwrap_err()
            .to_string()
            .contains("over the 5-byte limit")
    );

    let path = dir.path().join("chart.png");
    std::fs::write(&path, png(8, 8)).unwrap();
    let out = Outbound {
        chat_id: "555".into(),
        text: "the chart".into(),
        reply_to: None,
        file: Some(path),
        edit: None,
    };
    bounded(support::send(&discord, &out)).await.unwrap();
    let posts = fake.posted_messages();
    assert_eq!(posts.len(), 1);
    assert_eq!(posts[0].content(), "the chart");
    assert_eq!(
        posts[0].body["attachments_uploaded"][0]["filename"],
        "chart.png"
    );
    assert_eq!(fake.uploaded_files()[0].1, png(8, 8));
    let huge = dir.path().join("huge.bin");
    std::fs::File::create(&huge)
        .unwrap()
        .set_len(11 * 1024 * 1024)
        .unwrap();
    let out = Outbound {
        file: Some(huge),
        ..out
    };
    let err = bounded(support::send(&discord, &out)).await.unwrap_err();
    assert!(err.to_string().contains("at most 10 MB"), "{err}");
    assert_eq!(fake.posted_messages().len(), 1);
}
