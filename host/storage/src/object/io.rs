//! The runtime every object-store request runs on, and how long a request is waited for:
//! connecting, answering, retrying.

use std::sync::OnceLock;
use std::time::Duration;

use super::error::ObjectError;

/// Connecting to the store: a store that is not there fails fast.
#[cfg(feature = "s3")]
pub(super) const CONNECT_TIMEOUT: Duration = Duration::from_secs(2);
/// From sending a request (its retries included) to the answer's headers, and then between
/// two pieces of its body: a store that stops answering is given up within this, inside the
/// default 10 s call deadline, while a large body that keeps arriving is never cut (the
/// transport's own total timeout is long; a 300 MB object takes seconds to arrive).
pub(super) const ANSWER_TIMEOUT: Duration = Duration::from_secs(6);
/// The transport's own limit on one request, body included.
#[cfg(feature = "s3")]
pub(super) const TOTAL_TIMEOUT: Duration = Duration::from_secs(600);
/// Retries of a request that failed in a way worth retrying (5xx, a dropped connection), and
/// the time after which none is tried.
pub(super) const MAX_RETRIES: usize = 2;
pub(super) const RETRY_TIMEOUT: Duration = Duration::from_secs(4);
/// Requests of one read at once.
pub(super) const CONCURRENT_REQUESTS: usize = 4;

/// `future`, or [`ObjectError::Timeout`] when it takes longer than `limit`.
pub(super) async fn within<T>(
    limit: Duration,
    what: &str,
    future: impl std::future::Future<Output = Result<T, ObjectError>>,
) -> Result<T, ObjectError> {
    match tokio::time::timeout(limit, future).await {
        Ok(result) => result,
        Err(_) => Err(ObjectError::Timeout(format!(
            "the object store did not answer for {what} within {} s",
            limit.as_secs()
        ))),
    }
}

/// The runtime every object-store request runs on.
fn io() -> &'static tokio::runtime::Runtime {
    static IO: OnceLock<tokio::runtime::Runtime> = OnceLock::new();
    IO.get_or_init(|| {
        tokio::runtime::Builder::new_multi_thread()
            .worker_threads(2)
            .thread_name("tally-object-io")
            .enable_all()
            .build()
            .unwrap_or_else(|e| panic!("the object-store runtime cannot start: {e}"))
    })
}

/// Runs `future` on the IO runtime and waits for it from async code.
pub async fn run<T: Send + 'static>(
    future: impl std::future::Future<Output = T> + Send + 'static,
) -> Result<T, ObjectError> {
    /// Stops the requests when the caller stops waiting (a deadline, a cancelled call).
    struct AbortOnDrop(tokio::task::AbortHandle);
    impl Drop for AbortOnDrop {
        fn drop(&mut self) {
            self.0.abort();
        }
    }
    let task = io().spawn(future);
    let _abort = AbortOnDrop(task.abort_handle());
    task.await
        .map_err(|e| ObjectError::Other(format!("an object-store request stopped: {e}")))
}

/// Runs `future` on the IO runtime and blocks this thread until it is done: for registration
/// and for the readers that run on blocking threads (a call that reloads does so off its
/// async worker, see `Engine::call_as`); async readers use [`run`].
pub fn wait<T: Send + 'static>(
    future: impl std::future::Future<Output = T> + Send + 'static,
) -> Result<T, ObjectError> {
    let (tx, rx) = std::sync::mpsc::sync_channel(1);
    io().spawn(async move {
        let _ = tx.send(future.await);
    });
    rx.recv()
        .map_err(|_| ObjectError::Other("an object-store request stopped".into()))
}
