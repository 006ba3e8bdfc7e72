//! `pollfs generate man DIR` and `pollfs generate completions DIR`: the
//! manual pages (section 8) and the bash, zsh and fish completions,
//! written from the clap definitions of the commands so they cannot drift
//! from them.
//!
//! The generator has its own parser, picked in `main` before the product's
//! is built, so that it appears in no help, page or completion. `just man`
//! writes into `docs/man` and `docs/completions`; the test below writes
//! into a temporary directory and fails when the checked-in files differ.
//!
//! The pages: `pollfs.8`, one `pollfs-SUBCOMMAND.8` per subcommand (and
//! per `mirror` action), and `mount.pollfs.8` for the mount(8) helper
//! (`mount.fuse.pollfs.8` is a `.so` link to it).

use std::ffi::OsString;
use std::fs;
use std::path::{Path, PathBuf};

use anyhow::Context;
use clap::Parser;
use clap_complete::Shell;

use crate::mount::helper;

/// The generator's command line (`pollfs generate ...`).
#[derive(Parser, Debug)]
#[command(name = "pollfs generate")]
struct Args {
    #[command(subcommand)]
    what: What,
}

#[derive(clap::Subcommand, Debug)]
enum What {
    /// The manual pages, section 8.
    Man {
        /// Where to write them.
        dir: PathBuf,
    },
    /// The bash (`pollfs.bash`), zsh (`_pollfs`) and fish (`pollfs.fish`)
    /// completions.
    Completions {
        /// Where to write them.
        dir: PathBuf,
    },
}

/// Whether `argv` (the program's whole command line) asks for the
/// generator.
pub fn wanted(argv: &[OsString]) -> bool {
    argv.get(1).is_some_and(|a| a == "generate")
}

/// Runs `pollfs generate` (`argv` from the program name on) for `cli`, the
/// product's command.
pub fn run(argv: &[OsString], cli: clap::Command) -> anyhow::Result<()> {
    let args = Args::parse_from(argv.iter().skip(1));
    match args.what {
        What::Man { dir } => write_files(&dir, &man_pages(cli)?),
        What::Completions { dir } => write_files(&dir, &completions(cli)),
    }
}

/// One generated file: its name and its bytes.
type File = (String, Vec<u8>);

fn write_files(dir: &Path, files: &[File]) -> anyhow::Result<()> {
    fs::create_dir_all(dir).with_context(|| format!("creating {}", dir.display()))?;
    for (name, bytes) in files {
        let path = dir.join(name);
        fs::write(&path, bytes).with_context(|| format!("writing {}", path.display()))?;
    }
    Ok(())
}

/// The manual pages of `cli`, its subcommands and the mount helper.
fn man_pages(cli: clap::Command) -> anyhow::Result<Vec<File>> {
    let mut cli = cli.disable_help_subcommand(true);
    // Gives each subcommand its display name, `pollfs-mount`.
    cli.build();
    let mut pages = Vec::new();
    let mount = cli
        .find_subcommand("mount")
        .context("the command has no `mount` subcommand")?;
    let helper = helper::command(mount);
    pages.push(man_page(helper)?);
    pages.push((
        format!("{}.8", helper::FSTAB_NAME),
        format!(".so man8/{}.8\n", helper::NAME).into_bytes(),
    ));
    add_pages(&cli, &mut pages)?;
    pages.sort();
    Ok(pages)
}

/// `cmd`'s page and, depth first, its visible subcommands'.
fn add_pages(cmd: &clap::Command, pages: &mut Vec<File>) -> anyhow::Result<()> {
    for sub in cmd.get_subcommands().filter(|s| !s.is_hide_set()) {
        add_pages(sub, pages)?;
    }
    pages.push(man_page(cmd.clone())?);
    Ok(())
}

fn man_page(cmd: clap::Command) -> anyhow::Result<File> {
    let man = clap_mangen::Man::new(cmd)
        .section("8")
        .manual("pollfs")
        .source(format!("pollfs {}", env!("CARGO_PKG_VERSION")));
    let mut bytes = Vec::new();
    man.render(&mut bytes)?;
    Ok((man.get_filename(), bytes))
}

/// The completions of `cli` for bash, zsh and fish.
fn completions(mut cli: clap::Command) -> Vec<File> {
    [Shell::Bash, Shell::Zsh, Shell::Fish]
        .into_iter()
        .map(|shell| {
            let mut bytes = Vec::new();
            clap_complete::generate(shell, &mut cli, "pollfs", &mut bytes);
            let name = match shell {
                Shell::Zsh => "_pollfs".to_owned(),
                shell => format!("pollfs.{shell}"),
            };
            (name, bytes)
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::CommandFactory;

    /// The files in `dir` whose names `generated` picks.
    fn checked_in(dir: &Path, generated: fn(&str) -> bool) -> Vec<File> {
        let mut files: Vec<File> = fs::read_dir(dir)
            .unwrap()
            .map(|e| e.unwrap().file_name().into_string().unwrap())
            .filter(|name| generated(name))
            .map(|name| {
                let bytes = fs::read(dir.join(&name)).unwrap();
                (name, bytes)
            })
            .collect();
        files.sort();
        files
    }

    /// Writes `files` into a fresh temporary directory, reads them back,
    /// and compares them with what `dir` holds.
    fn assert_fresh(dir: &str, files: &[File], generated: fn(&str) -> bool) {
        let tmp = std::env::temp_dir().join(format!(
            "pollfs-generate-{}-{}",
            std::process::id(),
            dir.replace('/', "-")
        ));
        let _ = fs::remove_dir_all(&tmp);
        write_files(&tmp, files).unwrap();
        let fresh = checked_in(&tmp, generated);
        fs::remove_dir_all(&tmp).unwrap();
        let repo = Path::new(env!("CARGO_MANIFEST_DIR")).join("..").join(dir);
        let old = checked_in(&repo, generated);
        let names = |v: &[File]| v.iter().map(|f| f.0.clone()).collect::<Vec<_>>();
        assert_eq!(
            names(&old),
            names(&fresh),
            "{dir} does not hold the files the commands give: run `just man`"
        );
        for ((name, old), (_, fresh)) in old.iter().zip(&fresh) {
            assert!(
                old == fresh,
                "{dir}/{name} differs from the commands' definitions: run `just man`"
            );
        }
    }

    #[test]
    fn checked_in_man_pages_are_fresh() {
        let pages = man_pages(crate::Cli::command()).unwrap();
        assert!(pages.iter().any(|p| p.0 == "pollfs-mount.8"));
        assert!(pages.iter().any(|p| p.0 == "mount.pollfs.8"));
        // libpollfs.3 is written by hand.
        assert_fresh("docs/man", &pages, |name| name.ends_with(".8"));
    }

    #[test]
    fn checked_in_completions_are_fresh() {
        let files = completions(crate::Cli::command());
        assert_fresh("docs/completions", &files, |_| true);
    }

    #[test]
    fn generate_is_its_own_command() {
        let argv = |v: &[&str]| v.iter().map(OsString::from).collect::<Vec<_>>();
        assert!(wanted(&argv(&["pollfs", "generate", "man", "d"])));
        assert!(!wanted(&argv(&["pollfs", "mount", "generate", "d"])));
        let bash = completions(crate::Cli::command()).remove(0).1;
        assert!(!String::from_utf8(bash).unwrap().contains("generate"));
    }
}
