//! What can go wrong in interception, by kind: callers (and the exit code)
//! decide on the kind; the message says what happened and what to do.

use crate::tool::ToolError;

#[derive(Debug, thiserror::Error)]
pub(crate) enum InterceptError {
    /// Not allowed, or not available, here: a missing capability, a
    /// disabled user namespace, a kernel lacking a feature.
    #[error("{0}")]
    Unavailable(String),
    /// A helper command (`nft`, `iptables-restore`, `tc`) is missing or
    /// refused.
    #[error(transparent)]
    Tool(#[from] ToolError),
    /// Another netchaos, or what a killed one left, is in the way.
    #[error("{0}")]
    InTheWay(String),
    /// The namespace agent, or netchaos's thread in a namespace, failed or
    /// is gone.
    #[error("{0}")]
    Agent(String),
    /// A system call failed: what was being done, and why.
    #[error("{what}: {source}")]
    Sys {
        what: String,
        #[source]
        source: std::io::Error,
    },
    /// Not everything installed could be removed again.
    #[error("could not remove everything netchaos installed: {}", .0.join("; "))]
    Leftovers(Vec<String>),
}

impl InterceptError {
    /// A failed system call, for `map_err`.
    pub(crate) fn sys<E: Into<std::io::Error>>(
        what: impl Into<String>,
    ) -> impl FnOnce(E) -> InterceptError {
        let what = what.into();
        move |e| InterceptError::Sys {
            what,
            source: e.into(),
        }
    }
}

pub(crate) type Result<T, E = InterceptError> = std::result::Result<T, E>;
