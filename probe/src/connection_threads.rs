//! Connections spread over one single-threaded runtime per core. On a
//! work-stealing runtime a message that wakes one worker's task can wake a
//! second worker to steal it: a futex and a context switch per message that
//! a probe, which only reads, never needs. Here each connection stays on its
//! thread, and the threads share the cores.

use std::any::Any;
use std::future::Future;

use tokio::sync::oneshot;
use tokio::task::JoinSet;

/// What a thread reports when its connections are done: a connection's
/// panic, to be raised again by the caller.
type Panicked = Option<Box<dyn Any + Send>>;

/// Starts `connections` (each one's receive loop) on `threads` threads (at
/// most one per connection), and adds to `tasks` one task per thread that
/// ends when the thread's connections have, re-raising a connection's panic.
/// Aborting those tasks (dropping `tasks`) aborts the connections.
pub(crate) fn spawn<F>(
    connections: Vec<F>,
    threads: usize,
    tasks: &mut JoinSet<()>,
) -> std::io::Result<()>
where
    F: Future<Output = ()> + Send + 'static,
{
    let threads = threads.clamp(1, connections.len().max(1));
    let mut shares: Vec<Vec<F>> = (0..threads).map(|_| Vec::new()).collect();
    for (i, c) in connections.into_iter().enumerate() {
        shares[i % threads].push(c);
    }
    for (k, share) in shares.into_iter().enumerate() {
        let (done_tx, done_rx) = oneshot::channel::<Panicked>();
        std::thread::Builder::new()
            .name(format!("skewscope-probe-conn-{k}"))
            .spawn(move || run_share(share, done_tx))?;
        tasks.spawn(async move {
            if let Ok(Some(panic)) = done_rx.await {
                std::panic::resume_unwind(panic);
            }
        });
    }
    Ok(())
}

/// One thread: its connections on a current-thread runtime, until they end
/// or whoever waits for them has gone.
fn run_share<F: Future<Output = ()> + Send + 'static>(
    share: Vec<F>,
    mut done: oneshot::Sender<Panicked>,
) {
    let runtime = match tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
    {
        Ok(runtime) => runtime,
        Err(e) => {
            let _ = done.send(Some(Box::new(format!(
                "cannot start a connection runtime: {e}"
            ))));
            return;
        }
    };
    let panicked = runtime.block_on(async {
        let mut set = JoinSet::new();
        for connection in share {
            set.spawn(connection);
        }
        let mut panicked: Panicked = None;
        loop {
            tokio::select! {
                joined = set.join_next() => match joined {
                    None => break,
                    Some(Err(e)) if e.is_panic() => {
                        panicked.get_or_insert(e.into_panic());
                    }
                    Some(_) => {}
                },
                () = done.closed() => {
                    set.abort_all();
                    while set.join_next().await.is_some() {}
                    break;
                }
            }
        }
        panicked
    });
    let _ = done.send(panicked);
}

#[cfg(test)]
mod tests {
    use std::collections::HashSet;
    use std::sync::{Arc, Mutex};

    use super::*;

    #[tokio::test]
    async fn every_connection_runs_on_one_of_the_threads() {
        let seen = Arc::new(Mutex::new(Vec::new()));
        let work: Vec<_> = (0..10)
            .map(|i| {
                let seen = Arc::clone(&seen);
                async move {
                    tokio::task::yield_now().await;
                    let name = std::thread::current().name().unwrap_or("").to_owned();
                    seen.lock().unwrap().push((i, name));
                }
            })
            .collect();
        let mut tasks = JoinSet::new();
        spawn(work, 2, &mut tasks).unwrap();
        while let Some(joined) = tasks.join_next().await {
            joined.unwrap();
        }
        let seen = seen.lock().unwrap();
        let done: HashSet<_> = seen.iter().map(|(i, _)| *i).collect();
        assert_eq!(done.len(), 10);
        let threads: HashSet<_> = seen.iter().map(|(_, t)| t.as_str()).collect();
        assert_eq!(
            threads,
            HashSet::from(["skewscope-probe-conn-0", "skewscope-probe-conn-1"])
        );
    }

    #[tokio::test]
    async fn a_connections_panic_reaches_the_caller() {
        let work: Vec<std::pin::Pin<Box<dyn Future<Output = ()> + Send>>> = vec![
            Box::pin(async {}),
            Box::pin(async { panic!("a broken connection") }),
        ];
        let mut tasks = JoinSet::new();
        spawn(work, 1, &mut tasks).unwrap();
        let err = tasks.join_next().await.unwrap().unwrap_err();
        assert!(err.is_panic());
    }

    #[tokio::test]
    async fn dropping_the_tasks_aborts_the_connections() {
        struct Dropped(Option<oneshot::Sender<()>>);
        impl Drop for Dropped {
            fn drop(&mut self) {
                if let Some(tx) = self.0.take() {
                    let _ = tx.send(());
                }
            }
        }
        let (tx, rx) = oneshot::channel();
        let guard = Dropped(Some(tx));
        let work = vec![async move {
            let _guard = guard;
            std::future::pending::<()>().await;
        }];
        let mut tasks = JoinSet::new();
        spawn(work, 1, &mut tasks).unwrap();
        drop(tasks);
        // The connection's future is dropped on its thread, which then ends.
        tokio::time::timeout(std::time::Duration::from_secs(30), rx)
            .await
            .expect("the connection was aborted")
            .expect("by being dropped");
    }
}
