//! Errors at the boundary: every exported function returns a negative
//! errno on failure and leaves a message for [`pollfs_last_error`]; a
//! panic inside the library is caught here and becomes `-EIO` with its
//! message, so none unwinds into C.

use core::ffi::c_char;
use std::cell::RefCell;
use std::ffi::CString;
use std::panic::{catch_unwind, AssertUnwindSafe};

use pollfs_core::Error;

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

impl Fail {
    /// An engine error about `what` (a path): its errno and both in the
    /// message.
    pub(crate) fn about(what: &str, e: &Error) -> Fail {
        Fail::new(errno(e), format!("{what}: {e}"))
    }
}

impl From<Error> for Fail {
    fn from(e: Error) -> Fail {
        Fail::new(errno(&e), e.to_string())
    }
}

/// The errno C sees for an engine error: the engine's own rule
/// (`Error::errno`), written once where the error kinds are defined and
/// matched there without a catch-all, so a kind added to the engine has its
/// errno before it compiles, and the mount and this library cannot
/// disagree. It has no errno only for a read past the end of a file, which
/// a caller that asked for every byte sees as an I/O failure: EIO. The test
/// below lists every kind with the value C sees.
pub(crate) fn errno(e: &Error) -> i32 {
    match e.errno() {
        Some(n) => n,
        None => libc::EIO,
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
    fn every_engine_error_kind_has_its_errno() {
        use pollfs_core::dev::DevError;
        use pollfs_core::error::{
            ConfigError as C, Damage, NameError as N, NamespaceError as Ns, PosixError as P,
            RangeError as R, RepairError as Rp, SpaceError as S, XattrError as X,
        };
        let cases: [(Error, i32); 48] = [
            (Ns::NotFound.into(), libc::ENOENT),
            (Ns::Exists.into(), libc::EEXIST),
            (Ns::Name(N::Empty).into(), libc::EINVAL),
            (Ns::Name(N::TooLong).into(), libc::ENAMETOOLONG),
            (Ns::Name(N::BadByte).into(), libc::EINVAL),
            (Ns::Name(N::Dots).into(), libc::EINVAL),
            (Ns::NotADirectory.into(), libc::ENOTDIR),
            (Ns::IsADirectory.into(), libc::EISDIR),
            (Ns::NotEmpty.into(), libc::ENOTEMPTY),
            (Ns::InvalidMove.into(), libc::EINVAL),
            (Ns::TooManyLinks.into(), libc::EMLINK),
            (Ns::NotPermitted.into(), libc::EPERM),
            (Ns::NotASymlink.into(), libc::EINVAL),
            (Ns::IsASymlink.into(), libc::ELOOP),
            (Ns::Special.into(), libc::ENXIO),
            (Ns::BadKind.into(), libc::EINVAL),
            (Error::Range(R::Overflow), libc::EINVAL),
            (Error::Range(R::TooLarge), libc::EFBIG),
            (Error::Range(R::EndOfFile), libc::EIO),
            (Error::Range(R::Unaligned), libc::EINVAL),
            (Error::Range(R::Empty), libc::EINVAL),
            (Error::Xattr(X::NotFound), libc::ENODATA),
            (Error::Xattr(X::Exists), libc::EEXIST),
            (Error::Xattr(X::NameLength), libc::ERANGE),
            (Error::Xattr(X::Namespace), libc::EOPNOTSUPP),
            (Error::Xattr(X::ValueTooLarge), libc::E2BIG),
            (Error::Xattr(X::Full), libc::ENOSPC),
            (Error::Posix(P::AccessDenied), libc::EACCES),
            (Error::Posix(P::DefaultAclNotDir), libc::EACCES),
            (Error::Posix(P::NotOwner), libc::EPERM),
            (Error::Posix(P::BadAcl), libc::EINVAL),
            (Error::Posix(P::AclVersion), libc::EOPNOTSUPP),
            (Error::Posix(P::NoAclHere), libc::EOPNOTSUPP),
            (Error::Space(S::DeviceFull), libc::ENOSPC),
            (Error::Space(S::MetadataFull), libc::ENOSPC),
            (Error::Space(S::InodeNumbers), libc::ENOSPC),
            (Error::Space(S::SequenceExhausted), libc::ENOSPC),
            (Error::Io(DevError::InvalidRequest), libc::EIO),
            (
                Error::Config(C::FewFrames {
                    frames: 1,
                    metadata: 2,
                    needed: 3,
                }),
                libc::EINVAL,
            ),
            (
                Error::Config(C::CacheBeyondFrames {
                    cache_pages: 2,
                    usable: 1,
                }),
                libc::EINVAL,
            ),
            (
                Error::Config(C::CacheTooSmall {
                    cache_pages: 1,
                    min: 2,
                }),
                libc::EINVAL,
            ),
            (Error::Config(C::DeviceTooSmall { blocks: 1 }), libc::EINVAL),
            (Error::Config(C::ForeignFile), libc::EBADF),
            (Error::Repair(Rp::StillOverlaps { block: 1 }), libc::EUCLEAN),
            (
                Error::Corrupt {
                    block: 0,
                    damage: Damage::NotPollfs,
                },
                libc::EUCLEAN,
            ),
            (
                Error::Corrupt {
                    block: 0,
                    damage: Damage::SuperblockChecksum,
                },
                libc::EUCLEAN,
            ),
            (
                Error::Corrupt {
                    block: 0,
                    damage: Damage::Features(1),
                },
                libc::EUCLEAN,
            ),
            (
                Error::Corrupt {
                    block: 0,
                    damage: Damage::Version {
                        found: 9,
                        supported: 1,
                    },
                },
                libc::EUCLEAN,
            ),
        ];
        for (e, want) in &cases {
            assert_eq!(errno(e), *want, "{e:?}");
            // The engine's own mapping agrees (it has none for EndOfFile).
            if *e != Error::Range(R::EndOfFile) {
                assert_eq!(e.errno(), Some(*want), "{e:?}");
            }
            assert_eq!(Fail::from(*e).errno(), *want, "{e:?}");
        }
    }

    #[test]
    fn engine_errors_keep_their_errno() {
        let e = pollfs_core::Error::from(pollfs_core::error::NamespaceError::Exists);
        let r = int("pollfs_test", || Err(e.into()));
        assert_eq!(r, -libc::EEXIST);
    }
}
