//! The helper commands netchaos runs (`ip`, `tc`, `nft`,
//! `iptables-restore`, …): finding them — on the PATH, and in `/usr/sbin`
//! and `/sbin`, where distributions put them but an ordinary user's PATH
//! does not look — running them, and saying once, here, how they failed,
//! so that callers decide on a kind of failure rather than on a tool's
//! English.

use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

/// Where a command is looked for besides the PATH.
const SYSTEM_DIRS: &[&str] = &["/usr/sbin", "/sbin", "/usr/local/sbin"];

/// How a helper command failed.
#[derive(Debug, thiserror::Error)]
pub(crate) enum ToolError {
    #[error(
        "the `{tool}` command was not found (looked in {searched}): install {package} (apt-get install {package})"
    )]
    Missing {
        tool: String,
        package: &'static str,
        searched: String,
    },
    #[error("cannot run {tool}: {source}")]
    Spawn {
        tool: String,
        source: std::io::Error,
    },
    #[error("`{command}` failed: {stderr}")]
    Failed { command: String, stderr: String },
}

impl ToolError {
    /// What the tool said, when it ran and failed.
    pub(crate) fn stderr(&self) -> &str {
        match self {
            ToolError::Failed { stderr, .. } => stderr,
            _ => "",
        }
    }

    /// The tool said that what it was asked about does not exist (a table,
    /// a device, a kernel object): ENOENT.
    pub(crate) fn no_such_object(&self) -> bool {
        self.stderr().contains("No such file or directory")
    }

    /// The tool was refused the privilege: EPERM.
    pub(crate) fn not_permitted(&self) -> bool {
        self.stderr().contains("Operation not permitted")
    }

    /// Whether the tool's complaint quotes `word` (nft and tc echo the part
    /// of their input they refused).
    pub(crate) fn mentions(&self, word: &str) -> bool {
        self.stderr().contains(word)
    }
}

/// The Debian package that ships a tool.
fn package(tool: &str) -> &'static str {
    match tool {
        "nft" => "nftables",
        t if t.starts_with("iptables") || t.starts_with("ip6tables") => "iptables",
        _ => "iproute2",
    }
}

/// The directories searched for `tool`, in order: the PATH, then the
/// system directories it lacks.
fn search_dirs() -> Vec<PathBuf> {
    let path = std::env::var_os("PATH").unwrap_or_default();
    let mut dirs: Vec<PathBuf> = Vec::new();
    for d in std::env::split_paths(&path).chain(SYSTEM_DIRS.iter().map(PathBuf::from)) {
        if !d.as_os_str().is_empty() && !dirs.contains(&d) {
            dirs.push(d);
        }
    }
    dirs
}

/// The full path of `tool`.
pub(crate) fn locate(tool: &str) -> Result<PathBuf, ToolError> {
    let dirs = search_dirs();
    dirs.iter()
        .map(|d| d.join(tool))
        .find(|p| is_executable(p))
        .ok_or_else(|| ToolError::Missing {
            tool: tool.to_string(),
            package: package(tool),
            searched: dirs
                .iter()
                .map(|d| d.display().to_string())
                .collect::<Vec<_>>()
                .join(", "),
        })
}

fn is_executable(p: &Path) -> bool {
    use std::os::unix::fs::PermissionsExt;
    std::fs::metadata(p).is_ok_and(|m| m.is_file() && m.permissions().mode() & 0o111 != 0)
}

/// A command for `tool` (found as [`locate`] finds it), to adjust and run
/// by hand.
pub(crate) fn command(tool: &str) -> Result<Command, ToolError> {
    Ok(Command::new(locate(tool)?))
}

/// Runs `tool ARGS`, feeding `input` on stdin if given; its stdout on
/// success.
pub(crate) fn run(tool: &str, args: &[&str], input: Option<&str>) -> Result<String, ToolError> {
    let mut cmd = command(tool)?;
    cmd.args(args)
        .stdin(if input.is_some() {
            Stdio::piped()
        } else {
            Stdio::null()
        })
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    let spawn = |source| ToolError::Spawn {
        tool: tool.to_string(),
        source,
    };
    let mut child = cmd.spawn().map_err(spawn)?;
    if let Some(text) = input {
        let mut stdin = child.stdin.take().expect("piped stdin");
        stdin.write_all(text.as_bytes()).map_err(spawn)?;
    }
    let out = child.wait_with_output().map_err(spawn)?;
    if out.status.success() {
        return Ok(String::from_utf8_lossy(&out.stdout).into_owned());
    }
    Err(ToolError::Failed {
        command: std::iter::once(tool)
            .chain(args.iter().copied())
            .collect::<Vec<_>>()
            .join(" "),
        stderr: String::from_utf8_lossy(&out.stderr).trim().to_string(),
    })
}

/// Whether `tool ARGS` succeeds (its output ignored): a query.
pub(crate) fn succeeds(tool: &str, args: &[&str]) -> bool {
    run(tool, args, None).is_ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn system_directories_are_searched_after_the_path() {
        let dirs = search_dirs();
        for d in SYSTEM_DIRS {
            assert!(dirs.iter().any(|x| x == Path::new(d)), "{d}");
        }
        assert!(locate("sh").is_ok());
        let e = locate("netchaos-no-such-tool").unwrap_err();
        let text = e.to_string();
        assert!(
            text.contains("/usr/sbin") && text.contains("/sbin,"),
            "{text}"
        );
        assert!(text.contains("install iproute2"), "{text}");
    }

    #[test]
    fn failures_are_classified_once() {
        let e = run(
            "sh",
            &["-c", "echo 'Error: No such file or directory' >&2; exit 1"],
            None,
        )
        .unwrap_err();
        assert!(e.no_such_object() && !e.not_permitted(), "{e}");
        assert_eq!(
            e.to_string(),
            "`sh -c echo 'Error: No such file or directory' >&2; exit 1` failed: Error: No such file or directory"
        );
        assert_eq!(run("sh", &["-c", "cat"], Some("fed")).unwrap(), "fed");
    }
}
