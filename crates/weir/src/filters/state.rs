//! State of named filters kept across reloads (rate-limit and concurrency tables, breakers),
//! held by the registry (`runtime/registry.rs`) and handed to the filter compiler, so that a
//! reload that keeps a filter keeps its state, as nginx keeps a `limit_req` zone of the same
//! size.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

/// Filter state kept across reloads.
#[derive(Debug, Default)]
pub struct FilterState(Mutex<HashMap<String, Arc<dyn std::any::Any + Send + Sync>>>);

impl FilterState {
    /// The state kept under `key`, or `make()`'s, kept from now on.
    pub fn get_or<T: std::any::Any + Send + Sync>(
        &self,
        key: &str,
        make: impl FnOnce() -> Arc<T>,
    ) -> Arc<T> {
        match self.try_get_or(key, || Ok::<_, std::convert::Infallible>(make())) {
            Ok(found) => found,
            Err(never) => match never {},
        }
    }

    /// [`FilterState::get_or`] where making the state may fail (nothing is kept then).
    pub fn try_get_or<T: std::any::Any + Send + Sync, E>(
        &self,
        key: &str,
        make: impl FnOnce() -> Result<Arc<T>, E>,
    ) -> Result<Arc<T>, E> {
        let mut map = self.0.lock().unwrap_or_else(|p| p.into_inner());
        if let Some(found) = map.get(key).and_then(|a| a.clone().downcast::<T>().ok()) {
            return Ok(found);
        }
        let made = make()?;
        map.insert(key.to_string(), made.clone());
        Ok(made)
    }

    /// Forgets the state of filters not in `keys`.
    pub fn retain(&self, keys: &[String]) {
        self.0
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .retain(|k, _| keys.contains(k));
    }
}
