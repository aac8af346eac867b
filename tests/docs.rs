//! The docs hold what the code does: docs/configuration.md names every key
//! the config file accepts, and nothing else; every relative link in README
//! and docs/ points at a file in the repository; no doc sends a reader
//! outside the repository for something it should say itself, and no file
//! refers to a path outside the repository.

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};

fn repo() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

fn read(p: &Path) -> String {
    std::fs::read_to_string(p).unwrap_or_else(|e| panic!("{}: {e}", p.display()))
}

/// The user-facing docs: README, CONTRIBUTING, docs/*.md and the OpenAPI
/// file (whose links are not Markdown, but whose prose must not point
/// outside either).
fn markdown_files() -> Vec<PathBuf> {
    let mut files = vec![
        repo().join("README.md"),
        repo().join("CONTRIBUTING.md"),
        repo().join("docs/openapi.yaml"),
    ];
    let mut docs: Vec<PathBuf> = std::fs::read_dir(repo().join("docs"))
        .expect("docs/")
        .map(|e| e.expect("entry").path())
        .filter(|p| p.extension().is_some_and(|e| e == "md"))
        .collect();
    docs.sort();
    files.extend(docs);
    files
}

#[test]
fn configuration_doc_names_every_key_and_only_real_ones() {
    let doc = read(&repo().join("docs/configuration.md"));
    // Rows of the key tables start with "| `section.key` |".
    let documented: BTreeSet<String> = doc
        .lines()
        .filter_map(|l| l.strip_prefix("| `"))
        .filter_map(|l| l.split_once("` |"))
        .map(|(k, _)| k.to_string())
        .filter(|k| k.contains('.') && !k.starts_with('-'))
        .collect();
    let code: BTreeSet<String> = verdict::config::file_keys().into_iter().collect();
    let undocumented: Vec<_> = code.difference(&documented).collect();
    let unknown: Vec<_> = documented.difference(&code).collect();
    assert!(
        undocumented.is_empty() && unknown.is_empty(),
        "docs/configuration.md is out of date:\n  keys the config accepts but the doc does not name: {undocumented:?}\n  keys the doc names that the config does not accept: {unknown:?}"
    );
}

/// The README is read in two minutes: what verdict is, the two commands, a
/// first allow and deny, and where the rest is. Detail goes to docs/.
#[test]
fn readme_stays_short_and_keeps_its_two_commands() {
    let readme = read(&repo().join("README.md"));
    let lines = readme.lines().count();
    assert!(
        lines <= 150,
        "README.md has {lines} lines; move detail to docs/ (at most 150)"
    );
    for command in ["cargo run --release -- serve", "cargo test"] {
        assert!(readme.contains(command), "README.md lost `{command}`");
    }
    for decision in ["\"decision\":\"allow\"", "\"decision\":\"deny\""] {
        assert!(readme.contains(decision), "README.md shows no {decision}");
    }
}

#[test]
fn relative_links_resolve_and_nothing_points_outside_the_repo() {
    let mut broken = Vec::new();
    for file in markdown_files() {
        let text = read(&file);
        let dir = file.parent().unwrap();
        for (n, line) in text.lines().enumerate() {
            let shared = ["..", "/shared"].concat();
            let (design, section) = (["DESI", "GN.md"].concat(), ["DESI", "GN §"].concat());
            for outside in [shared.as_str(), design.as_str(), section.as_str()] {
                if line.contains(outside) {
                    broken.push(format!(
                        "{}:{}: points outside the repo ({outside})",
                        file.display(),
                        n + 1
                    ));
                }
            }
            let mut rest = line;
            while let Some(at) = rest.find("](") {
                rest = &rest[at + 2..];
                let Some(end) = rest.find(')') else { break };
                let target = &rest[..end];
                rest = &rest[end..];
                if target.starts_with("http://")
                    || target.starts_with("https://")
                    || target.starts_with('#')
                    || target.starts_with("mailto:")
                {
                    continue;
                }
                let path = target.split('#').next().unwrap_or(target);
                if !dir.join(path).exists() {
                    broken.push(format!(
                        "{}:{}: broken link {target}",
                        file.display(),
                        n + 1
                    ));
                }
            }
        }
    }
    assert!(broken.is_empty(), "{}", broken.join("\n"));
}

/// No file in the repository refers to a place outside it: the design
/// notes beside the repo, or a path on one machine. (The needles are built
/// from pieces so that this file does not match itself.)
#[test]
fn no_file_points_outside_the_repo() {
    let needles = [
        ["..", "/shared"].concat(),
        ["shared", "/"].concat(),
        ["/wo", "rk/"].concat(),
        ["/ho", "me/"].concat(),
        ["/ro", "ot/"].concat(),
        // The design notes the project started from are not in the repo:
        // a comment or doc cites the doc that holds the rule instead.
        ["DESI", "GN §"].concat(),
        ["DESI", "GN.md"].concat(),
        ["DESI", "GN's"].concat(),
        ["notes", "/audit.md"].concat(),
    ];
    let listed = std::process::Command::new("git")
        .args(["ls-files", "-z"])
        .current_dir(repo())
        .output()
        .ok()
        .filter(|o| o.status.success())
        .map(|o| {
            o.stdout
                .split(|b| *b == 0)
                .filter(|p| !p.is_empty())
                .map(|p| repo().join(String::from_utf8_lossy(p).as_ref()))
                .collect::<Vec<_>>()
        });
    let Some(files) = listed else {
        panic!("git ls-files failed: this test reads the repository's tracked files");
    };
    let mut found = Vec::new();
    for file in files {
        if file.ends_with("Cargo.lock") {
            continue;
        }
        let Ok(text) = std::fs::read_to_string(&file) else {
            continue; // binary (the screenshot) or removed in the work tree
        };
        for (n, line) in text.lines().enumerate() {
            if let Some(needle) = needles.iter().find(|n| line.contains(n.as_str())) {
                found.push(format!("{}:{}: {needle}", file.display(), n + 1));
            }
        }
    }
    assert!(found.is_empty(), "{}", found.join("\n"));
}
