//! `rverbs`: RDMA tools built on rverbs (no libibverbs, no librdmacm).
//!
//! Subcommands live in their own modules; each exposes a `run(args)` function that takes the
//! arguments after the subcommand name. To add one: write the module, then add one line to
//! [`COMMANDS`] (name, one-line summary, usage text, run function).

#![deny(unsafe_code)]

use std::ffi::OsString;
use std::process::ExitCode;

mod devices;
mod devinfo;
mod link;
mod rc_pingpong;
mod rdma_client;
mod rdma_server;
mod rping;
mod selftest;

/// What a subcommand returns: any error is printed as `rverbs <cmd>: <error>` and exits 1.
pub type CmdResult = Result<(), Box<dyn std::error::Error>>;

/// One subcommand.
pub struct Command {
    pub name: &'static str,
    pub summary: &'static str,
    pub usage: &'static str,
    pub run: fn(Vec<OsString>) -> CmdResult,
}

/// The subcommands, in the order `rverbs help` lists them.
pub const COMMANDS: &[Command] = &[
    Command {
        name: "devices",
        summary: "list RDMA devices and their node GUIDs (like ibv_devices)",
        usage: devices::USAGE,
        run: devices::run,
    },
    Command {
        name: "devinfo",
        summary: "show device and port attributes (like ibv_devinfo)",
        usage: devinfo::USAGE,
        run: devinfo::run,
    },
    Command {
        name: "link",
        summary: "add, show and delete software RDMA links (rxe)",
        usage: link::USAGE,
        run: link::run,
    },
    Command {
        name: "rc-pingpong",
        summary: "RC ping-pong latency test, interoperable with ibv_rc_pingpong",
        usage: rc_pingpong::USAGE,
        run: rc_pingpong::run,
    },
    Command {
        name: "rdma-server",
        summary: "rdma_cm server of librdmacm's rdma_server example (one 16-byte exchange)",
        usage: rdma_server::USAGE,
        run: rdma_server::run,
    },
    Command {
        name: "rdma-client",
        summary: "rdma_cm client of librdmacm's rdma_client example (one 16-byte exchange)",
        usage: rdma_client::USAGE,
        run: rdma_client::run,
    },
    Command {
        name: "rping",
        summary: "RDMA READ/WRITE ping-pong over rdma_cm, interoperable with rping",
        usage: rping::USAGE,
        run: rping::run,
    },
    Command {
        name: "selftest",
        summary: "loopback battery of what a device supports: PASS/FAIL/SKIP per case, JSON report",
        usage: selftest::USAGE,
        run: selftest::run,
    },
];

/// An error in the command line (as opposed to one from the system).
#[derive(Debug)]
pub struct UsageError(pub String);

impl std::fmt::Display for UsageError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0)
    }
}

impl std::error::Error for UsageError {}

/// Shorthand for a usage error.
pub fn usage_err(msg: impl Into<String>) -> Box<dyn std::error::Error> {
    Box::new(UsageError(msg.into()))
}

fn help_text() -> String {
    let mut s = String::from(
        "rverbs: RDMA tools in pure Rust (no libibverbs, no librdmacm)\n\n\
         Usage: rverbs <command> [args...]\n       rverbs help <command>\n\nCommands:\n",
    );
    let w = COMMANDS
        .iter()
        .map(|c| c.name.len())
        .max()
        .unwrap_or(0)
        .max(4);
    for c in COMMANDS {
        s += &format!("  {:w$}  {}\n", c.name, c.summary);
    }
    s += &format!(
        "  {:w$}  {}\n",
        "help", "list the commands, or show one's usage"
    );
    s
}

fn find(name: &str) -> Option<&'static Command> {
    COMMANDS.iter().find(|c| c.name == name)
}

/// Runs `rverbs` with `args` (without `argv[0]`); returns what to print and the exit code.
fn dispatch(mut args: Vec<OsString>) -> ExitCode {
    if args.is_empty() {
        eprint!("{}", help_text());
        return ExitCode::from(1);
    }
    let first = args.remove(0);
    let first = first.to_string_lossy().into_owned();
    match first.as_str() {
        "help" | "-h" | "--help" => {
            match args.first().map(|a| a.to_string_lossy().into_owned()) {
                None => print!("{}", help_text()),
                Some(c) => match find(&c) {
                    Some(cmd) => print!("{}", cmd.usage),
                    None => {
                        eprintln!("rverbs help: unknown command {c:?}\n\n{}", help_text());
                        return ExitCode::from(1);
                    }
                },
            }
            ExitCode::SUCCESS
        }
        "-V" | "--version" => {
            println!("rverbs {}", env!("CARGO_PKG_VERSION"));
            ExitCode::SUCCESS
        }
        name => match find(name) {
            Some(cmd) => match (cmd.run)(args) {
                Ok(()) => ExitCode::SUCCESS,
                Err(e) => {
                    if e.is::<UsageError>() || e.is::<lexopt::Error>() {
                        eprintln!("rverbs {name}: {e}\n\n{}", cmd.usage);
                    } else {
                        eprintln!("rverbs {name}: {e}");
                    }
                    ExitCode::from(1)
                }
            },
            None => {
                eprintln!("rverbs: unknown command {name:?}\n\n{}", help_text());
                ExitCode::from(1)
            }
        },
    }
}

fn main() -> ExitCode {
    dispatch(std::env::args_os().skip(1).collect())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn help_lists_every_command() {
        let h = help_text();
        for c in COMMANDS {
            assert!(h.contains(c.name), "{h}");
            assert!(h.contains(c.summary), "{h}");
        }
    }

    #[test]
    fn command_names_are_unique() {
        for (i, a) in COMMANDS.iter().enumerate() {
            for b in &COMMANDS[i + 1..] {
                assert_ne!(a.name, b.name);
            }
        }
    }
}
