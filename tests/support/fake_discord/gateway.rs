//! The fake's gateway: one task per websocket connection speaking just enough of Discord's
//! protocol for serenity (HELLO, IDENTIFY → READY or close 4004, heartbeat ACK, RESUME →
//! RESUMED, recording the RESUME); dispatches are pushed to identified connections through `Shared::sessions`.

use std::sync::Arc;
use std::sync::atomic::Ordering;

use futures_util::{SinkExt, StreamExt};
use serde_json::{Value, json};
use tokio::net::TcpStream;
use tokio::sync::mpsc;
use tokio_tungstenite::tungstenite::Message as WsMessage;
use tokio_tungstenite::tungstenite::protocol::CloseFrame;
use tokio_tungstenite::tungstenite::protocol::frame::coding::CloseCode;

use super::msg::bot_user;
use super::{BOT_ID, Identify, Shared};

pub(super) async fn serve(shared: Arc<Shared>, stream: TcpStream) {
    let Ok(ws) = tokio_tungstenite::accept_async(stream).await else {
        return;
    };
    let (mut sink, mut source) = ws.split();
    let (tx, mut rx) = mpsc::unbounded_channel::<WsMessage>();
    let writer = tokio::spawn(async move {
        while let Some(frame) = rx.recv().await {
            let closing = matches!(frame, WsMessage::Close(_));
            if sink.send(frame).await.is_err() || closing {
                break;
            }
        }
    });
    let interval = shared.heartbeat_ms.load(Ordering::SeqCst);
    let hello = json!({"op": 10, "d": {"heartbeat_interval": interval}});
    let _ = tx.send(WsMessage::Text(hello.to_string()));
    while let Some(Ok(frame)) = source.next().await {
        let text = match frame {
            WsMessage::Text(t) => t,
            WsMessage::Close(_) => break,
            _ => continue,
        };
        let Ok(payload) = serde_json::from_str::<Value>(&text) else {
            continue;
        };
        match payload["op"].as_u64() {
            Some(1) => {
                shared.heartbeats.fetch_add(1, Ordering::SeqCst);
                shared.changed.notify_waiters();
                let _ = tx.send(WsMessage::Text(json!({"op": 11}).to_string()));
            }
            Some(2) => identify(&shared, &tx, &payload["d"]),
            Some(6) => {
                let resume = payload["d"].clone();
                shared.update(|s| s.resumes.push(resume));
                let seq = shared.seq.fetch_add(1, Ordering::SeqCst) + 1;
                let resumed = json!({"op": 0, "t": "RESUMED", "s": seq, "d": {}});
                let _ = tx.send(WsMessage::Text(resumed.to_string()));
                shared.update(|s| s.sessions.push(tx.clone()));
            }
            _ => {}
        }
    }
    shared.update(|s| s.sessions.retain(|t| !t.same_channel(&tx)));
    drop(tx);
    let _ = writer.await;
}

/// Records an IDENTIFY; answers READY, or closes with 4004 when the token is not accepted.
fn identify(shared: &Shared, tx: &mpsc::UnboundedSender<WsMessage>, d: &Value) {
    let token = d["token"].as_str().unwrap_or_default().to_owned();
    let ident = Identify {
        token: token.clone(),
        intents: d["intents"].as_u64().unwrap_or_default(),
        payload: d.clone(),
    };
    let valid = shared.state().valid_token.clone();
    let rejected = shared.reject_identify.load(Ordering::SeqCst)
        || valid.is_some_and(|v| token != format!("Bot {v}"));
    if rejected {
        let _ = tx.send(WsMessage::Close(Some(CloseFrame {
            code: CloseCode::from(4004),
            reason: "Authentication failed.".into(),
        })));
        shared.update(|s| s.identifies.push(ident));
        return;
    }
    let seq = shared.seq.fetch_add(1, Ordering::SeqCst) + 1;
    let ready = json!({"op": 0, "s": seq, "t": "READY", "d": {
        "v": 10, "user": bot_user(), "guilds": [], "session_id": "fake-session",
        "resume_gateway_url": shared.ws_url, "shard": [0, 1],
        "application": {"id": BOT_ID, "flags": 0},
    }});
    let _ = tx.send(WsMessage::Text(ready.to_string()));
    shared.update(|s| {
        s.identifies.push(ident);
        s.sessions.push(tx.clone());
    });
}
