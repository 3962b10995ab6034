//! [`Renewable`]: the Redis connection, replaced after a refused `AUTH`. The `redis` crate's
//! `ConnectionManager` reconnects after I/O errors only: a connection whose `AUTH` failed stays
//! failed, and every later call would answer the same error even once the password is right
//! on the server. Such a failure drops the manager for a new (lazy) one, so the next check
//! connects and authenticates again.

use redis::aio::{ConnectionManager, ConnectionManagerConfig};
use redis::{Client, RedisError};

use crate::sync::RwLock;

pub(crate) struct Renewable {
    client: Client,
    config: ConnectionManagerConfig,
    current: RwLock<ConnectionManager>,
}

impl Renewable {
    /// A lazy connection to `client` (nothing is sent before the first call).
    pub(crate) fn new(client: Client, config: ConnectionManagerConfig) -> Result<Self, RedisError> {
        let current = ConnectionManager::new_lazy_with_config(client.clone(), config.clone())?;
        Ok(Self {
            client,
            config,
            current: RwLock::new(current),
        })
    }

    /// The connection to call on (a clone shares it).
    pub(crate) fn get(&self) -> ConnectionManager {
        self.current.read().clone()
    }

    /// Replaces the connection with a new lazy one, after a refused `AUTH`. Calls already out
    /// keep their clone of the old one.
    pub(crate) fn renew(&self) {
        if let Ok(fresh) =
            ConnectionManager::new_lazy_with_config(self.client.clone(), self.config.clone())
        {
            *self.current.write() = fresh;
        }
    }
}
