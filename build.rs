//! Embeds every `profiles/*.toml` into the binary as a built-in profile.

use std::fmt::Write;
use std::path::Path;

fn main() {
    version();
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("profiles");
    println!("cargo:rerun-if-changed={}", dir.display());
    let mut files: Vec<_> = std::fs::read_dir(&dir)
        .expect("profiles/ directory")
        .filter_map(|e| e.ok().map(|e| e.path()))
        .filter(|p| p.extension().is_some_and(|x| x == "toml"))
        .collect();
    files.sort();
    let mut code = String::from(
        "/// Built-in profiles: (name, TOML text), sorted by name.\npub(crate) static BUILTIN: &[(&str, &str)] = &[\n",
    );
    for f in &files {
        println!("cargo:rerun-if-changed={}", f.display());
        let name = f.file_stem().unwrap().to_str().expect("UTF-8 profile name");
        writeln!(
            code,
            "    ({name:?}, include_str!({:?})),",
            f.display().to_string()
        )
        .unwrap();
    }
    code.push_str("];\n");
    let out = Path::new(&std::env::var("OUT_DIR").unwrap()).join("builtin_profiles.rs");
    std::fs::write(out, code).unwrap();
}

/// `--version`'s commit and build date: `0.1.0 (1a2b3c4 2026-12-05)`. The
/// date is SOURCE_DATE_EPOCH's where it is set (reproducible builds), the
/// commit's otherwise; outside a git checkout, neither is known.
fn version() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let git = |args: &[&str]| {
        std::process::Command::new("git")
            .args(args)
            .current_dir(root)
            .output()
            .ok()
            .filter(|o| o.status.success())
            .map(|o| String::from_utf8_lossy(&o.stdout).trim().to_string())
    };
    let commit = git(&["rev-parse", "--short=9", "HEAD"]);
    let dirty =
        git(&["status", "--porcelain", "--untracked-files=no"]).is_some_and(|s| !s.is_empty());
    let date = std::env::var("SOURCE_DATE_EPOCH")
        .ok()
        .and_then(|e| e.parse::<i64>().ok())
        .map(|e| {
            let days = e.div_euclid(86_400);
            civil_date(days)
        })
        .or_else(|| git(&["log", "-1", "--format=%cd", "--date=short"]));
    let version = match (commit, date) {
        (Some(c), Some(d)) => format!(
            "{} ({c}{} {d})",
            env!("CARGO_PKG_VERSION"),
            if dirty { "-modified" } else { "" }
        ),
        _ => env!("CARGO_PKG_VERSION").to_string(),
    };
    println!("cargo:rustc-env=NETCHAOS_VERSION={version}");
    println!("cargo:rerun-if-env-changed=SOURCE_DATE_EPOCH");
    let head = root.join(".git/HEAD");
    if head.exists() {
        println!("cargo:rerun-if-changed={}", head.display());
        println!(
            "cargo:rerun-if-changed={}",
            root.join(".git/index").display()
        );
        if let Ok(text) = std::fs::read_to_string(&head)
            && let Some(r) = text.trim().strip_prefix("ref: ")
        {
            println!(
                "cargo:rerun-if-changed={}",
                root.join(".git").join(r).display()
            );
        }
    }
}

/// Days since 1970-01-01 as `YYYY-MM-DD` (Howard Hinnant's civil_from_days).
fn civil_date(days: i64) -> String {
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z - era * 146_097;
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let d = doy - (153 * mp + 2) / 5 + 1;
    let m = if mp < 10 { mp + 3 } else { mp - 9 };
    let y = yoe + era * 400 + i64::from(m <= 2);
    format!("{y:04}-{m:02}-{d:02}")
}
