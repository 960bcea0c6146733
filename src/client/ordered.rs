//! A client's running futures, polled in request order.
//!
//! Several of a client's requests may be redirected (ASK, MOVED) in one turn: their replies
//! came on the same node connection, in request order. Each sends its request again when it
//! is next polled, so polling them in request order keeps the resends in the client's
//! order, and a write and a later read of the same key are not swapped on the node that
//! now owns the key. `FuturesUnordered` polls in the order futures were woken, which puts a
//! continuation made this turn (a plain forward that met ASK) after futures woken before it.
//!
//! Invariants: entries are kept sorted by sequence number; an entry is polled only when
//! its waker fired since its last poll (a new entry counts as woken); every poll uses the
//! entry's own waker, which also wakes the task that polls this set.

use std::collections::VecDeque;
use std::future::Future;
use std::pin::Pin;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::task::{Context, Poll, Wake, Waker};

use futures_util::task::AtomicWaker;

type Boxed<T> = Pin<Box<dyn Future<Output = T> + Send>>;

/// Futures tagged with a sequence number, polled in ascending order of it.
pub struct OrderedFutures<T> {
    entries: VecDeque<Entry<T>>,
    /// The task polling the set: every entry's waker wakes it.
    task: Arc<AtomicWaker>,
}

struct Entry<T> {
    seq: u64,
    future: Boxed<T>,
    flag: Arc<Flag>,
    waker: Waker,
}

/// Set when an entry's future asks to be polled again.
struct Flag {
    woken: AtomicBool,
    task: Arc<AtomicWaker>,
}

impl Wake for Flag {
    fn wake(self: Arc<Self>) {
        self.wake_by_ref();
    }

    fn wake_by_ref(self: &Arc<Self>) {
        self.woken.store(true, Ordering::Release);
        self.task.wake();
    }
}

impl<T> Default for OrderedFutures<T> {
    fn default() -> Self {
        OrderedFutures {
            entries: VecDeque::new(),
            task: Arc::new(AtomicWaker::new()),
        }
    }
}

impl<T> OrderedFutures<T> {
    #[cfg(test)]
    pub fn len(&self) -> usize {
        self.entries.len()
    }

    pub fn is_empty(&self) -> bool {
        self.entries.is_empty()
    }

    /// Gives back the room for entries beyond `entries`.
    pub fn shrink_to(&mut self, entries: usize) {
        self.entries.shrink_to(entries);
    }

    /// Adds `future` for request `seq`; it is polled on the next [`poll_each`].
    ///
    /// [`poll_each`]: OrderedFutures::poll_each
    pub fn push(&mut self, seq: u64, future: Boxed<T>) {
        let flag = Arc::new(Flag {
            woken: AtomicBool::new(true),
            task: self.task.clone(),
        });
        let entry = Entry {
            seq,
            future,
            waker: Waker::from(flag.clone()),
            flag,
        };
        // Usually the newest request; a continuation of an older one goes in its place.
        let at = self.entries.partition_point(|e| e.seq < seq);
        self.entries.insert(at, entry);
    }

    /// Polls every woken future once, in ascending sequence order, and hands each finished
    /// one's output to `done` with its sequence number.
    pub fn poll_each(&mut self, cx: &mut Context<'_>, mut done: impl FnMut(u64, T)) {
        self.task.register(cx.waker());
        let mut at = 0;
        while at < self.entries.len() {
            let entry = &mut self.entries[at];
            if !entry.flag.woken.swap(false, Ordering::AcqRel) {
                at += 1;
                continue;
            }
            let mut own = Context::from_waker(&entry.waker);
            match entry.future.as_mut().poll(&mut own) {
                Poll::Ready(output) => {
                    let seq = entry.seq;
                    self.entries.remove(at);
                    done(seq, output);
                }
                Poll::Pending => at += 1,
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Mutex;

    use super::*;

    /// A future that records each poll in `log` and finishes when `gate` opens.
    fn recording(
        seq: u64,
        log: Arc<Mutex<Vec<u64>>>,
        gate: tokio::sync::oneshot::Receiver<()>,
    ) -> Boxed<u64> {
        Box::pin(async move {
            log.lock().unwrap().push(seq);
            let _ = gate.await;
            log.lock().unwrap().push(seq);
            seq
        })
    }

    #[tokio::test]
    async fn woken_futures_are_polled_in_sequence_order_whatever_order_they_woke_in() {
        let mut set = OrderedFutures::default();
        let log = Arc::new(Mutex::new(Vec::new()));
        let mut gates = Vec::new();
        // Pushed out of order: a continuation of an older request joins later.
        for seq in [3, 1, 4, 2] {
            let (open, gate) = tokio::sync::oneshot::channel();
            gates.push((seq, open));
            set.push(seq, recording(seq, log.clone(), gate));
        }
        let mut finished = Vec::new();
        std::future::poll_fn(|cx| {
            set.poll_each(cx, |seq, out| finished.push((seq, out)));
            Poll::Ready(())
        })
        .await;
        assert_eq!(*log.lock().unwrap(), [1, 2, 3, 4]);
        log.lock().unwrap().clear();
        // Woken newest first; still polled oldest first.
        gates.sort_by_key(|(seq, _)| std::cmp::Reverse(*seq));
        for (_, open) in gates {
            open.send(()).unwrap();
        }
        std::future::poll_fn(|cx| {
            set.poll_each(cx, |seq, out| finished.push((seq, out)));
            Poll::Ready(())
        })
        .await;
        assert_eq!(*log.lock().unwrap(), [1, 2, 3, 4]);
        assert_eq!(finished, [(1, 1), (2, 2), (3, 3), (4, 4)]);
        assert!(set.is_empty());
    }

    #[tokio::test]
    async fn a_future_that_was_not_woken_is_not_polled_again() {
        let mut set = OrderedFutures::default();
        let log = Arc::new(Mutex::new(Vec::new()));
        let (_open, gate) = tokio::sync::oneshot::channel::<()>();
        set.push(1, recording(1, log.clone(), gate));
        for _ in 0..3 {
            std::future::poll_fn(|cx| {
                set.poll_each(cx, |_, _| panic!("finished without its gate"));
                Poll::Ready(())
            })
            .await;
        }
        assert_eq!(*log.lock().unwrap(), [1], "polled again without a wake-up");
        assert_eq!(set.len(), 1);
    }
}
