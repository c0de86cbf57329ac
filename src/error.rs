//! The library's error type and the exit codes it maps to: 2 for bad usage
//! or an invalid profile (nothing was started), 1 for a failure at run time.

use crate::settings::ProfileError;

#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// The command line asks for something impossible or incomplete.
    #[error("{0}")]
    Usage(String),
    /// A profile, `--fault` or parameter is invalid.
    #[error("{0}")]
    Profile(#[from] ProfileError),
    /// Something failed while running (a busy port, a missing privilege).
    #[error("{0:#}")]
    Runtime(#[from] anyhow::Error),
}

impl Error {
    pub fn exit_code(&self) -> u8 {
        match self {
            Error::Usage(_) | Error::Profile(_) => 2,
            Error::Runtime(_) => 1,
        }
    }

    pub fn runtime(msg: impl std::fmt::Display) -> Error {
        Error::Runtime(anyhow::anyhow!("{msg}"))
    }
}

pub type Result<T, E = Error> = std::result::Result<T, E>;
