//! Pointers from C turned into Rust references, slices and strings, and
//! handles boxed for C and taken back: the crate's only unsafe code
//! besides the calls into it. Each function checks what it can (null,
//! UTF-8, sizes); what it cannot (that a pointer points at live memory of
//! the right size, that a handle came from this library and was not
//! freed) is the C caller's contract, stated on each exported function.

use core::ffi::{c_char, c_void, CStr};

use crate::error::Fail;

/// The string at `p`, which must be UTF-8.
///
/// # Safety
/// `p` is null or points at a NUL-terminated string that stays alive and
/// unchanged for `'a`.
pub(crate) unsafe fn str<'a>(p: *const c_char, what: &str) -> Result<&'a str, Fail> {
    if p.is_null() {
        return Err(Fail::inval(format!("{what} is NULL")));
    }
    // SAFETY: not null; the caller vouches for the rest.
    let s = unsafe { CStr::from_ptr(p) };
    s.to_str()
        .map_err(|_| Fail::inval(format!("{what} is not UTF-8")))
}

/// The object at `p`.
///
/// # Safety
/// `p` is null or points at a live `T` that nothing mutates for `'a`.
pub(crate) unsafe fn obj<'a, T>(p: *const T, what: &str) -> Result<&'a T, Fail> {
    // SAFETY: `as_ref` checks null; the caller vouches for the rest.
    unsafe { p.as_ref() }.ok_or_else(|| Fail::badf(format!("{what} is NULL")))
}

/// The mutable object at `p`.
///
/// # Safety
/// `p` is null or points at a live `T` nothing else touches for `'a`.
pub(crate) unsafe fn obj_mut<'a, T>(p: *mut T, what: &str) -> Result<&'a mut T, Fail> {
    // SAFETY: `as_mut` checks null; the caller vouches for the rest.
    unsafe { p.as_mut() }.ok_or_else(|| Fail::badf(format!("{what} is NULL")))
}

/// `len` bytes at `p` (any pointer when `len` is 0).
///
/// # Safety
/// When `len` > 0, `p` points at `len` readable bytes that stay alive and
/// unchanged for `'a`.
pub(crate) unsafe fn bytes<'a>(p: *const c_void, len: usize) -> Result<&'a [u8], Fail> {
    if len == 0 {
        return Ok(&[]);
    }
    if p.is_null() || len > isize::MAX as usize {
        return Err(Fail::inval("the buffer is NULL or larger than isize::MAX"));
    }
    // SAFETY: not null, size in range; the caller vouches for the rest.
    Ok(unsafe { core::slice::from_raw_parts(p.cast::<u8>(), len) })
}

/// `len` writable bytes at `p` (any pointer when `len` is 0).
///
/// # Safety
/// When `len` > 0, `p` points at `len` writable bytes that nothing else
/// touches for `'a`.
pub(crate) unsafe fn bytes_mut<'a>(p: *mut c_void, len: usize) -> Result<&'a mut [u8], Fail> {
    if len == 0 {
        return Ok(&mut []);
    }
    if p.is_null() || len > isize::MAX as usize {
        return Err(Fail::inval("the buffer is NULL or larger than isize::MAX"));
    }
    // SAFETY: not null, size in range; the caller vouches for the rest.
    Ok(unsafe { core::slice::from_raw_parts_mut(p.cast::<u8>(), len) })
}

/// `n` objects at `p` (any pointer when `n` is 0).
///
/// # Safety
/// When `n` > 0, `p` points at `n` live `T`s, unchanged for `'a`.
pub(crate) unsafe fn slice<'a, T>(p: *const T, n: usize) -> Result<&'a [T], Fail> {
    if n == 0 {
        return Ok(&[]);
    }
    if p.is_null() {
        return Err(Fail::inval("the array is NULL"));
    }
    // SAFETY: not null; the caller vouches for the rest.
    Ok(unsafe { core::slice::from_raw_parts(p, n) })
}

/// `n` writable slots at `p` (any pointer when `n` is 0).
///
/// # Safety
/// When `n` > 0, `p` points at `n` writable `T`s nothing else touches.
pub(crate) unsafe fn slice_mut<'a, T>(p: *mut T, n: usize) -> Result<&'a mut [T], Fail> {
    if n == 0 {
        return Ok(&mut []);
    }
    if p.is_null() {
        return Err(Fail::inval("the array is NULL"));
    }
    // SAFETY: not null; the caller vouches for the rest.
    Ok(unsafe { core::slice::from_raw_parts_mut(p, n) })
}

/// Stores `v` at `out`.
///
/// # Safety
/// `out` is null or points at a writable `T`.
pub(crate) unsafe fn put<T>(out: *mut T, v: T) -> Result<(), Fail> {
    if out.is_null() {
        return Err(Fail::inval("the output pointer is NULL"));
    }
    // SAFETY: not null; the caller vouches that it is writable.
    unsafe { out.write(v) };
    Ok(())
}

/// Takes back a handle made by `Box::into_raw`.
///
/// # Safety
/// `p` is null or came from `Box::into_raw` in this library and was not
/// taken back before.
pub(crate) unsafe fn take<T>(p: *mut T, what: &str) -> Result<Box<T>, Fail> {
    if p.is_null() {
        return Err(Fail::badf(format!("{what} is NULL")));
    }
    // SAFETY: the caller vouches that it is a live box of ours.
    Ok(unsafe { Box::from_raw(p) })
}
