//! The command line: one parser for `capmaas` and its subcommands, driven
//! by a table of flags per command ([`operator::FLAGS`], [`adopt::FLAGS`],
//! [`doctor::FLAGS`]).
//!
//! The rules are the same everywhere, because the subcommands are the ones
//! that write (`adopt --apply`, `doctor --release-orphans --apply`):
//!
//! - a switch is `--x`, `--x=true` or `--x=false`; any other value is
//!   refused, and `--x false` leaves `false` as a stray argument (refused);
//! - a flag with a value takes `--x VALUE` or `--x=VALUE`;
//! - an unknown flag, a stray argument, or a flag given twice (unless its
//!   table entry says it repeats) is refused;
//! - every refusal names the flag and exits with status 2.
//!
//! Adding a flag is one line in its command's table, for example
//! `Flag::value("maas-endpoint-allow", |c, name, v| { c.x = values::parse_name(name, v, NameRule::Subdomain)?; Ok(()) })`,
//! plus its line in the command's usage text (a test checks both agree).
//!
//! Tokenizing (`--x=v`, `--x v`, `-h`, `--`) is lexopt's (vendor-notes/lexopt.md).

pub mod adopt;
pub mod doctor;
pub mod logging;
pub mod operator;
pub mod run;
pub mod values;

use std::ffi::OsString;

use lexopt::Arg;

/// What the command line asks for.
#[derive(Debug)]
pub enum Command {
    Run(Box<operator::Config>),
    Adopt(adopt::Config),
    Doctor(doctor::Config),
    /// Print this usage text and exit 0.
    Help(&'static str),
    Version,
}

/// A refused command line: exit status 2.
#[derive(Debug, PartialEq, Eq)]
pub struct Error {
    /// `capmaas`, `capmaas adopt`, ...: the prefix of the message.
    pub command: &'static str,
    pub message: String,
}

impl std::fmt::Display for Error {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}: {}", self.command, self.message)
    }
}

/// The one entry point: the arguments after the program's name. The first
/// argument picks a subcommand (`adopt`, `doctor`), else the controllers
/// run.
pub fn parse(args: impl IntoIterator<Item = OsString>) -> Result<Command, Error> {
    let mut args = args.into_iter().peekable();
    let first = args.peek().and_then(|a| a.to_str()).map(str::to_string);
    match first.as_deref() {
        Some("adopt") => command(args.skip(1), &adopt::COMMAND, Command::Adopt),
        Some("doctor") => command(args.skip(1), &doctor::COMMAND, Command::Doctor),
        _ => command(args, &operator::COMMAND, |c| Command::Run(Box::new(c))),
    }
}

/// One command's flags, usage and the checks across its flags.
pub struct Spec<C: 'static> {
    pub name: &'static str,
    pub usage: &'static str,
    pub flags: &'static [Flag<C>],
    /// Whether `-V`/`--version` is a flag of this command.
    pub version: bool,
    /// What no single flag can check (flags that exclude each other, ...).
    pub check: fn(&C) -> Result<(), String>,
}

/// One `--name` of a command.
pub struct Flag<C> {
    /// Without the leading `--`.
    pub name: &'static str,
    pub takes: Takes<C>,
    /// Whether it may be given more than once (each value is handed over).
    pub repeats: bool,
}

/// What a flag does with what follows it.
pub enum Takes<C> {
    /// `--x`, `--x=true`, `--x=false`.
    Switch(fn(&mut C, bool)),
    /// `--x VALUE` or `--x=VALUE`: the function checks and stores the
    /// value; it gets the flag's name for its error message.
    Value(fn(&mut C, &str, &str) -> Result<(), String>),
}

impl<C> Flag<C> {
    pub const fn switch(name: &'static str, set: fn(&mut C, bool)) -> Flag<C> {
        Flag {
            name,
            takes: Takes::Switch(set),
            repeats: false,
        }
    }

    pub const fn value(
        name: &'static str,
        set: fn(&mut C, &str, &str) -> Result<(), String>,
    ) -> Flag<C> {
        Flag {
            name,
            takes: Takes::Value(set),
            repeats: false,
        }
    }

    /// A value flag that may be given more than once.
    pub const fn repeated(
        name: &'static str,
        set: fn(&mut C, &str, &str) -> Result<(), String>,
    ) -> Flag<C> {
        Flag {
            repeats: true,
            ..Flag::value(name, set)
        }
    }
}

fn command<C: Default>(
    args: impl IntoIterator<Item = OsString>,
    spec: &Spec<C>,
    wrap: impl FnOnce(C) -> Command,
) -> Result<Command, Error> {
    let error = |message: String| Error {
        command: spec.name,
        message,
    };
    match flags(args, spec).map_err(error)? {
        Parsed::Config(config) => {
            (spec.check)(&config).map_err(error)?;
            Ok(wrap(config))
        }
        Parsed::Help => Ok(Command::Help(spec.usage)),
        Parsed::Version => Ok(Command::Version),
    }
}

enum Parsed<C> {
    Config(C),
    Help,
    Version,
}

/// The flags into a fresh config. Help and version are answered as soon
/// as they are met, whatever follows.
fn flags<C: Default>(
    args: impl IntoIterator<Item = OsString>,
    spec: &Spec<C>,
) -> Result<Parsed<C>, String> {
    let see_help = format!("see {} --help", spec.name);
    let mut config = C::default();
    let mut seen: Vec<&str> = Vec::new();
    let mut parser = lexopt::Parser::from_args(args);
    while let Some(arg) = parser.next().map_err(|e| e.to_string())? {
        let name = match arg {
            Arg::Short('h') | Arg::Long("help") => {
                no_value(&mut parser, "--help")?;
                return Ok(Parsed::Help);
            }
            Arg::Short('V') | Arg::Long("version") if spec.version => {
                no_value(&mut parser, "--version")?;
                return Ok(Parsed::Version);
            }
            Arg::Long(name) => name.to_string(),
            Arg::Short(c) => return Err(format!("unknown flag -{c} ({see_help})")),
            Arg::Value(v) => {
                return Err(format!(
                    "unexpected argument {} ({see_help})",
                    values::shown(&v.to_string_lossy())
                ));
            }
        };
        let Some(flag) = spec.flags.iter().find(|f| f.name == name) else {
            let mut shown = values::shown(&name);
            shown.retain(|c| c != '"');
            return Err(format!("unknown flag --{shown} ({see_help})"));
        };
        if seen.contains(&flag.name) && !flag.repeats {
            return Err(format!("--{name} is given more than once"));
        }
        seen.push(flag.name);
        match flag.takes {
            Takes::Switch(set) => {
                let on = match parser.optional_value() {
                    None => true,
                    Some(v) => values::parse_bool(&name, &text(&name, v)?)?,
                };
                set(&mut config, on);
            }
            Takes::Value(set) => {
                let v = parser
                    .value()
                    .map_err(|_| format!("--{name} needs a value"))?;
                set(&mut config, &name, &text(&name, v)?)?;
            }
        }
    }
    Ok(Parsed::Config(config))
}

fn no_value(parser: &mut lexopt::Parser, flag: &str) -> Result<(), String> {
    match parser.optional_value() {
        Some(_) => Err(format!("{flag} takes no value")),
        None => Ok(()),
    }
}

/// A value as text: UTF-8 and at most [`values::MAX_VALUE_LEN`] bytes.
fn text(name: &str, value: OsString) -> Result<String, String> {
    let value = value
        .into_string()
        .map_err(|_| format!("--{name}: the value is not valid UTF-8"))?;
    if value.len() > values::MAX_VALUE_LEN {
        return Err(format!("--{name}: value too long ({} bytes)", value.len()));
    }
    Ok(value)
}

#[cfg(test)]
mod tests;
