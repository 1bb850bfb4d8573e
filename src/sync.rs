//! Locking that outlives a panic. A thread that panics while holding a
//! lock poisons it; every lock in the product guards data that each write
//! leaves whole, so the others go on with it as it is.
//!
//! Beside the layers (like `clock`): every layer locks.

use std::sync::{Mutex, MutexGuard, PoisonError};

/// Locks `m`, poisoned or not.
pub fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(PoisonError::into_inner)
}
