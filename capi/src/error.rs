//! Errors at the boundary: every exported function returns a negative
//! errno on failure and leaves a message for [`pollfs_last_error`]; a
//! panic inside the library is caught here and becomes `-EIO` with its
//! message, so none unwinds into C.

use core::ffi::c_char;
use std::cell::RefCell;
use std::ffi::CString;
use std::panic::{catch_unwind, AssertUnwindSafe};

/// What went wrong: the errno C sees and the message it can read.
#[derive(Debug)]
pub(crate) struct Fail {
    errno: i32,
    message: String,
}

impl Fail {
    pub(crate) fn new(errno: i32, message: impl Into<String>) -> Fail {
        Fail {
            errno,
            message: message.into(),
        }
    }

    pub(crate) fn inval(message: impl Into<String>) -> Fail {
        Fail::new(libc::EINVAL, message)
    }

    pub(crate) fn badf(message: impl Into<String>) -> Fail {
        Fail::new(libc::EBADF, message)
    }

    /// A call on a handle an earlier call panicked on (`crate::poison`).
    pub(crate) fn poisoned(what: &str) -> Fail {
        Fail::new(
            libc::ENOTRECOVERABLE,
            format!("{what} is poisoned: an earlier call on it panicked; close it"),
        )
    }

    /// The errno C would see.
    #[cfg(test)]
    pub(crate) fn errno(&self) -> i32 {
        self.errno
    }
}

impl From<pollfs_core::Error> for Fail {
    fn from(e: pollfs_core::Error) -> Fail {
        // A read past the end has no errno of its own: EIO, as a short
        // exact read is an I/O failure to a caller that asked for all.
        Fail::new(e.errno().unwrap_or(libc::EIO), e.to_string())
    }
}

thread_local! {
    static LAST: RefCell<CString> = RefCell::new(CString::default());
}

pub(crate) fn remember(function: &str, message: &str) {
    let text = format!("{function}: {message}").replace('\0', " ");
    let c = CString::new(text).unwrap_or_default();
    LAST.with(|l| *l.borrow_mut() = c);
}

/// Runs the body of exported function `function`: its value, or the
/// negated errno of its failure or panic.
pub(crate) fn call(function: &str, body: impl FnOnce() -> Result<i64, Fail>) -> i64 {
    match catch_unwind(AssertUnwindSafe(body)) {
        Ok(Ok(v)) => v,
        Ok(Err(fail)) => {
            remember(function, &fail.message);
            -i64::from(fail.errno)
        }
        Err(payload) => {
            let what = payload
                .downcast_ref::<&str>()
                .map(|s| (*s).to_string())
                .or_else(|| payload.downcast_ref::<String>().cloned())
                .unwrap_or_else(|| "a panic with no message".to_string());
            remember(
                function,
                &format!("internal error (a panic, caught): {what}; please report it"),
            );
            -i64::from(libc::EIO)
        }
    }
}

/// [`call`] for functions that return `int`.
pub(crate) fn int(function: &str, body: impl FnOnce() -> Result<i64, Fail>) -> i32 {
    i32::try_from(call(function, body)).unwrap_or(-libc::EOVERFLOW)
}

/// [`call`] for functions that return `ssize_t`.
pub(crate) fn size(function: &str, body: impl FnOnce() -> Result<i64, Fail>) -> isize {
    isize::try_from(call(function, body)).unwrap_or(-(libc::EOVERFLOW as isize))
}

/// The message of the last call on this thread that failed (an empty
/// string if none has), as "function: what went wrong". Valid until the
/// next failing call on this thread. Thread-safe (one message per thread).
#[no_mangle]
pub extern "C" fn pollfs_last_error() -> *const c_char {
    LAST.with(|l| l.borrow().as_ptr())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn last() -> String {
        LAST.with(|l| l.borrow().to_string_lossy().into_owned())
    }

    #[test]
    fn a_panic_becomes_eio_with_its_message() {
        let r = call("pollfs_test", || panic!("boom {}", 7));
        assert_eq!(r, -i64::from(libc::EIO));
        let m = last();
        assert!(m.starts_with("pollfs_test: internal error"), "{m}");
        assert!(m.contains("boom 7"), "{m}");
    }

    #[test]
    fn a_failure_is_its_negated_errno_and_message() {
        let r = int("pollfs_test", || {
            Err(Fail::new(libc::ENOENT, "no such thing"))
        });
        assert_eq!(r, -libc::ENOENT);
        assert_eq!(last(), "pollfs_test: no such thing");
        assert_eq!(size("pollfs_test", || Ok(42)), 42);
    }

    #[test]
    fn engine_errors_keep_their_errno() {
        let e = pollfs_core::Error::from(pollfs_core::error::NamespaceError::Exists);
        let r = int("pollfs_test", || Err(e.into()));
        assert_eq!(r, -libc::EEXIST);
    }
}
