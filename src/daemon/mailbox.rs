//! An actor's mailbox: where the manager posts a session's [`Mail`]. Two bounded lanes — the
//! mail ([`MAILBOX`]) and the chat controls that act at once (`,stop`, `,status`; a few) — so
//! that a control never waits behind messages the actor has no room for yet.
//!
//! Invariants: both lanes are bounded; a post to a full lane waits (or gets its mail back at
//! once with [`Mailbox::try_send`]); a post to an actor that ended gets its mail back, so a
//! message is never left in a dead mailbox.

use tokio::sync::mpsc;

use super::session::Mail;
use crate::channels::Control;

/// Mail waiting for an actor; the manager waits beyond that.
pub(crate) const MAILBOX: usize = 64;
/// Chat controls waiting for an actor (read at once, whatever the actor's queue holds).
const CONTROLS: usize = 8;

impl Mail {
    /// A chat control that acts at once (`,stop`, `,status`): it takes the controls' lane.
    fn is_urgent(&self) -> bool {
        matches!(self, Mail::Message(m)
            if matches!(m.control(), Some(Control::Stop | Control::Status)))
    }
}

/// Where the manager posts an actor's mail: two bounded lanes, one for the chat controls that
/// act at once, so that they never wait behind queued messages.
#[derive(Debug, Clone)]
pub struct Mailbox {
    mail: mpsc::Sender<Mail>,
    controls: mpsc::Sender<Mail>,
}

/// What [`Mailbox::try_send`] did with the mail.
pub(crate) enum Posted {
    Done,
    /// The lane is full: the mail comes back (wait with [`Mailbox::send`]).
    Full(Mail),
    /// The actor ended: the mail comes back (start a new one).
    Closed(Mail),
}

/// The actor's side of its [`Mailbox`].
pub(crate) struct Lanes {
    pub(super) mail: mpsc::Receiver<Mail>,
    pub(super) controls: mpsc::Receiver<Mail>,
}

/// A new actor's mailbox.
pub(crate) fn mailbox() -> (Mailbox, Lanes) {
    let (mail, mail_rx) = mpsc::channel(MAILBOX);
    let (controls, controls_rx) = mpsc::channel(CONTROLS);
    let lanes = Lanes {
        mail: mail_rx,
        controls: controls_rx,
    };
    (Mailbox { mail, controls }, lanes)
}

impl Mailbox {
    fn lane(&self, mail: &Mail) -> &mpsc::Sender<Mail> {
        if mail.is_urgent() {
            &self.controls
        } else {
            &self.mail
        }
    }

    /// Posts `mail` if its lane has room.
    pub(crate) fn try_send(&self, mail: Mail) -> Posted {
        match self.lane(&mail).try_send(mail) {
            Ok(()) => Posted::Done,
            Err(mpsc::error::TrySendError::Full(mail)) => Posted::Full(mail),
            Err(mpsc::error::TrySendError::Closed(mail)) => Posted::Closed(mail),
        }
    }

    /// Posts `mail`, waiting while its lane is full; the mail comes back if the actor ended
    /// (by value, as tokio returns it: the error is as large as the mail).
    #[allow(clippy::result_large_err)]
    pub(crate) async fn send(&self, mail: Mail) -> Result<(), mpsc::error::SendError<Mail>> {
        self.lane(&mail).send(mail).await
    }
}

impl Lanes {
    pub(super) fn is_empty(&self) -> bool {
        self.mail.is_empty() && self.controls.is_empty()
    }
}
