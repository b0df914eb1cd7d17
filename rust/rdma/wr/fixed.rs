// SPDX-License-Identifier: GPL-2.0

//! A list of at most `N` plain values kept in place, of which only the ones pushed are ever
//! written: the operations and scatter/gather entries a post builds on the stack.
//!
//! A post names one or two operations and a few memory pieces, but the lists have room for
//! [`MAX_OPS`](super::MAX_OPS) and [`MAX_SGE`](crate::rdma::dma::MAX_SGE); initialising all
//! of that room on every post would cost more than filling the entries used.

use crate::error::{code::EINVAL, Result};
use core::mem::MaybeUninit;

/// Up to `N` values of `T`, of which the first `len` are initialised.
///
/// `T: Copy`, so that nothing needs dropping when the list is truncated or goes away.
pub(crate) struct FixedVec<T: Copy, const N: usize> {
    /// INVARIANT: `items[..len]` are initialised; `len <= N`.
    items: [MaybeUninit<T>; N],
    len: usize,
}

impl<T: Copy, const N: usize> FixedVec<T, N> {
    /// An empty list; nothing of its room is written.
    pub(crate) fn new() -> Self {
        Self {
            // SAFETY: An array of `MaybeUninit` is valid without initialisation.
            items: unsafe { MaybeUninit::<[MaybeUninit<T>; N]>::uninit().assume_init() },
            len: 0,
        }
    }

    /// How many values were pushed.
    pub(crate) fn len(&self) -> usize {
        self.len
    }

    /// Whether nothing was pushed.
    pub(crate) fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// Appends `value`; `EINVAL` when the list is full.
    pub(crate) fn push(&mut self, value: T) -> Result<&mut T> {
        let slot = self.items.get_mut(self.len).ok_or(EINVAL)?;
        let value = slot.write(value);
        // INVARIANT: The entry at the old `len` was just written, and `len < N` held for it.
        self.len += 1;
        Ok(value)
    }

    /// Forgets the values from index `len` on (nothing if there are not that many).
    pub(crate) fn truncate(&mut self, len: usize) {
        // INVARIANT: Shrinking keeps `items[..len]` initialised.
        self.len = self.len.min(len);
    }

    /// The values pushed.
    pub(crate) fn as_slice(&self) -> &[T] {
        // SAFETY: Per the type invariant the first `len` items are initialised, and
        // `MaybeUninit<T>` has the layout of `T`.
        unsafe { core::slice::from_raw_parts(self.items.as_ptr().cast(), self.len) }
    }

    /// The values pushed, to change in place.
    pub(crate) fn as_mut_slice(&mut self) -> &mut [T] {
        // SAFETY: As for `as_slice`; the slice borrows `self` mutably.
        unsafe { core::slice::from_raw_parts_mut(self.items.as_mut_ptr().cast(), self.len) }
    }

    /// The value pushed last.
    pub(crate) fn last_mut(&mut self) -> Option<&mut T> {
        self.as_mut_slice().last_mut()
    }

    /// The address of the first value, for a C array the list's values fill (as many as
    /// [`FixedVec::len`] says). Writes through it must keep the values valid `T`s.
    pub(crate) fn as_mut_ptr(&mut self) -> *mut T {
        self.items.as_mut_ptr().cast()
    }
}
