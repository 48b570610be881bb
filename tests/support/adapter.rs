//! A channel adapter (Telegram, Discord) running as the daemon runs it — `run` in a task,
//! handing inbound messages on through an inbox — for the adapter tests against the fakes.

use std::sync::Arc;

use bub::channels::{Channel, Inbound, InboundSink};
use bub::inbox::Inbox;
use tokio::sync::mpsc;
use tokio::task::JoinHandle;
use tokio_util::sync::CancellationToken;

use super::wait::bounded;

/// An adapter's `run` in a task, and what it hands on.
pub struct Running<C> {
    pub adapter: Arc<C>,
    pub shutdown: CancellationToken,
    /// What `run` returned (for the tests of a failing start).
    pub task: JoinHandle<anyhow::Result<()>>,
    rx: mpsc::Receiver<Inbound>,
}

impl<C: Channel> Running<C> {
    /// Starts `adapter.run`, journaling in `inbox` (`Inbox::memory()`, or what a previous run
    /// left).
    pub fn spawn(adapter: C, inbox: Arc<Inbox>) -> Self {
        let adapter = Arc::new(adapter);
        // The manager's bound: an adapter whose messages are not read waits, as in the daemon.
        let (tx, rx) = mpsc::channel(256);
        let shutdown = CancellationToken::new();
        let task = tokio::spawn({
            let (adapter, shutdown) = (Arc::clone(&adapter), shutdown.clone());
            async move { adapter.run(InboundSink::new(inbox, tx), shutdown).await }
        });
        Self {
            adapter,
            shutdown,
            task,
            rx,
        }
    }

    /// The next inbound message; fails the test after [`super::wait::WAIT`].
    pub async fn next(&mut self) -> Inbound {
        bounded(self.rx.recv()).await.expect("inbound channel open")
    }

    /// Nothing else arrived (call after a later message was received: the adapter hands
    /// messages on in order, so anything dispatched before it would have come first).
    pub fn assert_idle(&mut self) {
        if let Ok(extra) = self.rx.try_recv() {
            panic!("unexpected inbound: {extra:?}");
        }
    }

    /// Stops the adapter (it finishes in-flight handlers), checks that `run` returned `Ok`,
    /// and returns what else arrived.
    pub async fn stop(mut self) -> Vec<Inbound> {
        self.shutdown.cancel();
        bounded(self.task)
            .await
            .expect("run task")
            .expect("run() ok");
        let mut rest = Vec::new();
        while let Ok(inbound) = self.rx.try_recv() {
            rest.push(inbound);
        }
        rest
    }
}
